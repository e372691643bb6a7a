// libFuzzer target for the KServe generate body (api/kserve_generate_codec.h): arbitrary bytes as the body of
// POST /v2/models/m/generate. Checked: parsing returns; a refusal has a message; an accepted request is a text
// prompt (non-empty text_input) for model "m" with valid sampling values, max_tokens >= 1, one choice and no
// logprobs, and its answers (whole, a stream event, the end, an error event) are JSON. A broken promise traps.
// Run: build/fuzz/fuzz/kserve_generate_fuzz -max_total_time=60 fuzz/corpus/kserve_generate_fuzz
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "api/kserve_generate_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmserve;
  const std::string body(reinterpret_cast<const char*>(data), size);
  auto r = api::parse_generate_request(body, "m");
  if (!r.ok()) {
    if (r.status().message().empty() || r.status().code() != StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  const engine::LlamaParams& p = *r->params;
  if (r->model != "m" || !r->prompt || r->prompt->empty() || p.prompt_ids || p.messages || p.max_tokens < 1 ||
      !engine::validate_sampling(p.sampling).ok() || r->n != 1 || p.logprobs != -1 || r->stream) {
    __builtin_trap();
  }
  engine::LlamaOutput out;
  out.text = *r->prompt;
  out.finish_reason = "length";
  auto parses = [](const std::string& s) { return !nlohmann::json::parse(s, nullptr, false).is_discarded(); };
  if (!parses(api::encode_generate("m", out))) __builtin_trap();
  for (const std::string& e : {api::encode_generate_delta("m", out.text), api::encode_generate_end("m", out),
                               api::encode_generate_error_event(out.text)}) {
    if (e.size() < 8 || e.rfind("data: ", 0) != 0 || !parses(e.substr(6))) __builtin_trap();
  }
  return 0;
}
