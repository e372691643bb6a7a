// The KServe generate codecs: text_input and every generation field, at the top level and in parameters, become
// the completions request (the same LlamaParams as /v1/completions), TensorRT-LLM's stop_words / bad_words forms,
// and every malformed body is refused naming the field; the answers' shapes (whole, stream events, error event).
#include "api/kserve_generate_codec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/base64.h"

namespace mmserve::api {
namespace {

using nlohmann::json;

TEST(KserveGenerateCodec, ReadsFieldsFromBothPlaces) {
  auto r = parse_generate_request(R"({"text_input": "Once upon", "max_tokens": 7, "stop_words": ["."],
      "bad_words": "", "parameters": {"temperature": 0, "top_p": 0.9, "top_k": 5, "seed": 3, "min_tokens": 2,
      "ignore_eos": true, "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "min_p": 0.1, "stream": false}})",
                                  "stories");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "stories");
  EXPECT_EQ(r->prompt, "Once upon");
  const engine::LlamaParams& p = *r->params;
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.stop, std::vector<std::string>{"."});
  EXPECT_EQ(p.sampling.temperature, 0.0);
  EXPECT_EQ(p.sampling.top_p, 0.9);
  EXPECT_EQ(p.sampling.top_k, 5);
  EXPECT_EQ(p.sampling.seed, 3u);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(p.sampling.presence_penalty, 0.5);
  EXPECT_EQ(p.sampling.frequency_penalty, -0.5);
  EXPECT_EQ(p.sampling.min_p, 0.1);
  EXPECT_EQ(p.logprobs, -1);
  auto plain = parse_generate_request(R"({"text_input": "a", "stop": "x", "stop_words": ""})", "m");
  ASSERT_FALSE(plain.ok());  // stop and stop_words together
  auto defaults = parse_generate_request(R"({"text_input": "a", "stop_words": ""})", "m");
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->params->max_tokens, 16);
  EXPECT_TRUE(defaults->params->stop.empty());  // "" is TensorRT-LLM's "no stop words"
  auto stop = parse_generate_request(R"({"text_input": "a", "parameters": {"stop": "end"}})", "m");
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->params->stop, std::vector<std::string>{"end"});
}

TEST(KserveGenerateCodec, RefusesMalformedBodiesNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "malformed JSON"},
      {"{\"text_input\": \"a\"", "malformed JSON"},
      {"[]", "JSON object"},
      {R"({})", "'text_input'"},
      {R"({"text_input": ""})", "'text_input'"},
      {R"({"text_input": 5})", "'text_input'"},
      {R"({"text_input": ["a"]})", "'text_input'"},
      {R"({"text_input": "a", "prompt": "b"})", "unknown field(s) 'prompt'"},
      {R"({"text_input": "a", "n": 2, "echo": true})", "'echo', 'n'"},
      {R"({"text_input": "a", "parameters": {"beam_width": 2}})", "unknown parameter(s) 'beam_width'"},
      {R"({"text_input": "a", "parameters": 3})", "'parameters' must be an object"},
      {R"({"text_input": "a", "max_tokens": 4, "parameters": {"max_tokens": 5}})", "both"},
      {R"({"text_input": "a", "max_tokens": 0})", "max_tokens"},
      {R"({"text_input": "a", "max_tokens": "9"})", "'max_tokens' must be an integer"},
      {R"({"text_input": "a", "parameters": {"temperature": -1}})", "temperature"},
      {R"({"text_input": "a", "parameters": {"top_p": 0}})", "top_p"},
      {R"({"text_input": "a", "parameters": {"ignore_eos": 1}})", "'ignore_eos' must be a boolean"},
      {R"({"text_input": "a", "parameters": {"stream": "yes"}})", "'stream' must be a boolean"},
      {R"({"text_input": "a", "stop": [1]})", "'stop'"},
      {R"({"text_input": "a", "bad_words": ["x"]})", "'bad_words'"},
      {R"({"text_input": "a", "max_tokens": 3, "min_tokens": 4})", "min_tokens"},
      {R"({"text_input": "a", "seed": 1.5})", "'seed' must be an integer"},
  };
  for (const auto& [body, needle] : cases) {
    auto r = parse_generate_request(body, "m");
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << body << ": " << r.status().message();
  }
}

TEST(KserveGenerateCodec, EncodesTritonsShapes) {
  engine::LlamaOutput out;
  out.prompt_ids = {1, 2};
  out.ids = {5, 6, 7};
  out.text = "hi \"there\"";
  out.finish_reason = "length";
  const json whole = json::parse(encode_generate("stories", out));
  EXPECT_EQ(whole, (json{{"model_name", "stories"}, {"model_version", "1"}, {"text_output", "hi \"there\""},
                         {"finish_reason", "length"}, {"prompt_tokens", 2}, {"completion_tokens", 3}}));
  const std::string delta = encode_generate_delta("stories", "piece");
  ASSERT_EQ(delta.rfind("data: ", 0), 0u);
  ASSERT_EQ(delta.substr(delta.size() - 2), "\n\n");
  EXPECT_EQ(json::parse(delta.substr(6)),
            (json{{"model_name", "stories"}, {"model_version", "1"}, {"text_output", "piece"}}));
  const json end = json::parse(encode_generate_end("stories", out).substr(6));
  EXPECT_EQ(end["text_output"], "");
  EXPECT_EQ(end["finish_reason"], "length");
  EXPECT_EQ(end["completion_tokens"], 3);
  EXPECT_EQ(json::parse(encode_generate_error_event("boom").substr(6)), (json{{"error", "boom"}}));
}

// A LLaVA's images: "image" is a data URL or a list of them, each an InputItem in order; anything else is a 400.
TEST(KServeGenerateCodec, ImagesAreDataUrlsInOrder) {
  const std::string png1 = "data:image/png;base64," + base64_encode("first"), png2 = "data:image/png;base64," +
                                                                                  base64_encode("second");
  auto one = parse_generate_request(json{{"text_input", "<image> what"}, {"image", png1}}.dump(), "llava");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_EQ(one->images.size(), 1u);
  EXPECT_EQ(one->images[0].kind, engine::InputKind::kImageBytes);
  EXPECT_EQ(one->images[0].image_bytes, "first");
  auto two = parse_generate_request(json{{"text_input", "<image><image>"}, {"image", {png1, png2}}}.dump(), "llava");
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->images.size(), 2u);
  EXPECT_EQ(two->images[1].image_bytes, "second");
  for (const json& bad : {json(7), json::array(), json("https://example.com/a.png"), json("aGk="),
                          json("data:image/png;base64,***"), json({png1, 3})}) {
    auto r = parse_generate_request(json{{"text_input", "x"}, {"image", bad}}.dump(), "llava");
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("image"), std::string::npos) << r.status().message();
  }
  // Not a parameter: images are inputs.
  EXPECT_FALSE(parse_generate_request(json{{"text_input", "x"}, {"parameters", {{"image", png1}}}}.dump(), "m").ok());
}

}  // namespace
}  // namespace mmserve::api
