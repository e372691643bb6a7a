// PNG variants written with libpng in the test, decoded, and checked against PIL's rules stated here:
//
//   1-bit gray -> 0/255; 2-bit -> s * 85; 4-bit -> s * 17 (Unpack.c L;2 / L;4 / "1");
//   16-bit gray -> min(v, 255) (I;16 -> RGB in Convert.c);
//   16-bit RGB / RGBA / gray+alpha -> most significant byte (RGB;16B, RGBA;16B, LA;16B);
//   palette (1/2/4/8-bit, with or without tRNS) -> PLTE[index], black past the PLTE entries;
//   tRNS on gray or RGB, and alpha channels, never change the RGB values;
//   Adam7 interlacing gives the same pixels as the non-interlaced file.
#include <gtest/gtest.h>
#include <png.h>

#include <random>
#include <vector>

#include "frontends/image/image.h"
#include "reference_codecs.h"

namespace mmserve::image {
namespace {

using testing::PngToWrite;
using testing::write_png;

// Packs sub-byte samples MSB first, one row at a time (PNG's layout).
std::vector<uint8_t> pack_rows(const std::vector<int>& samples, int width, int height, int bits) {
  const int row_bytes = (width * bits + 7) / 8;
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes) * height, 0);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const int bit = x * bits;
      out[y * row_bytes + bit / 8] |= static_cast<uint8_t>(samples[y * width + x] << (8 - bits - bit % 8));
    }
  }
  return out;
}

std::vector<uint8_t> big_endian16(const std::vector<int>& samples) {
  std::vector<uint8_t> out;
  for (int v : samples) {
    out.push_back(static_cast<uint8_t>(v >> 8));
    out.push_back(static_cast<uint8_t>(v & 0xFF));
  }
  return out;
}

RgbImage decode_spec(const PngToWrite& spec) {
  const std::vector<uint8_t> bytes = write_png(spec);
  EXPECT_FALSE(bytes.empty());
  StatusOr<RgbImage> image = decode_rgb(bytes);
  EXPECT_TRUE(image.ok()) << image.status().to_string();
  if (!image.ok()) return {};
  EXPECT_EQ(image->width, spec.width);
  EXPECT_EQ(image->height, spec.height);
  return std::move(image).value();
}

void expect_gray(const RgbImage& image, const std::vector<int>& expected) {
  ASSERT_EQ(image.pixels.size(), expected.size() * 3);
  for (size_t i = 0; i < expected.size(); ++i) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(image.pixels[3 * i + c], expected[i]) << "pixel " << i << " channel " << c;
  }
}

std::vector<int> random_samples(size_t count, int max_value, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> out(count);
  for (int& v : out) v = static_cast<int>(rng() % (static_cast<unsigned>(max_value) + 1));
  return out;
}

TEST(PngVariants, SubByteGrayIsScaledTo8Bits) {
  const int width = 13, height = 5;  // odd width: the last byte of each row is partly padding
  for (int bits : {1, 2, 4}) {
    const int max_sample = (1 << bits) - 1;
    std::vector<int> samples = random_samples(width * height, max_sample, 7 + bits);
    samples[0] = 0, samples[1] = max_sample;
    PngToWrite spec;
    spec.width = width, spec.height = height, spec.bit_depth = bits, spec.color_type = PNG_COLOR_TYPE_GRAY;
    spec.rows = pack_rows(samples, width, height, bits);
    const int scale = bits == 1 ? 255 : bits == 2 ? 85 : 17;
    std::vector<int> expected;
    for (int s : samples) expected.push_back(s * scale);
    SCOPED_TRACE(bits);
    expect_gray(decode_spec(spec), expected);
  }
}

TEST(PngVariants, Gray16ClipsAt255) {
  const std::vector<int> samples = {0, 1, 200, 255, 256, 257, 1000, 0x1234, 0xFF00, 65535, 128, 254};
  PngToWrite spec;
  spec.width = 4, spec.height = 3, spec.bit_depth = 16, spec.color_type = PNG_COLOR_TYPE_GRAY;
  spec.rows = big_endian16(samples);
  expect_gray(decode_spec(spec), {0, 1, 200, 255, 255, 255, 255, 255, 255, 255, 128, 254});
}

TEST(PngVariants, GrayTransparencyIsIgnored) {
  const std::vector<int> samples = {0, 50, 100, 150, 200, 250};
  PngToWrite spec;
  spec.width = 3, spec.height = 2, spec.bit_depth = 8, spec.color_type = PNG_COLOR_TYPE_GRAY;
  spec.rows.assign(samples.begin(), samples.end());
  spec.trns_gray = 100;
  expect_gray(decode_spec(spec), samples);
}

TEST(PngVariants, GrayAlphaDropsAlpha) {
  // 8-bit: (gray, alpha) pairs; 16-bit: MSB of gray.
  PngToWrite spec8;
  spec8.width = 2, spec8.height = 2, spec8.bit_depth = 8, spec8.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  spec8.rows = {10, 0, 20, 128, 30, 255, 40, 1};
  expect_gray(decode_spec(spec8), {10, 20, 30, 40});

  PngToWrite spec16 = spec8;
  spec16.bit_depth = 16;
  spec16.rows = big_endian16({0x0AFF, 0, 0x1400, 0x8000, 0xFFFF, 0xFFFF, 0x00FF, 0x0100});
  expect_gray(decode_spec(spec16), {0x0A, 0x14, 0xFF, 0x00});
}

