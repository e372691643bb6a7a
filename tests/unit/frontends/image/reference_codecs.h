// Test helpers: the codec libraries' plain APIs, used as independent references and to build PNG variants.
//
// The decoder under test (src/frontends/image) applies PIL's rules on top of libpng/libjpeg/libwebp; these
// helpers read the same files through different entry points (png_read_png, jpeg_mem_src with library
// defaults, WebPDecodeRGBA) and return the raw samples, so a test can state PIL's rule on raw data and
// compare. write_png builds any PNG variant in memory (bit depths, colour types, PLTE/tRNS, Adam7).
// Used by: image_decode_test.cpp, png_variants_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include "test_paths.h"

namespace mmserve::image::testing {

std::vector<uint8_t> read_file_bytes(const std::string& path);
std::string fixture(const std::string& name);  // MMSERVE_FIXTURES_DIR + "/images/" name

// PNG samples as stored: sub-byte samples unpacked to one byte each (unscaled), 16-bit samples as two
// big-endian bytes, no colour conversion. palette: PLTE as RGB triplets.
struct RawPng {
  int width = 0;
  int height = 0;
  int bit_depth = 0;
  int color_type = 0;
  int channels = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;  // height * row_bytes
  std::vector<uint8_t> palette;
};
bool read_png_raw(const std::vector<uint8_t>& bytes, RawPng* out);

struct PngToWrite {
  int width = 0;
  int height = 0;
  int bit_depth = 8;
  int color_type = 0;               // PNG_COLOR_TYPE_*
  bool interlaced = false;          // Adam7
  std::vector<uint8_t> rows;        // height rows in PNG's packed format (sub-byte packed MSB first, 16-bit BE)
  std::vector<uint8_t> palette;     // RGB triplets (palette images)
  std::vector<uint8_t> trns_alpha;  // palette tRNS
  int trns_gray = -1;               // gray tRNS value, or -1
  int trns_rgb[3] = {-1, -1, -1};   // RGB tRNS value, or -1
};
std::vector<uint8_t> write_png(const PngToWrite& spec);  // empty on failure

// libjpeg with its defaults (ISLOW, fancy upsampling), output RGB (3 components) or gray (1 component).
struct RawJpeg {
  int width = 0;
  int height = 0;
  int components = 0;
  std::vector<uint8_t> data;  // height * width * components
};
bool decode_jpeg_reference(const std::vector<uint8_t>& bytes, RawJpeg* out);

// libjpeg compression of interleaved samples; in_color_space is a J_COLOR_SPACE value (JCS_CMYK writes the
// Adobe marker, as Photoshop does). Empty on failure.
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& samples, int width, int height, int components,
                                 int in_color_space, int quality);

// WebPDecodeRGBA, alpha dropped afterwards: height * width * 3.
bool decode_webp_reference(const std::vector<uint8_t>& bytes, int* width, int* height, std::vector<uint8_t>* rgb);

// PNG building blocks for hand-made files: a big-endian 32-bit value, and a whole chunk (length, type, data and
// the CRC over type and data).
void put_be32(std::vector<uint8_t>& out, uint32_t v);
void put_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data);

}  // namespace mmserve::image::testing
