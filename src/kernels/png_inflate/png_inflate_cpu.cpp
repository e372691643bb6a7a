// The CPU twin of png_inflate.h: each image in turn through png_unfilter_core.h (and png_inflate_core.h) with a team of
// one thread.
#include <memory>

#include "core/status.h"
#include "kernels/png_inflate/png_inflate.h"
#include "kernels/png_inflate/png_unfilter_core.h"

namespace mmserve::kernels {

void inflate_png_rows(const uint8_t* streams, uint64_t streams_bytes, const PngInflateImage* images, int64_t n,
                      uint8_t* scratch, uint64_t scratch_bytes, uint8_t* out, uint64_t out_bytes, int32_t* status,
                      PngHuffmanDecoder decoder) {
  MMSERVE_CHECK(n >= 0, "inflate_png_rows: negative batch");
  MMSERVE_CHECK(
      n == 0 || (streams != nullptr && images != nullptr && scratch != nullptr && out != nullptr && status != nullptr),
      "inflate_png_rows: null pointer");
  auto ws = std::make_unique<png_inflate::InflateWorkspace>();
  for (int64_t i = 0; i < n; ++i) {
    const PngInflateImage& image = images[i];
    if (png_inflate::checked_filtered_bytes(image, streams_bytes, scratch_bytes, out_bytes) == 0) {
      status[i] = static_cast<int32_t>(PngInflateStatus::kBadImage);
      continue;
    }
    status[i] = static_cast<int32_t>(png_inflate::decode_image_serial(
        *ws, streams + image.stream_offset, image.stream_bytes, image.width, image.height, image.channels,
        scratch + image.scratch_offset, out + image.out_offset, decoder));
  }
}

}  // namespace mmserve::kernels
