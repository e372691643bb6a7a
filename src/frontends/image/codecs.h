// Internal interface between the format dispatcher (image_decode.cpp) and the per-format decoders.
//
// Each decoder receives the whole encoded buffer (never empty: the dispatcher checks) and returns RGB8 as
// PIL's `Image.open(f).convert("RGB")` would, or a Status whose message starts with the format name. Each
// reads the dimensions from the header and refuses `width * height > max_pixels` with kResourceExhausted
// before any pixel is decoded. Not part of the public API: include "frontends/image/image.h" instead.
// Tests: tests/unit/frontends/image/image_decode_test.cpp, png_variants_test.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "frontends/image/image.h"

namespace mmserve::image::detail {

StatusOr<RgbImage> decode_jpeg(std::span<const uint8_t> bytes, const DecodeOptions& options);
StatusOr<RgbImage> decode_png(std::span<const uint8_t> bytes, const DecodeOptions& options);
StatusOr<RgbImage> decode_webp(std::span<const uint8_t> bytes, const DecodeOptions& options);

// The shared bomb guard: kInvalidArgument for non-positive dimensions, kResourceExhausted above the limit.
Status check_dimensions(const char* format, int64_t width, int64_t height, const DecodeOptions& options);

}  // namespace mmserve::image::detail
