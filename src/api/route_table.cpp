// The route table and its segment matcher (see route_table.h). Tests: tests/unit/api/route_table_test.cpp.
#include "api/route_table.h"

namespace mmserve::api {
namespace {

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty() || path.front() != '/') return out;
  path.remove_prefix(1);
  while (true) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

// Matches `path` against `pattern`, capturing {model} and {version}.
bool match_pattern(std::string_view pattern, const std::vector<std::string_view>& segments, RouteMatch& out) {
  const std::vector<std::string_view> parts = split_path(pattern);
  if (parts.size() != segments.size()) return false;
  std::string model, version;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "{model}" || parts[i] == "{version}") {
      if (segments[i].empty()) return false;
      (parts[i] == "{model}" ? model : version) = std::string(segments[i]);
    } else if (parts[i] != segments[i]) {
      return false;
    }
  }
  out.model = std::move(model);
  out.version = std::move(version);
  return true;
}

}  // namespace

const std::vector<Route>& routes() {
  static const std::vector<Route> kRoutes = {
      {RouteId::kServerMetadata, "GET", "/v2", ApiFamily::kKServe, true, false},
      {RouteId::kHealthLive, "GET", "/v2/health/live", ApiFamily::kKServe, false, false},
      {RouteId::kHealthReady, "GET", "/v2/health/ready", ApiFamily::kKServe, false, false},
      {RouteId::kModelMetadata, "GET", "/v2/models/{model}", ApiFamily::kKServe, true, false},
      {RouteId::kModelVersionMetadata, "GET", "/v2/models/{model}/versions/{version}", ApiFamily::kKServe, true, false},
      {RouteId::kModelReady, "GET", "/v2/models/{model}/ready", ApiFamily::kKServe, true, false},
      {RouteId::kModelVersionReady, "GET", "/v2/models/{model}/versions/{version}/ready", ApiFamily::kKServe, true,
       false},
      {RouteId::kModelInfer, "POST", "/v2/models/{model}/infer", ApiFamily::kKServe, true, true},
      {RouteId::kModelVersionInfer, "POST", "/v2/models/{model}/versions/{version}/infer", ApiFamily::kKServe, true,
       true},
      {RouteId::kModelGenerate, "POST", "/v2/models/{model}/generate", ApiFamily::kKServe, true, true},
      {RouteId::kModelVersionGenerate, "POST", "/v2/models/{model}/versions/{version}/generate", ApiFamily::kKServe,
       true, true},
      {RouteId::kModelGenerateStream, "POST", "/v2/models/{model}/generate_stream", ApiFamily::kKServe, true, true},
      {RouteId::kModelVersionGenerateStream, "POST", "/v2/models/{model}/versions/{version}/generate_stream",
       ApiFamily::kKServe, true, true},
      {RouteId::kRepositoryIndex, "POST", "/v2/repository/index", ApiFamily::kKServe, true, true},
      {RouteId::kRepositoryLoad, "POST", "/v2/repository/models/{model}/load", ApiFamily::kKServe, true, true},
      {RouteId::kRepositoryUnload, "POST", "/v2/repository/models/{model}/unload", ApiFamily::kKServe, true, true},
      {RouteId::kOpenAiModels, "GET", "/v1/models", ApiFamily::kOpenAi, true, false},
      {RouteId::kOpenAiEmbeddings, "POST", "/v1/embeddings", ApiFamily::kOpenAi, true, true},
      {RouteId::kSegment, "POST", "/v1/segment", ApiFamily::kOpenAi, true, true},
      {RouteId::kOpenAiCompletions, "POST", "/v1/completions", ApiFamily::kOpenAi, true, true},
      {RouteId::kOpenAiChatCompletions, "POST", "/v1/chat/completions", ApiFamily::kOpenAi, true, true},
      {RouteId::kOpenAiTranscriptions, "POST", "/v1/audio/transcriptions", ApiFamily::kOpenAi, true, true},
      {RouteId::kOpenAiTranslations, "POST", "/v1/audio/translations", ApiFamily::kOpenAi, true, true},
      {RouteId::kMetrics, "GET", "/metrics", ApiFamily::kPlain, true, false},
      {RouteId::kHealthz, "GET", "/healthz", ApiFamily::kPlain, false, false},
      {RouteId::kDebugTopology, "GET", "/v2/debug/topology", ApiFamily::kKServe, true, false},
      {RouteId::kLoadLoraAdapter, "POST", "/v1/load_lora_adapter", ApiFamily::kOpenAi, true, true},
      {RouteId::kUnloadLoraAdapter, "POST", "/v1/unload_lora_adapter", ApiFamily::kOpenAi, true, true},
      {RouteId::kAdapters, "GET", "/v2/adapters", ApiFamily::kKServe, true, false},
  };
  return kRoutes;
}

RouteMatch match_route(std::string_view method, std::string_view path) {
  if (method == "HEAD") method = "GET";
  // A trailing slash is the same resource ("/v2/" == "/v2").
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const std::vector<std::string_view> segments = split_path(path);
  RouteMatch out;
  for (const Route& route : routes()) {
    RouteMatch candidate;
    if (!match_pattern(route.pattern, segments, candidate)) continue;
    if (method == route.method) {
      candidate.route = &route;
      return candidate;
    }
    out.allow = route.method;
  }
  return out;
}

ApiFamily family_of_path(std::string_view path) {
  return path.substr(0, 4) == "/v1/" || path == "/v1" ? ApiFamily::kOpenAi : ApiFamily::kKServe;
}

}  // namespace mmserve::api
