// libFuzzer target for the image frontend: decode_rgb on arbitrary bytes (JPEG, PNG, WebP or garbage).
//
// Outside bytes reach libjpeg, libpng and libwebp through our wrappers (setjmp error paths, the
// fake-EOI source, the pixel guard); the decoder must return a Status, never crash, leak or hang. Images
// are capped at 4M pixels so each input stays fast; small decoded images also go through the CLIP
// resize/crop/normalise pipeline, which must accept any decoded size.
// Run: build/fuzz/fuzz/image_decode_fuzz -max_total_time=60 fuzz/corpus/image_decode_fuzz (docs/testing.md).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmserve::image;
  DecodeOptions options;
  options.max_pixels = 4LL * 1024 * 1024;
  mmserve::StatusOr<RgbImage> image = decode_rgb(std::span<const uint8_t>(data, size), options);
  if (!image.ok()) return 0;
  if (image->pixels.size() != static_cast<size_t>(image->width) * image->height * 3) __builtin_trap();
  if (int64_t{image->width} * image->height <= 64 * 1024) {
    ClipPreprocessConfig config;
    config.shortest_edge = 32;
    config.crop_width = 24;
    config.crop_height = 40;
    const RgbImage cropped = resize_and_crop(*image, config);
    std::vector<float> values(static_cast<size_t>(cropped.width) * cropped.height * 3);
    to_pixel_values(cropped, config, values.data());
  }
  return 0;
}
