// libFuzzer target for the OpenAI completions codecs (api/openai_completions_codec.h): arbitrary bodies for
// /v1/completions (first byte even) and /v1/chat/completions (odd). Checked: parsing returns; an accepted request
// has a model, exactly one prompt form, valid sampling values and max_tokens >= 1, and its encoders produce JSON
// that parses back. A broken promise traps.
// Run: build/fuzz/fuzz/openai_completions_fuzz -max_total_time=60 fuzz/corpus/openai_completions_fuzz
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "api/openai_completions_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] % 2 == 1;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = mmserve::api::parse_completion_request(body, chat);
  if (!r.ok()) {
    if (r.status().message().empty()) __builtin_trap();
    return 0;
  }
  const mmserve::engine::LlamaParams& p = *r->params;
  const int forms = (r->prompt ? 1 : 0) + (p.prompt_ids ? 1 : 0) + (p.messages ? 1 : 0);
  if (r->model.empty() || forms != 1 || p.max_tokens < 1 || !mmserve::engine::validate_sampling(p.sampling).ok()) {
    __builtin_trap();
  }
  mmserve::engine::LlamaOutput out;
  out.text = r->prompt.value_or("x");
  out.finish_reason = "stop";
  const std::string whole = mmserve::api::encode_completion(*r, "cmpl-1", 1, out);
  if (nlohmann::json::parse(whole, nullptr, false).is_discarded()) __builtin_trap();
  const std::string chunk = mmserve::api::encode_completion_chunk(*r, "cmpl-1", 1, out.text, true);
  if (chunk.size() < 8 || nlohmann::json::parse(chunk.substr(6), nullptr, false).is_discarded()) __builtin_trap();
  return 0;
}
