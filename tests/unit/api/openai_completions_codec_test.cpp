// The OpenAI completions codecs: what each field becomes in LlamaParams (prompt forms, max_tokens defaults and
// max_completion_tokens, sampling and vLLM's extras, stop, stream options, chat messages in their key order), every
// refusal with its message (a 400 for wrong types and values, kUnimplemented for OpenAI features not written), n and
// best_of, logprobs / top_logprobs, and the encoders' shapes parsed back (the completion with n choices and both
// logprobs shapes over a real byte-level tokenizer, the stream chunks, the ends with usage and [DONE]).
#include "api/openai_completions_codec.h"

#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "frontends/text/hf_tokenizer.h"
#include "test_paths.h"

namespace mmserve::api {
namespace {

using nlohmann::json;

TEST(OpenAiCompletionsCodec, ReadsPromptsSamplingAndStreamOptions) {
  auto r = parse_completion_request(R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 3, "stop": ["\n", "end"], "ignore_eos": true,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "min_tokens": 3, "stream": true,
      "stream_options": {"include_usage": true}, "n": 1, "logprobs": null, "adapter": "auto"})",
                                    false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->prompt, "Once");
  const engine::LlamaParams& p = *r->params;
  EXPECT_EQ(p.adapter, "auto");  // the gate head routes it (docs/lora.md)
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
      {R"({"model": "m", "prompt": "a", "n": 0})", "'n' must be in [1, 16]"},
      {R"({"model": "m", "prompt": "a", "n": 17})", "'n' must be in [1, 16]"},
      {R"({"model": "m", "prompt": "a", "n": 1.5})", "'n' must be an integer"},
      {R"({"model": "m", "prompt": "a", "n": 2, "best_of": 3})", "'best_of' must equal 'n'"},
      {R"({"model": "m", "prompt": "a", "adapter": "sql"})", "'adapter' must be \"auto\""},
      {R"({"model": "m", "prompt": "a", "adapter": 3})", "'adapter' must be \"auto\""},
      {R"({"model": "m", "prompt": "a", "best_of": 2})", "'best_of' must equal 'n'"},
      {R"({"model": "m", "prompt": "a", "logprobs": 21})", "'logprobs' must be an integer in [0, 20]"},
      {R"({"model": "m", "prompt": "a", "logprobs": -1})", "'logprobs' must be an integer in [0, 20]"},
      {R"({"model": "m", "prompt": "a", "logprobs": true})", "'logprobs' must be an integer in [0, 20]"},
      {R"({"model": "m", "prompt": "a", "max_tokens": 4, "min_tokens": 5})", "min_tokens"},
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
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})", "needs 'logprobs'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "logprobs": false, "top_logprobs": 0})",
       "needs 'logprobs'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21})",
       "'top_logprobs' must be in [0, 20]"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "logprobs": 3})", "boolean"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "n": 99})", "'n'"},
  };
  for (const auto& [body, needle] : chats) {
    auto r = parse_completion_request(body, true);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << body << ": " << r.status().message();
  }
}

TEST(OpenAiCompletionsCodec, ReadsChoicesAndLogprobs) {
  auto r = parse_completion_request(R"({"model": "m", "prompt": "a", "n": 3, "best_of": 3, "logprobs": 5,
      "seed": 10})", false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->logprobs, 5);
  EXPECT_EQ(r->params->logprobs, 5);
  EXPECT_EQ(choice_params(*r, 0)->sampling.seed, 10u);
  EXPECT_EQ(choice_params(*r, 2)->sampling.seed, 12u);  // choice i: seed + i
  EXPECT_EQ(r->params->sampling.seed, 10u);             // the request's own params are left alone
  auto zero = parse_completion_request(R"({"model": "m", "prompt": "a", "logprobs": 0})", false);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->logprobs, 0);  // the sampled token's logprob, no alternatives
  auto none = parse_completion_request(R"({"model": "m", "prompt": "a"})", false);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->n, 1);
  EXPECT_EQ(none->params->logprobs, -1);
  EXPECT_FALSE(choice_params(*none, 4)->sampling.seed.has_value());  // no seed: each choice draws its own
  auto chat = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "a"}],
      "logprobs": true, "top_logprobs": 20, "n": 16})", true);
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(chat->logprobs, 20);
  EXPECT_EQ(chat->n, 16);
  auto chat_alone = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "a"}],
      "logprobs": true})", true);
  ASSERT_TRUE(chat_alone.ok());
  EXPECT_EQ(chat_alone->params->logprobs, 0);
  auto chat_off = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "a"}],
      "logprobs": false})", true);
  ASSERT_TRUE(chat_off.ok());
  EXPECT_EQ(chat_off->params->logprobs, -1);
}

