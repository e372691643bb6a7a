// 8-bit PNGs written with libpng in memory: SAM's masks as images (`"output": "png"` of /v1/segment) and the
// synthetic pictures of `mmserve bench` and clip_throughput. Empty on libpng's errors (out of memory: nothing a
// client sends reaches here).
// Tests: tests/unit/frontends/image/sam_preprocess_test.cpp (round trip through our PNG decoder).
#pragma once

#include <cstdint>
#include <string>

namespace mmserve::image {

// `pixels`: height rows of width * channels bytes (1: gray, 3: RGB, 4: RGBA), libpng's default filters and zlib
// level `level` (-1: zlib's default, 6). Returns the PNG file's bytes.
std::string encode_png(const uint8_t* pixels, int width, int height, int channels, int level = -1);
// A mask: one channel at the fastest level (masks compress well even there).
inline std::string encode_png_gray(const uint8_t* gray, int width, int height) {
  return encode_png(gray, width, height, 1, 1);
}

}  // namespace mmserve::image
