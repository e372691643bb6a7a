// Image decoding to 8-bit RGB exactly as PIL's `Image.open(f).convert("RGB")` does.
//
// JPEG (libjpeg-turbo, ISLOW DCT and fancy upsampling like PIL), PNG (libpng: 1/2/4/8/16-bit, palette with
// or without tRNS, grayscale, gray+alpha, RGB, RGBA) and WebP (libwebp, lossy and lossless). The format is
// sniffed from the magic bytes, never from a file name. PIL's conversion rules are reproduced bit for bit:
// alpha is dropped (not composited), 16-bit samples are reduced the way PIL's unpackers reduce them, palette
// indices are expanded through the palette. A decompression-bomb guard reads the dimensions from the
// header and refuses images above `max_pixels` before any pixel is decoded.
// Tests: tests/unit/frontends/image/ (image_decode_test.cpp, png_variants_test.cpp); fuzz:
// fuzz/image_decode_fuzz.cpp; conformance with PIL: tests/conformance/clip_pixels_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::image {

enum class ImageFormat { kJpeg, kPng, kWebp, kUnknown };

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3, row-major, interleaved RGB
};

struct DecodeOptions {
  // PIL refuses images above 2 * 89,478,485 pixels; we default lower, a server's choice, configurable.
  int64_t max_pixels = 64LL * 1024 * 1024;
};

ImageFormat sniff_format(std::span<const uint8_t> bytes);
const char* format_name(ImageFormat format);

// Decodes any supported format and converts to RGB. Errors: kInvalidArgument (unknown format, corrupt or
// truncated data), kResourceExhausted (above max_pixels), kUnimplemented (e.g. CMYK JPEG, animated WebP).
StatusOr<RgbImage> decode_rgb(std::span<const uint8_t> bytes, const DecodeOptions& options = {});
// Reads a file and decodes it; errors name the path.
StatusOr<RgbImage> decode_rgb_file(const std::string& path, const DecodeOptions& options = {});

}  // namespace mmserve::image