// The real byte-level tokenizer of the fixtures: token strings are the decode of each id.
std::shared_ptr<const text::HfTokenizer> byte_level() {
  auto t = text::HfTokenizer::from_tokenizer_json(MMSERVE_FIXTURES_DIR + "/hf_tokenizers/byte_level_split/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::shared_ptr<const text::HfTokenizer>(std::move(*t)) : nullptr;
}

// The first id whose token string is `s`.
int32_t id_of(const text::HfTokenizer& tok, const std::string& s) {
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    auto t = tok.decode({id}, false);
    if (t.ok() && *t == s) return id;
  }
  ADD_FAILURE() << "no token " << s;
  return 0;
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
  const engine::LlamaOutput* one[] = {&out};
  const json whole = json::parse(encode_completion(*req, "cmpl-x", 17, one));
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "hi \"there\"");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(whole["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(whole["usage"], (json{{"prompt_tokens", 2}, {"completion_tokens", 3}, {"total_tokens", 5}}));
  ChoiceStream state;
  engine::TextDelta piece;
  piece.text = "piece";
  const std::string chunk = encode_completion_chunk(*req, "cmpl-x", 17, state, piece, nullptr);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  EXPECT_EQ(json::parse(chunk.substr(6))["choices"][0]["text"], "piece");
  const std::string end = encode_choice_end(*req, "cmpl-x", 17, state, out) +
                          encode_stream_end(*req, "cmpl-x", 17, completion_usage(one));
  EXPECT_NE(end.find("\"finish_reason\":\"stop\""), std::string::npos);
  EXPECT_NE(end.find("\"total_tokens\":5"), std::string::npos);
  EXPECT_EQ(end.substr(end.size() - 14), "data: [DONE]\n\n");
  auto chat = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "a"}]})", true);
  ASSERT_TRUE(chat.ok());
  const json message = json::parse(encode_completion(*chat, "chatcmpl-x", 17, one));
  EXPECT_EQ(message["object"], "chat.completion");
  EXPECT_EQ(message["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hi \"there\""}}));
  ChoiceStream chat_state;
  engine::TextDelta a, b;
  a.text = "a";
  b.text = "b";
  const json first = json::parse(encode_completion_chunk(*chat, "chatcmpl-x", 17, chat_state, a, nullptr).substr(6));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", "a"}}));
  const json later = json::parse(encode_completion_chunk(*chat, "chatcmpl-x", 17, chat_state, b, nullptr).substr(6));
  EXPECT_EQ(later["choices"][0]["delta"], (json{{"content", "b"}}));
  // A chat choice that ends before any text still says the role first.
  ChoiceStream silent;
  const std::string silent_end = encode_choice_end(*chat, "chatcmpl-x", 17, silent, out);
  EXPECT_NE(silent_end.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_LT(silent_end.find("\"role\""), silent_end.find("\"finish_reason\":\"stop\""));
  EXPECT_EQ(completion_id(true).rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(completion_id(false), completion_id(false));
}

TEST(OpenAiCompletionsCodec, EncodesChoicesWithSummedUsage) {
  auto req = parse_completion_request(R"({"model": "m", "prompt": "a", "n": 2})", false);
  ASSERT_TRUE(req.ok());
  engine::LlamaOutput x, y;
  x.prompt_ids = y.prompt_ids = {1, 2, 3};
  x.ids = {5};
  y.ids = {6, 7};
  x.text = "x";
  y.text = "yy";
  x.finish_reason = "stop";
  y.finish_reason = "length";
  const engine::LlamaOutput* both[] = {&x, &y};
  const json j = json::parse(encode_completion(*req, "cmpl-x", 1, both));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "yy");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  // The prompt once, the completions summed (OpenAI's accounting).
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", 3}, {"completion_tokens", 3}, {"total_tokens", 6}}));
}

