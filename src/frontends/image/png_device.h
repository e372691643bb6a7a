// PNG files as input for the GPU decoder (kernels/png_inflate): a file split into its shape and its zlib stream,
// for exactly the files decode_png_fast takes (8-bit gray, gray+alpha, RGB or RGBA, not interlaced, only IHDR /
// IDAT / IEND and the harmless ancillary chunks, right CRCs, IDATs within libpng's limit, a 32 KiB zlib window).
// Inflating the stream to height * (width * channels + 1) bytes, unfiltering and converting as png_inflate.h says
// gives decode_png_fast's pixels exactly when decode_png_fast succeeds; for anything else (split's nullopt, or the
// kernel's nonzero status) the caller falls back to decode_png, which gives libpng's answer.
// Tests: tests/unit/frontends/image/png_fast_path_test.cpp; fuzz/png_fast_path_fuzz.cpp (differential).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "frontends/image/image.h"

namespace mmserve::image {

struct PngStream {
  uint32_t width = 0, height = 0;
  int channels = 0;                   // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  int color_type = 0;                 // PNG's colour type: 0, 4, 2 or 6
  std::span<const uint8_t> borrowed;  // one IDAT: its data, inside the bytes given to split_png_for_device
  std::vector<uint8_t> joined;        // several IDATs: their data joined
  // The zlib stream (valid while those bytes live, and this object is not copied from a temporary).
  std::span<const uint8_t> zlib() const { return joined.empty() ? borrowed : std::span<const uint8_t>(joined); }
};

// Whether the signature and IHDR are of a PNG the fast path (and so the GPU decoder) may take: 8-bit gray, gray +
// alpha, RGB or RGBA, not interlaced. A cheap look at the first 33 bytes; split_png_for_device checks the rest.
bool png_header_fits_device(std::span<const uint8_t> bytes);

// nullopt for a file decode_png_fast does not take; the pixel guard's error (check_dimensions: kInvalidArgument or
// kResourceExhausted) as decode_png_fast returns it; else the stream.
std::optional<StatusOr<PngStream>> split_png_for_device(std::span<const uint8_t> bytes, const DecodeOptions& options);

}  // namespace mmserve::image
