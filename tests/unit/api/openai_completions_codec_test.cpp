// The OpenAI completions codecs: what each field becomes in LlamaParams (prompt forms, max_tokens defaults and
// max_completion_tokens, sampling and vLLM's extras, stop, stream options, chat messages in their key order), every
// refusal with its message (a 400 for wrong types and values, kUnimplemented for OpenAI features not written), and
// the encoders' shapes parsed back (the completion, the stream chunks, the end with usage and [DONE]).
#include "api/openai_completions_codec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mmserve::api {
namespace {

using nlohmann::json;

TEST(OpenAiCompletionsCodec, ReadsPromptsSamplingAndStreamOptions) {
  auto r = parse_completion_request(R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 3, "stop": ["\n", "end"], "ignore_eos": true,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "min_tokens": 3, "stream": true,
      "stream_options": {"include_usage": true}, "n": 1, "logprobs": null})",
                                    false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->prompt, "Once");
  const engine::LlamaParams& p = *r->params;
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.sampling.temperature, 0.5);
  EXPECT_EQ(p.sampling.top_p, 0.9);
  EXPECT_EQ(p.sampling.top_k, 20);
  EXPECT_EQ(p.sampling.min_p, 0.05);
  EXPECT_EQ(p.sampling.seed, 3u);
  EXPECT_EQ(p.sampling.presence_penalty, 0.5);
  EXPECT_EQ(p.sampling.frequency_penalty, -0.5);
  EXPECT_EQ(p.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n", "end"}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  auto ids = parse_completion_request(R"({"model": "m", "prompt": [[1, 2, 3]], "stop": "x"})", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_FALSE(ids->prompt.has_value());
  EXPECT_EQ(ids->params->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids->params->max_tokens, 16);  // OpenAI's default for completions
  EXPECT_EQ(ids->params->stop, std::vector<std::string>{"x"});
  auto one = parse_completion_request(R"({"model": "m", "prompt": ["only"]})", false);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prompt, "only");
  auto chat = parse_completion_request(R"({"model": "m", "max_completion_tokens": 9, "max_tokens": 3,
      "messages": [{"role": "user", "content": "hi", "b": 1, "a": 2}]})",
                                       true);
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(chat->params->max_tokens, 9);  // max_completion_tokens wins over the deprecated max_tokens
  ASSERT_TRUE(chat->params->messages.has_value());
  EXPECT_EQ((*chat->params->messages)[0].dump(), R"({"role":"user","content":"hi","b":1,"a":2})");  // key order kept
}

TEST(OpenAiCompletionsCodec, RefusesWithMessages) {
  const std::pair<const char*, const char*> completions[] = {
      {"[1]", "JSON object"},
      {R"({"prompt": "a"})", "'model'"},
      {R"({"model": "m"})", "'prompt' is required"},
      {R"({"model": "m", "prompt": ""})", "empty"},
      {R"({"model": "m", "prompt": ["a", "b"]})", "one prompt per request"},
      {R"({"model": "m", "prompt": [1, -2]})", "token id"},
      {R"({"model": "m", "prompt": 5})", "string or an array"},
      {R"({"model": "m", "prompt": "a", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "a", "max_tokens": "9"})", "integer"},
      {R"({"model": "m", "prompt": "a", "temperature": -1})", "temperature"},
      {R"({"model": "m", "prompt": "a", "top_p": 2})", "top_p"},
      {R"({"model": "m", "prompt": "a", "stop": [1]})", "'stop'"},
      {R"({"model": "m", "prompt": "a", "n": 2})", "'n'"},
      {R"({"model": "m", "prompt": "a", "max_tokens": 4, "min_tokens": 5})", "min_tokens"},
      {R"({"model": "m", "prompt": "a", "logprobs": 3})", "logprobs"},
      {R"({"model": "m", "prompt": "a", "echo": true})", "echo"},
      {R"({"model": "m", "prompt": "a", "stream": "yes"})", "boolean"},
      {R"({"model": "m", "prompt": "a", "stream_options": 1})", "stream_options"},
      {"{\"model\": \"m\", \"prompt\": \"a\"", "malformed JSON"},
  };
  for (const auto& [body, needle] : completions) {
    auto r = parse_completion_request(body, false);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << body << ": " << r.status().message();
  }
  const std::pair<const char*, const char*> chats[] = {
      {R"({"model": "m"})", "'messages'"},
      {R"({"model": "m", "messages": []})", "'messages'"},
      {R"({"model": "m", "messages": [{"content": "a"}]})", "'role'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "tools": []})", "tools"},
  };
  for (const auto& [body, needle] : chats) {
    auto r = parse_completion_request(body, true);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << body << ": " << r.status().message();
  }
}

TEST(OpenAiCompletionsCodec, EncodesOpenAisShapes) {
  auto req = parse_completion_request(R"({"model": "m", "prompt": "a", "stream": true,
      "stream_options": {"include_usage": true}})",
                                      false);
  ASSERT_TRUE(req.ok());
  engine::LlamaOutput out;
  out.prompt_ids = {1, 2};
  out.ids = {5, 6, 7};
  out.text = "hi \"there\"";
  out.finish_reason = "stop";
  const json whole = json::parse(encode_completion(*req, "cmpl-x", 17, out));
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "hi \"there\"");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"], (json{{"prompt_tokens", 2}, {"completion_tokens", 3}, {"total_tokens", 5}}));
  const std::string chunk = encode_completion_chunk(*req, "cmpl-x", 17, "piece", true);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  EXPECT_EQ(json::parse(chunk.substr(6))["choices"][0]["text"], "piece");
  const std::string end = encode_completion_end(*req, "cmpl-x", 17, "length", {2, 3});
  EXPECT_NE(end.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_NE(end.find("\"total_tokens\":5"), std::string::npos);
  EXPECT_EQ(end.substr(end.size() - 14), "data: [DONE]\n\n");
  auto chat = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "a"}]})", true);
  ASSERT_TRUE(chat.ok());
  const json message = json::parse(encode_completion(*chat, "chatcmpl-x", 17, out));
  EXPECT_EQ(message["object"], "chat.completion");
  EXPECT_EQ(message["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hi \"there\""}}));
  const json first = json::parse(encode_completion_chunk(*chat, "chatcmpl-x", 17, "a", true).substr(6));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", "a"}}));
  const json later = json::parse(encode_completion_chunk(*chat, "chatcmpl-x", 17, "b", false).substr(6));
  EXPECT_EQ(later["choices"][0]["delta"], (json{{"content", "b"}}));
  EXPECT_EQ(completion_id(true).rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(completion_id(false), completion_id(false));
}

}  // namespace
}  // namespace mmserve::api
