// Differential libFuzzer target for parse_json (api/json_parse.h): the fast path must either give up or build
// exactly nlohmann's DOM (value types included), and parse_json must return nlohmann's result or message. It
// traps on any difference; ASan/UBSan watch the scanner's word-at-a-time reads.
// Seeds: fuzz/corpus/json_parse_fuzz (request bodies with escapes, numbers at the 64-bit edges, deep nesting).
// Run: build/fuzz/fuzz/json_parse_fuzz -max_total_time=60 fuzz/corpus/json_parse_fuzz (docs/testing.md).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/json_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const mmserve::StatusOr<nlohmann::json> reference = mmserve::api::parse_json_nlohmann(text);
  const std::optional<nlohmann::json> fast = mmserve::api::parse_json_fast(text);
  if (fast && (!reference.ok() || !mmserve::api::json_same_dom(*fast, *reference))) __builtin_trap();
  const mmserve::StatusOr<nlohmann::json> parsed = mmserve::api::parse_json(text);
  if (parsed.ok() != reference.ok()) __builtin_trap();
  if (!parsed.ok() && parsed.status().message() != reference.status().message()) __builtin_trap();
  return 0;
}
