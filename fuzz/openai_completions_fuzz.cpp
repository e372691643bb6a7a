// libFuzzer target for the OpenAI completions codecs (api/openai_completions_codec.h): arbitrary bodies for
// /v1/completions (first byte even) and /v1/chat/completions (odd). Checked: parsing returns; an accepted request
// has a model, exactly one prompt form, valid sampling values, max_tokens >= 1, n in [1, 16], logprobs in
// [-1, 20] and the same in its params, choice seeds of seed + i; its encoders (n choices with logprobs of the
// requested width, stream chunks, choice ends, the stream end) produce JSON that parses back; a chat request's
// image_url parts (api/chat_images.h) all became {"type": "image"} parts, one per image taken. A broken promise
// traps.
// Run: build/fuzz/fuzz/openai_completions_fuzz -max_total_time=60 fuzz/corpus/openai_completions_fuzz
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/openai_completions_codec.h"

namespace {

bool parses(const std::string& text) { return !nlohmann::json::parse(text, nullptr, false).is_discarded(); }

// Every `data: ...` event of `events` is JSON or [DONE].
bool events_parse(const std::string& events) {
  size_t at = 0;
  for (size_t end; (end = events.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string e = events.substr(at, end - at);
    if (e.rfind("data: ", 0) != 0) return false;
    if (e != "data: [DONE]" && !parses(e.substr(6))) return false;
  }
  return at == events.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmserve;
  if (size < 1) return 0;
  const bool chat = data[0] % 2 == 1;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = api::parse_completion_request(body, chat);
  if (!r.ok()) {
    if (r.status().message().empty()) __builtin_trap();
    return 0;
  }
  const engine::LlamaParams& p = *r->params;
  const int forms = (r->prompt ? 1 : 0) + (p.prompt_ids ? 1 : 0) + (p.messages ? 1 : 0);
  if (r->model.empty() || forms != 1 || p.max_tokens < 1 || !engine::validate_sampling(p.sampling).ok()) {
    __builtin_trap();
  }
  if (r->n < 1 || r->n > api::kChoicesMax || r->logprobs < -1 || r->logprobs > api::kLogprobsMax ||
      p.logprobs != r->logprobs) {
    __builtin_trap();
  }
  if (p.messages) {  // every image taken left an {"type": "image"} part, and no image_url part is left
    size_t image_parts = 0;
    for (const auto& m : *p.messages) {
      if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
      for (const auto& part : m["content"]) {
        if (part.is_object() && part.value("type", "") == "image") ++image_parts;
        if (part.is_object() && part.value("type", "") == "image_url") __builtin_trap();
      }
    }
    if (r->images.size() > image_parts) __builtin_trap();
    for (const auto& image : r->images) {
      if (image.kind != engine::InputKind::kImageBytes || image.image_bytes.empty()) __builtin_trap();
    }
  }
  const auto last = api::choice_params(*r, r->n - 1);
  if (p.sampling.seed.has_value() != last->sampling.seed.has_value()) __builtin_trap();
  if (p.sampling.seed && *last->sampling.seed != *p.sampling.seed + static_cast<uint64_t>(r->n - 1)) __builtin_trap();
  // Outputs as the engine gives them: one logprob per id (tokens without a tokenizer have empty strings).
  std::vector<engine::LlamaOutput> outs(static_cast<size_t>(r->n));
  std::vector<const engine::LlamaOutput*> views;
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i].text = r->prompt.value_or("x");
    outs[i].finish_reason = "stop";
    outs[i].ids = {static_cast<int32_t>(i), 1};
    if (r->logprobs >= 0) {
      for (int32_t id : outs[i].ids) {
        engine::TokenLogprob lp{id, -0.5f, {}};
        for (int64_t k = 0; k < r->logprobs; ++k) lp.top.emplace_back(static_cast<int32_t>(k), -1.0f * k);
        outs[i].logprobs.push_back(lp);
      }
    }
    views.push_back(&outs[i]);
  }
  const std::string whole = api::encode_completion(*r, "cmpl-1", 1, views);
  const nlohmann::json j = nlohmann::json::parse(whole, nullptr, false);
  if (j.is_discarded() || j["choices"].size() != outs.size()) __builtin_trap();
  api::ChoiceStream state;
  engine::TextDelta delta;
  delta.text = outs[0].text;
  delta.ids = {outs[0].ids[0]};
  if (!outs[0].logprobs.empty()) delta.logprobs = {outs[0].logprobs[0]};
  std::string stream = api::encode_completion_chunk(*r, "cmpl-1", 1, state, delta, nullptr);
  stream += api::encode_choice_end(*r, "cmpl-1", 1, state, outs[0]);
  stream += api::encode_stream_end(*r, "cmpl-1", 1, api::completion_usage(views));
  if (!events_parse(stream) || state.ids_sent != outs[0].ids.size()) __builtin_trap();
  return 0;
}