TEST(PngVariants, Rgb16AndRgba16TakeMostSignificantByte) {
  PngToWrite rgb;
  rgb.width = 2, rgb.height = 1, rgb.bit_depth = 16, rgb.color_type = PNG_COLOR_TYPE_RGB;
  rgb.rows = big_endian16({0x0102, 0xFEFF, 0x00FF, 0x8080, 0x7F00, 0xFFFF});
  EXPECT_EQ(decode_spec(rgb).pixels, (std::vector<uint8_t>{0x01, 0xFE, 0x00, 0x80, 0x7F, 0xFF}));

  PngToWrite rgba = rgb;
  rgba.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  rgba.rows = big_endian16({0x0102, 0xFEFF, 0x00FF, 0x0000, 0x8080, 0x7F00, 0xFFFF, 0x1234});
  EXPECT_EQ(decode_spec(rgba).pixels, (std::vector<uint8_t>{0x01, 0xFE, 0x00, 0x80, 0x7F, 0xFF}));
}

TEST(PngVariants, RgbaAndRgbTransparencyDoNotTouchRgb) {
  PngToWrite rgba;
  rgba.width = 2, rgba.height = 1, rgba.bit_depth = 8, rgba.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  rgba.rows = {255, 0, 0, 0, 10, 20, 30, 77};  // a fully transparent red stays red (no compositing)
  EXPECT_EQ(decode_spec(rgba).pixels, (std::vector<uint8_t>{255, 0, 0, 10, 20, 30}));

  PngToWrite rgb;
  rgb.width = 2, rgb.height = 1, rgb.bit_depth = 8, rgb.color_type = PNG_COLOR_TYPE_RGB;
  rgb.rows = {1, 2, 3, 4, 5, 6};
  rgb.trns_rgb[0] = 1, rgb.trns_rgb[1] = 2, rgb.trns_rgb[2] = 3;
  EXPECT_EQ(decode_spec(rgb).pixels, rgb.rows);
}

TEST(PngVariants, PaletteExpandsWithBlackPastTheEntries) {
  const std::vector<uint8_t> colors = {255, 0, 0, 0, 255, 0, 0, 0, 255};
  for (int bits : {1, 2, 4, 8}) {
    // PLTE may not exceed 2^bits entries; keep at least one index past its end (1 entry for 1-bit, else 3).
    const std::vector<uint8_t> palette(colors.begin(), colors.begin() + (bits == 1 ? 3 : 9));
    const int width = 7, height = 3;
    const int max_index = (1 << bits) - 1;
    std::vector<int> indices = random_samples(width * height, max_index, 31 + bits);
    indices[0] = 0, indices[1] = max_index;
    PngToWrite spec;
    spec.width = width, spec.height = height, spec.bit_depth = bits, spec.color_type = PNG_COLOR_TYPE_PALETTE;
    spec.palette = palette;
    spec.trns_alpha = {0, 128};  // tRNS on a palette only sets info["transparency"] in PIL
    spec.rows =
        bits == 8 ? std::vector<uint8_t>(indices.begin(), indices.end()) : pack_rows(indices, width, height, bits);
    const RgbImage image = decode_spec(spec);
    ASSERT_EQ(image.pixels.size(), indices.size() * 3);
    for (size_t i = 0; i < indices.size(); ++i) {
      for (int c = 0; c < 3; ++c) {
        const size_t k = 3 * static_cast<size_t>(indices[i]) + c;
        ASSERT_EQ(image.pixels[3 * i + c], k < palette.size() ? palette[k] : 0) << "bits " << bits << " pixel " << i;
      }
    }
  }
}

TEST(PngVariants, InterlacedEqualsNonInterlaced) {
  const int width = 13, height = 11;  // not a multiple of 8: every Adam7 pass is partial
  const std::vector<int> rgb_samples = random_samples(width * height * 3, 255, 5);
  PngToWrite rgb;
  rgb.width = width, rgb.height = height, rgb.bit_depth = 8, rgb.color_type = PNG_COLOR_TYPE_RGB;
  rgb.rows.assign(rgb_samples.begin(), rgb_samples.end());
  rgb.interlaced = true;
  EXPECT_EQ(decode_spec(rgb).pixels, rgb.rows);

  const std::vector<int> gray_samples = random_samples(width * height, 3, 6);
  PngToWrite gray;
  gray.width = width, gray.height = height, gray.bit_depth = 2, gray.color_type = PNG_COLOR_TYPE_GRAY;
  gray.rows = pack_rows(gray_samples, width, height, 2);
  gray.interlaced = true;
  std::vector<int> expected;
  for (int s : gray_samples) expected.push_back(s * 85);
  expect_gray(decode_spec(gray), expected);

  PngToWrite gray16 = gray;
  const std::vector<int> wide = random_samples(width * height, 600, 8);
  gray16.bit_depth = 16;
  gray16.rows = big_endian16(wide);
  expected.clear();
  for (int v : wide) expected.push_back(v > 255 ? 255 : v);
  expect_gray(decode_spec(gray16), expected);
}

TEST(PngVariants, OneByOne) {
  PngToWrite spec;
  spec.width = 1, spec.height = 1, spec.bit_depth = 8, spec.color_type = PNG_COLOR_TYPE_RGB;
  spec.rows = {9, 8, 7};
  EXPECT_EQ(decode_spec(spec).pixels, spec.rows);
}

}  // namespace
}  // namespace mmserve::image
