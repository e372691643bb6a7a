// An 8-bit grayscale PNG written with libpng in memory: SAM's masks as images (`"output": "png"` of /v1/segment).
// Tests: tests/unit/frontends/image/sam_preprocess_test.cpp (round trip through our PNG decoder).
#pragma once

#include <cstdint>
#include <string>

namespace mmserve::image {

// `gray`: height rows of width bytes. Returns the PNG file's bytes.
std::string encode_png_gray(const uint8_t* gray, int width, int height);

}  // namespace mmserve::image
