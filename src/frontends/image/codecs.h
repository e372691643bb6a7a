// Internal interface between the format dispatcher (image_decode.cpp) and the per-format decoders.
//
// Each decoder receives the whole encoded buffer (never empty: the dispatcher checks) and returns RGB8 as
// PIL's `Image.open(f).convert("RGB")` would, or a Status whose message starts with the format name. Each
// reads the dimensions from the header and refuses `width * height > max_pixels` with kResourceExhausted
// before any pixel is decoded. Not part of the public API: include "frontends/image/image.h" instead.
// Tests: tests/unit/frontends/image/image_decode_test.cpp, png_variants_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/status.h"
#include "frontends/image/image.h"

namespace mmserve::image::detail {

StatusOr<RgbImage> decode_jpeg(std::span<const uint8_t> bytes, const DecodeOptions& options);
StatusOr<RgbImage> decode_png(std::span<const uint8_t> bytes, const DecodeOptions& options);
// libpng alone (decode_png's fallback for every file its fast path does not take; the benchmark's and the fuzz
// target's reference).
StatusOr<RgbImage> decode_png_libpng(std::span<const uint8_t> bytes, const DecodeOptions& options);
// decode_png's fast path (png_decode.cpp): nullopt for a file it does not take (anything but an 8-bit, non-palette,
// non-interlaced IHDR / IDAT / IEND file, with only the ancillary chunks libpng cannot fail on, right CRCs and one
// 32 KiB-window zlib stream of exactly the image's rows), else what decode_png_libpng returns for it.
std::optional<StatusOr<RgbImage>> decode_png_fast(std::span<const uint8_t> bytes, const DecodeOptions& options);
StatusOr<RgbImage> decode_webp(std::span<const uint8_t> bytes, const DecodeOptions& options);

// The shared bomb guard: kInvalidArgument for non-positive dimensions, kResourceExhausted above the limit.
Status check_dimensions(const char* format, int64_t width, int64_t height, const DecodeOptions& options);

}  // namespace mmserve::image::detail