TEST(OpenAiCompletionsCodec, EncodesLogprobsInBothShapes) {
  const auto tok = byte_level();
  ASSERT_NE(tok, nullptr);
  // "he", " the", a lone byte (its string is U+FFFD: one code point, three bytes) and a special token.
  const int32_t h = id_of(*tok, "he"), e = id_of(*tok, " the"), i = id_of(*tok, "\xEF\xBF\xBD"),
                z = id_of(*tok, "<|end|>");
  engine::LlamaOutput out;
  out.prompt_ids = {1};
  out.ids = {h, e};
  out.text = "he the";
  out.finish_reason = "length";
  out.tokenizer = tok;
  // Token 1: chosen and the most likely; token 2: chosen but not in the top 2 (so completions list it third).
  out.logprobs = {{h, -0.25f, {{h, -0.25f}, {i, -2.0f}}}, {e, -3.5f, {{z, -0.5f}, {i, -1.0f}}}};
  const engine::LlamaOutput* one[] = {&out};
  auto req = parse_completion_request(R"({"model": "m", "prompt": "a", "logprobs": 2})", false);
  ASSERT_TRUE(req.ok());
  const std::string text = encode_completion(*req, "cmpl-x", 1, one);
  const json lp = json::parse(text)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"he", " the"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.25, -3.5}));
  EXPECT_EQ(lp["text_offset"], (json{0, 2}));
  EXPECT_EQ(lp["top_logprobs"][0], (json{{"he", -0.25}, {"\xEF\xBF\xBD", -2.0}}));
  EXPECT_EQ(lp["top_logprobs"][1], (json{{"<|end|>", -0.5}, {"\xEF\xBF\xBD", -1.0}, {" the", -3.5}}));
  // Most likely first in the bytes too (JavaScript and Python keep the order they read).
  EXPECT_NE(text.find("{\"<|end|>\":-0.5,\"\xEF\xBF\xBD\":-1.0,\" the\":-3.5}"), std::string::npos) << text;
  auto chat = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "a"}],
      "logprobs": true, "top_logprobs": 2})", true);
  ASSERT_TRUE(chat.ok());
  const json content = json::parse(encode_completion(*chat, "chatcmpl-x", 1, one))["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[1]["token"], " the");
  EXPECT_EQ(content[1]["logprob"], -3.5);
  EXPECT_EQ(content[1]["bytes"], (json{32, 't', 'h', 'e'}));
  EXPECT_EQ(content[1]["top_logprobs"],
            (json{{{"token", "<|end|>"}, {"logprob", -0.5}, {"bytes", {'<', '|', 'e', 'n', 'd', '|', '>'}}},
                  {{"token", "\xEF\xBF\xBD"}, {"logprob", -1.0}, {"bytes", {0xEF, 0xBF, 0xBD}}}}));
  // Streamed: each chunk carries its delta's ids; what no chunk carried comes with the finish chunk.
  ChoiceStream state;
  engine::TextDelta first;
  first.text = "he";
  first.ids = {h};
  first.logprobs = {out.logprobs[0]};
  const json c1 = json::parse(encode_completion_chunk(*req, "cmpl-x", 1, state, first, tok.get()).substr(6));
  EXPECT_EQ(c1["choices"][0]["logprobs"]["tokens"], (json{"he"}));
  EXPECT_EQ(c1["choices"][0]["logprobs"]["text_offset"], (json{0}));
  const std::string end = encode_choice_end(*req, "cmpl-x", 1, state, out);
  const json c2 = json::parse(end.substr(6));
  EXPECT_EQ(c2["choices"][0]["logprobs"]["tokens"], (json{" the"}));
  EXPECT_EQ(c2["choices"][0]["logprobs"]["text_offset"], (json{2}));
  EXPECT_EQ(c2["choices"][0]["finish_reason"], "length");
  // A -inf (a masked token) is -9999, as vLLM writes it, never an invalid JSON number.
  out.logprobs[1].logprob = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(json::parse(encode_completion(*req, "cmpl-x", 1, one))["choices"][0]["logprobs"]["token_logprobs"][1],
            -9999.0);
}

}  // namespace
}  // namespace mmserve::api
