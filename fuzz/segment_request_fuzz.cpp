// libFuzzer target for SAM's /v1/segment request codec (api/sam_codec.h): parse_segment_request on arbitrary
// bodies. It must return a Status for anything malformed (bad JSON, wrong types, unknown fields, rows of the
// wrong width, non-finite numbers, bad data URLs, both or neither of image and image_id), never crash or leak.
// An accepted request names a model, carries options, and its tensors' values fill their shapes exactly.
// Seeds (fuzz/corpus/segment_request_fuzz): a click with a data URL, points + labels + a box by image_id, png
// output, and broken ones.
// Run: build/fuzz/fuzz/segment_request_fuzz -max_total_time=60 fuzz/corpus/segment_request_fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/sam_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  auto request = mmserve::api::parse_segment_request(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!request.ok()) return 0;
  if (request->model.empty() || request->params == nullptr) std::abort();
  for (const mmserve::engine::InputItem& item : request->inputs) {
    if (item.kind != mmserve::engine::InputKind::kTensor) continue;
    int64_t n = 1;
    for (int64_t d : item.shape) n *= d;
    if (n != static_cast<int64_t>(item.values.size())) std::abort();
  }
  return 0;
}
