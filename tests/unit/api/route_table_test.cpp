// Route matching: templates, captured segments, HEAD, trailing slashes, 405 detection, unknown paths.
#include "api/route_table.h"

#include <gtest/gtest.h>

namespace mmserve::api {
namespace {

TEST(RouteTable, MatchesEveryDocumentedRoute) {
  struct Case {
    const char* method;
    const char* path;
    RouteId id;
  };
  const std::vector<Case> cases = {
      {"GET", "/v2", RouteId::kServerMetadata},
      {"GET", "/v2/health/live", RouteId::kHealthLive},
      {"GET", "/v2/health/ready", RouteId::kHealthReady},
      {"GET", "/v2/models/clip", RouteId::kModelMetadata},
      {"GET", "/v2/models/clip/versions/1", RouteId::kModelVersionMetadata},
      {"GET", "/v2/models/clip/ready", RouteId::kModelReady},
      {"GET", "/v2/models/clip/versions/1/ready", RouteId::kModelVersionReady},
      {"POST", "/v2/models/clip/infer", RouteId::kModelInfer},
      {"POST", "/v2/models/clip/versions/1/infer", RouteId::kModelVersionInfer},
      {"POST", "/v2/models/llm/generate", RouteId::kModelGenerate},
      {"POST", "/v2/models/llm/versions/1/generate", RouteId::kModelVersionGenerate},
      {"POST", "/v2/models/llm/generate_stream", RouteId::kModelGenerateStream},
      {"POST", "/v2/models/llm/versions/1/generate_stream", RouteId::kModelVersionGenerateStream},
      {"POST", "/v2/repository/index", RouteId::kRepositoryIndex},
      {"POST", "/v2/repository/models/clip/load", RouteId::kRepositoryLoad},
      {"POST", "/v2/repository/models/clip/unload", RouteId::kRepositoryUnload},
      {"GET", "/v1/models", RouteId::kOpenAiModels},
      {"POST", "/v1/embeddings", RouteId::kOpenAiEmbeddings},
      {"POST", "/v1/audio/transcriptions", RouteId::kOpenAiTranscriptions},
      {"POST", "/v1/audio/translations", RouteId::kOpenAiTranslations},
      {"GET", "/metrics", RouteId::kMetrics},
      {"GET", "/healthz", RouteId::kHealthz},
      {"HEAD", "/healthz", RouteId::kHealthz},
      {"GET", "/v2/", RouteId::kServerMetadata},
  };
  for (const Case& c : cases) {
    const RouteMatch m = match_route(c.method, c.path);
    ASSERT_NE(m.route, nullptr) << c.method << " " << c.path;
    EXPECT_EQ(m.route->id, c.id) << c.path;
  }
}

TEST(RouteTable, CapturesModelAndVersion) {
  RouteMatch m = match_route("POST", "/v2/models/demo-clip/versions/7/infer");
  ASSERT_NE(m.route, nullptr);
  EXPECT_STREQ(m.route->pattern, "/v2/models/{model}/versions/{version}/infer");
  EXPECT_EQ(m.model, "demo-clip");
  EXPECT_EQ(m.version, "7");
  m = match_route("POST", "/v2/repository/models/x/load");
  EXPECT_EQ(m.model, "x");
}

TEST(RouteTable, WrongMethodGivesAllow) {
  RouteMatch m = match_route("GET", "/v2/models/clip/infer");
  EXPECT_EQ(m.route, nullptr);
  EXPECT_EQ(m.allow, "POST");
  m = match_route("DELETE", "/healthz");
  EXPECT_EQ(m.route, nullptr);
  EXPECT_EQ(m.allow, "GET");
}

TEST(RouteTable, UnknownPaths) {
  for (const char* path : {"/", "", "/v3", "/v2/models", "/v2/models//infer", "/v2/models/a/b/c/infer", "v2",
                           "/metrics/x", "/v1/embeddings/x"}) {
    const RouteMatch m = match_route("GET", path);
    EXPECT_EQ(m.route, nullptr) << path;
    EXPECT_TRUE(m.allow.empty()) << path;
  }
  EXPECT_EQ(match_route("POST", "/v2/models//infer").route, nullptr);
}

TEST(RouteTable, FamilyOfPath) {
  EXPECT_EQ(family_of_path("/v1/embeddings"), ApiFamily::kOpenAi);
  EXPECT_EQ(family_of_path("/v1"), ApiFamily::kOpenAi);
  EXPECT_EQ(family_of_path("/v2/models/x"), ApiFamily::kKServe);
  EXPECT_EQ(family_of_path("/v10"), ApiFamily::kKServe);
}

}  // namespace
}  // namespace mmserve::api
