// OpenAI embeddings codec: string/array input, data-URL images, URL refusal, encoding formats, usage, the
// error cases, and /v1/models.
#include "api/openai_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "api/base64.h"

namespace mmserve::api {
namespace {

using nlohmann::json;
using serving::InputKind;

Status error_of(const std::string& body, const CodecOptions& options = {}) {
  StatusOr<OpenAiEmbeddingRequest> r = parse_openai_embeddings(body, options);
  return r.ok() ? ok_status() : r.status();
}

TEST(OpenAiCodec, ParsesAStringInput) {
  StatusOr<OpenAiEmbeddingRequest> r = parse_openai_embeddings(R"({"model": "clip", "input": "a cat"})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "clip");
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->input_count, 1u);
  EXPECT_EQ(r->inputs[0].kind, InputKind::kText);
  EXPECT_EQ(r->inputs[0].text, "a cat");
  EXPECT_FALSE(r->base64);
}

TEST(OpenAiCodec, ParsesMixedArraysWithDataUrls) {
  const json body = {{"model", "clip"},
                     {"input", {"a cat", "data:image/png;base64,iVBORw0KGgo=", ""}},
                     {"encoding_format", "base64"},
                     {"user", "someone"}};
  StatusOr<OpenAiEmbeddingRequest> r = parse_openai_embeddings(body.dump());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->inputs.size(), 3u);
  EXPECT_EQ(r->inputs[1].kind, InputKind::kImageBytes);
  EXPECT_EQ(r->inputs[1].image_bytes, std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(r->inputs[2].kind, InputKind::kText);
  EXPECT_TRUE(r->base64);
}

TEST(OpenAiCodec, RefusesBadRequests) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "malformed JSON"},
      {"{\"model\": \"m\", \"input\": \"x\"", "malformed JSON"},
      {"[]", "JSON object"},
      {R"({"input": "x"})", "'model'"},
      {R"({"model": "", "input": "x"})", "'model'"},
      {R"({"model": 3, "input": "x"})", "'model'"},
      {R"({"model": "m"})", "'input' is required"},
      {R"({"model": "m", "input": []})", "empty array"},
      {R"({"model": "m", "input": 5})", "token-id"},
      {R"({"model": "m", "input": [[1, 2]]})", "token-id"},
      {R"({"model": "m", "input": [null]})", "must be a string"},
      {R"({"model": "m", "input": {"a": 1}})", "must be a string"},
      {R"({"model": "m", "input": "x", "encoding_format": "int8"})", "encoding_format"},
      {R"({"model": "m", "input": "x", "encoding_format": 1})", "encoding_format"},
      {R"({"model": "m", "input": "x", "dimensions": 8})", "Unrecognized request argument supplied: dimensions"},
      {R"({"model": "m", "input": "x", "user": 1})", "'user'"},
      {R"({"model": "m", "input": "data:image/png;base64,@@@"})", "invalid base64"},
      {R"({"model": "m", "input": "data:image/gif;base64,R0lGOA=="})", "media type"},
      {R"({"model": "m", "input": ["ok", "data:image/png,raw"]})", "input[1]"},
      {R"({"model": "m", "input": "https://example.com/cat.png"})", "URL fetches are disabled"},
      {"{\"model\": \"m\", \"input\": \"\xff\"}", "malformed JSON"},
  };
  for (const auto& [body, needle] : cases) {
    const Status s = error_of(body);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(s.message().find(needle), std::string::npos) << body << " -> " << s.message();
  }
  EXPECT_EQ(error_of(R"({"model": "m", "input": "http://x/y.png"})").code(), StatusCode::kInvalidArgument);
}

serving::ResponseData response(size_t n, int64_t tokens) {
  auto clip = std::make_shared<engine::ClipOutput>();
  clip->dim = 3;
  for (size_t i = 0; i < n; ++i) clip->embeddings.push_back({0.5f + static_cast<float>(i), -1.f, 1e-7f});
  serving::ResponseData r;
  r.output = clip;
  r.tokens = tokens;
  return r;
}

TEST(OpenAiCodec, EncodesFloatEmbeddings) {
  OpenAiEmbeddingRequest request;
  request.model = "clip";
  request.input_count = 2;
  StatusOr<std::string> body = encode_openai_embeddings(request, response(2, 9));
  ASSERT_TRUE(body.ok());
  const json j = json::parse(*body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "clip");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["object"], "embedding");
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_FLOAT_EQ(j["data"][1]["embedding"][0].get<float>(), 1.5f);
  EXPECT_FLOAT_EQ(j["data"][1]["embedding"][2].get<float>(), 1e-7f);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
}

TEST(OpenAiCodec, EncodesBase64AsLittleEndianFloat32) {
  OpenAiEmbeddingRequest request;
  request.model = "clip";
  request.base64 = true;
  request.input_count = 1;
  StatusOr<std::string> body = encode_openai_embeddings(request, response(1, 0));
  ASSERT_TRUE(body.ok());
  const json j = json::parse(*body);
  StatusOr<std::string> bytes = base64_decode(j["data"][0]["embedding"].get<std::string>());
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->size(), 12u);
  float values[3];
  std::memcpy(values, bytes->data(), 12);
  EXPECT_EQ(values[0], 0.5f);
  EXPECT_EQ(values[1], -1.f);
  EXPECT_EQ(values[2], 1e-7f);
}

TEST(OpenAiCodec, MismatchedResponsesAreInternalErrors) {
  OpenAiEmbeddingRequest request;
  request.input_count = 3;
  EXPECT_EQ(encode_openai_embeddings(request, response(2, 0)).status().code(), StatusCode::kInternal);
}

TEST(OpenAiCodec, ListsReadyModels) {
  std::vector<serving::ModelStatus> models(2);
  models[0].name = "ready-one";
  models[0].state = serving::ModelState::kReady;
  models[1].name = "loading";
  models[1].state = serving::ModelState::kLoading;
  const json j = json::parse(encode_openai_models(models));
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0], json({{"id", "ready-one"}, {"object", "model"}, {"created", 0}, {"owned_by", "mmserve"}}));
}

}  // namespace
}  // namespace mmserve::api
