// libFuzzer target for the KServe v2 infer request codec: parse_kserve_infer on arbitrary bodies, as JSON only and
// with the binary tensor extension (Inference-Header-Content-Length splitting the body into a JSON header and raw
// tensor bytes: BYTES elements with 4-byte length prefixes, FP32/UINT8 pixel tensors, base64 audio).
//
// The first input byte picks the mode (even: all JSON; odd: the next two bytes are the header length, checked by
// parse_inference_header_length as the server does); the rest is the body. The codec must return a Status for
// anything malformed (bad JSON, wrong shapes or datatypes, lengths past the end, bad base64), never crash or leak.
// Seeds (fuzz/corpus/kserve_infer_fuzz): the request shapes the unit tests use (texts, images, audio, binary).
// Run: build/fuzz/fuzz/kserve_infer_fuzz -max_total_time=60 fuzz/corpus/kserve_infer_fuzz (docs/testing.md).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/kserve_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  const bool binary = (data[0] & 1) != 0;
  std::optional<size_t> json_length;
  size_t offset = 1;
  if (binary) {
    if (size < 3) return 0;
    const std::string header = std::to_string(static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8));
    offset = 3;
    auto length = mmserve::api::parse_inference_header_length(header, size - offset);
    if (!length.ok()) return 0;
    json_length = *length;
  }
  const std::string_view body(reinterpret_cast<const char*>(data + offset), size - offset);
  auto request = mmserve::api::parse_kserve_infer(body, json_length);
  (void)request;
  return 0;
}
