// Decoding tests on the real fixture images and on broken input.
//
// Every fixture decodes to its known size, and its pixels equal PIL's rule applied to the raw samples that
// the plain library APIs return (reference_codecs.h): gray replicated, palette expanded, alpha dropped,
// 16-bit gray clipped at 255, 16-bit colour reduced to its most significant byte, CMYK through PIL's
// inverted cmyk2rgb. Broken input (empty, garbage, every truncation of every fixture, bit flips, headers
// claiming huge or zero sizes) must give an error Status, never a crash, and the pixel guard must fire
// before any pixel is decoded.
#include <gtest/gtest.h>
// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>
// clang-format on

#include <png.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frontends/image/image.h"
#include "reference_codecs.h"
#include "test_paths.h"

namespace mmserve::image {
namespace {

using testing::fixture;
using testing::put_be32;
using testing::put_chunk;
using testing::read_file_bytes;

RgbImage decode_ok(const std::vector<uint8_t>& bytes, const DecodeOptions& options = {}) {
  StatusOr<RgbImage> image = decode_rgb(bytes, options);
  EXPECT_TRUE(image.ok()) << image.status().to_string();
  return image.ok() ? std::move(image).value() : RgbImage{};
}

RgbImage decode_fixture(const std::string& name) {
  StatusOr<RgbImage> image = decode_rgb_file(fixture(name));
  EXPECT_TRUE(image.ok()) << name << ": " << image.status().to_string();
  return image.ok() ? std::move(image).value() : RgbImage{};
}

testing::RawPng raw_png(const std::string& name) {
  testing::RawPng raw;
  EXPECT_TRUE(testing::read_png_raw(read_file_bytes(fixture(name)), &raw)) << name;
  return raw;
}

TEST(ImageDecode, SniffsFormatsFromMagicBytes) {
  EXPECT_EQ(sniff_format(read_file_bytes(fixture("rocket.jpg"))), ImageFormat::kJpeg);
  EXPECT_EQ(sniff_format(read_file_bytes(fixture("camera.png"))), ImageFormat::kPng);
  EXPECT_EQ(sniff_format(read_file_bytes(fixture("chelsea_lossy.webp"))), ImageFormat::kWebp);
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  EXPECT_EQ(sniff_format(gif), ImageFormat::kUnknown);
  EXPECT_STREQ(format_name(ImageFormat::kWebp), "WebP");
}

TEST(ImageDecode, FixtureSizes) {
  const struct {
    const char* name;
    int width, height;
  } cases[] = {
      {"camera.png", 512, 512},         {"chelsea.png", 451, 300},           {"logo.png", 500, 500},
      {"palette_color.png", 10, 10},    {"palette_gray.png", 10, 10},        {"foo3x5x4indexed.png", 5, 3},
      {"camera16.png", 80, 96},         {"camera_la.png", 90, 120},          {"chelsea16.png", 120, 90},
      {"rocket.jpg", 640, 427},         {"rocket_gray.jpg", 200, 133},       {"tiny.jpg", 23, 17},
      {"chelsea_lossy.webp", 180, 120}, {"chelsea_lossless.webp", 180, 120},
  };
  for (const auto& c : cases) {
    RgbImage image = decode_fixture(c.name);
    EXPECT_EQ(image.width, c.width) << c.name;
    EXPECT_EQ(image.height, c.height) << c.name;
    EXPECT_EQ(image.pixels.size(), static_cast<size_t>(c.width) * c.height * 3) << c.name;
  }
}

// Gray (8-bit and gray+alpha): the gray sample replicated into R, G and B; alpha ignored.
TEST(ImageDecode, GrayPngsReplicateGray) {
  for (const char* name : {"camera.png", "camera_la.png"}) {
    const testing::RawPng raw = raw_png(name);
    ASSERT_EQ(raw.bit_depth, 8);
    const RgbImage image = decode_fixture(name);
    ASSERT_EQ(image.width, raw.width);
    for (int y = 0; y < raw.height; ++y) {
      for (int x = 0; x < raw.width; ++x) {
        const uint8_t gray = raw.data[y * raw.row_bytes + x * raw.channels];
        const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
        ASSERT_TRUE(p[0] == gray && p[1] == gray && p[2] == gray) << name << " at " << x << "," << y;
      }
    }
  }
}

// RGB and RGBA: the RGB samples exactly, alpha dropped (logo.png's alpha is all 255; transparent pixels
// are covered by png_variants_test.cpp).
TEST(ImageDecode, RgbAndRgbaPngsKeepRgbSamples) {
  for (const char* name : {"chelsea.png", "logo.png"}) {
    const testing::RawPng raw = raw_png(name);
    ASSERT_EQ(raw.bit_depth, 8);
    ASSERT_GE(raw.channels, 3);
    const RgbImage image = decode_fixture(name);
    for (int y = 0; y < raw.height; ++y) {
      for (int x = 0; x < raw.width; ++x) {
        const uint8_t* s = &raw.data[y * raw.row_bytes + x * raw.channels];
        const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
        ASSERT_TRUE(p[0] == s[0] && p[1] == s[1] && p[2] == s[2]) << name << " at " << x << "," << y;
      }
    }
  }
}

// PIL opens 16-bit gray as "I;16"; convert("RGB") clips: min(v, 255) (I16_RGB / I;16 -> L in Convert.c).
TEST(ImageDecode, Gray16PngClipsAt255) {
  const testing::RawPng raw = raw_png("camera16.png");
  ASSERT_EQ(raw.bit_depth, 16);
  const RgbImage image = decode_fixture("camera16.png");
  for (int y = 0; y < raw.height; ++y) {
    for (int x = 0; x < raw.width; ++x) {
      const int v = raw.data[y * raw.row_bytes + 2 * x] * 256 + raw.data[y * raw.row_bytes + 2 * x + 1];
      const uint8_t expected = static_cast<uint8_t>(v > 255 ? 255 : v);
      const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
      ASSERT_TRUE(p[0] == expected && p[1] == expected && p[2] == expected) << x << "," << y << " v=" << v;
    }
  }
}

// "RGB;16B": the most significant byte of each sample.
TEST(ImageDecode, Rgb16PngTakesMostSignificantByte) {
  const testing::RawPng raw = raw_png("chelsea16.png");
  ASSERT_EQ(raw.bit_depth, 16);
  const RgbImage image = decode_fixture("chelsea16.png");
  for (int y = 0; y < raw.height; ++y) {
    for (int x = 0; x < raw.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(image.pixels[(static_cast<size_t>(y) * image.width + x) * 3 + c],
                  raw.data[y * raw.row_bytes + (x * 3 + c) * 2]);
      }
    }
  }
}

// "P": every pixel is PLTE[index]; PIL's palette is zero beyond the PLTE entries.
TEST(ImageDecode, PalettePngsExpandThroughPalette) {
  for (const char* name : {"palette_color.png", "palette_gray.png", "foo3x5x4indexed.png"}) {
    const testing::RawPng raw = raw_png(name);
    ASSERT_FALSE(raw.palette.empty()) << name;
    const RgbImage image = decode_fixture(name);
    for (int y = 0; y < raw.height; ++y) {
      for (int x = 0; x < raw.width; ++x) {
        const size_t index = raw.data[y * raw.row_bytes + x];
        const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
        for (int c = 0; c < 3; ++c) {
          const uint8_t expected = 3 * index + c < raw.palette.size() ? raw.palette[3 * index + c] : 0;
          ASSERT_EQ(p[c], expected) << name << " at " << x << "," << y;
        }
      }
    }
  }
}

TEST(ImageDecode, JpegMatchesLibjpegDefaults) {
  for (const char* name : {"rocket.jpg", "tiny.jpg", "rocket_gray.jpg"}) {
    testing::RawJpeg ref;
    ASSERT_TRUE(testing::decode_jpeg_reference(read_file_bytes(fixture(name)), &ref)) << name;
    const RgbImage image = decode_fixture(name);
    ASSERT_EQ(image.width, ref.width);
    ASSERT_EQ(image.height, ref.height);
    const size_t pixels = static_cast<size_t>(ref.width) * ref.height;
    for (size_t i = 0; i < pixels; ++i) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t expected = ref.components == 1 ? ref.data[i] : ref.data[i * 3 + c];
        ASSERT_EQ(image.pixels[i * 3 + c], expected) << name << " pixel " << i;
      }
    }
  }
}

// A 4-component (Adobe CMYK) JPEG: PIL inverts every byte ("CMYK;I") then applies cmyk2rgb.
TEST(ImageDecode, CmykJpegFollowsPilInvertedConversion) {
  const int width = 16, height = 16;
  std::vector<uint8_t> cmyk(static_cast<size_t>(width) * height * 4);
  for (size_t i = 0; i < cmyk.size(); i += 4) {
    cmyk[i] = 200, cmyk[i + 1] = 100, cmyk[i + 2] = 50, cmyk[i + 3] = 128;
  }
  const std::vector<uint8_t> jpeg = testing::encode_jpeg(cmyk, width, height, 4, JCS_CMYK, 100);
  ASSERT_FALSE(jpeg.empty());
  testing::RawJpeg ref;
  ASSERT_TRUE(testing::decode_jpeg_reference(jpeg, &ref));
  ASSERT_EQ(ref.components, 4);
  const RgbImage image = decode_ok(jpeg);
  ASSERT_EQ(image.width, width);
  for (size_t i = 0; i < static_cast<size_t>(width) * height; ++i) {
    const uint8_t* s = &ref.data[i * 4];
    const int nk = s[3];  // 255 - (255 - k)
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - s[c]) * nk + 128;
      ASSERT_EQ(image.pixels[i * 3 + c], nk - (((tmp >> 8) + tmp) >> 8)) << "pixel " << i;
    }
  }
  // Written out by hand for the stored (200, 100, 50, 128): C=55 M=155 Y=205 K=127 after inversion,
  // nk = 128; R = 128 - (55*128+128 = 7168 -> (28 + 7168) >> 8 = 28) = 100, G = 128 - 78 = 50, B = 128 - 103.
  if (ref.data[0] == 200 && ref.data[1] == 100 && ref.data[2] == 50 && ref.data[3] == 128) {
    EXPECT_EQ(image.pixels[0], 100);
    EXPECT_EQ(image.pixels[1], 50);
    EXPECT_EQ(image.pixels[2], 25);
  }
}

TEST(ImageDecode, WebpMatchesLibwebpWithAlphaDropped) {
  for (const char* name : {"chelsea_lossy.webp", "chelsea_lossless.webp"}) {
    int width = 0, height = 0;
    std::vector<uint8_t> ref;
    ASSERT_TRUE(testing::decode_webp_reference(read_file_bytes(fixture(name)), &width, &height, &ref)) << name;
    const RgbImage image = decode_fixture(name);
    ASSERT_EQ(image.width, width);
    ASSERT_EQ(image.height, height);
    EXPECT_EQ(image.pixels, ref) << name;
  }
}

TEST(ImageDecode, AnimatedWebpIsUnimplemented) {
  // RIFF/WEBP with a VP8X chunk whose flags have the animation bit (0x02); canvas 2x2.
  std::vector<uint8_t> bytes = {'R', 'I', 'F', 'F', 22, 0,    0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8',
                                'X', 10,  0,   0,   0,  0x02, 0, 0, 0,   1,   0,   0,   1,   0,   0};
  StatusOr<RgbImage> image = decode_rgb(bytes);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kUnimplemented) << image.status().to_string();
}

TEST(ImageDecode, EmptyAndGarbageAreInvalidArgument) {
  StatusOr<RgbImage> empty = decode_rgb(std::vector<uint8_t>{});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);

  std::mt19937 rng(1234);
  const std::vector<std::vector<uint8_t>> prefixes = {{},
                                                      {0xFF, 0xD8, 0xFF},
                                                      {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'},
                                                      {'R', 'I', 'F', 'F', 0, 1, 0, 0, 'W', 'E', 'B', 'P'}};
  for (const auto& prefix : prefixes) {
    for (int size : {1, 7, 64, 1000, 5000}) {
      std::vector<uint8_t> bytes = prefix;
      for (int i = 0; i < size; ++i) bytes.push_back(static_cast<uint8_t>(rng()));
      StatusOr<RgbImage> image = decode_rgb(bytes);
      ASSERT_FALSE(image.ok()) << "prefix " << prefix.size() << " + " << size << " random bytes";
      EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << image.status().to_string();
    }
  }
}

TEST(ImageDecode, TruncatedJpegFixtureIsAnError) {
  StatusOr<RgbImage> image = decode_rgb_file(fixture("truncated.jpg"));
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(image.status().message().find("JPEG"), std::string::npos) << image.status().message();
  EXPECT_NE(image.status().message().find("truncated.jpg"), std::string::npos) << image.status().message();
}

// Bytes up to the end of the last IDAT chunk (its CRC included): libpng needs all of them.
size_t png_end_of_last_idat(const std::vector<uint8_t>& bytes) {
  size_t pos = 8, end = 0;
  while (pos + 12 <= bytes.size()) {
    const size_t length = (size_t{bytes[pos]} << 24) | (bytes[pos + 1] << 16) | (bytes[pos + 2] << 8) | bytes[pos + 3];
    if (std::memcmp(&bytes[pos + 4], "IDAT", 4) == 0) end = pos + 12 + length;
    pos += 12 + length;
  }
  return end;
}

// Every prefix (all of them for small files, a spread plus the tail for large ones) fails cleanly while
// image data is missing; prefixes that only lose trailing chunks / the EOI marker may decode (PIL accepts
// those too).
TEST(ImageDecode, EveryTruncationFailsCleanly) {
  for (const char* name :
       {"tiny.jpg", "rocket_gray.jpg", "rocket.jpg", "foo3x5x4indexed.png", "palette_color.png", "camera16.png",
        "camera_la.png", "chelsea.png", "logo.png", "chelsea_lossy.webp", "chelsea_lossless.webp"}) {
    const std::vector<uint8_t> bytes = read_file_bytes(fixture(name));
    const ImageFormat format = sniff_format(bytes);
    const size_t must_fail_below = format == ImageFormat::kPng    ? png_end_of_last_idat(bytes)
                                   : format == ImageFormat::kJpeg ? bytes.size() - 2
                                                                  : bytes.size();
    std::vector<size_t> lengths;
    if (bytes.size() <= 6000) {
      for (size_t n = 0; n < bytes.size(); ++n) lengths.push_back(n);
    } else {
      for (size_t n = 0; n < bytes.size(); n += bytes.size() / 150) lengths.push_back(n);
      for (size_t n = bytes.size() - 80; n < bytes.size(); ++n) lengths.push_back(n);
    }
    for (size_t n : lengths) {
      const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(n));
      StatusOr<RgbImage> image = decode_rgb(prefix);
      if (n < must_fail_below) {
        ASSERT_FALSE(image.ok()) << name << " truncated to " << n << " of " << bytes.size();
        EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << image.status().to_string();
      }
    }
  }
}

// Flipped bits anywhere: an error or an image of the right size, never a crash (JPEG decodes corrupt
// entropy data with warnings, as PIL does).
TEST(ImageDecode, BitFlipsNeverCrash) {
  std::mt19937 rng(99);
  for (const char* name : {"tiny.jpg", "foo3x5x4indexed.png", "palette_gray.png", "chelsea_lossy.webp"}) {
    const std::vector<uint8_t> original = read_file_bytes(fixture(name));
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint8_t> bytes = original;
      for (int k = 0; k < 1 + trial % 4; ++k) bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      StatusOr<RgbImage> image = decode_rgb(bytes);
      if (image.ok()) {
        EXPECT_EQ(image->pixels.size(), static_cast<size_t>(image->width) * image->height * 3);
      }
    }
  }
}

// A syntactically valid PNG whose IHDR claims width x height but whose IDAT holds a few bytes only.
std::vector<uint8_t> png_header_only(uint32_t width, uint32_t height) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  for (uint8_t v : {8, 2, 0, 0, 0}) ihdr.push_back(v);  // 8-bit RGB, deflate, adaptive filter, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", {0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  put_chunk(out, "IEND", {});
  return out;
}

TEST(ImageDecode, HugePngHeaderIsRefusedBeforeDecoding) {
  StatusOr<RgbImage> image = decode_rgb(png_header_only(100000, 100000));
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kResourceExhausted) << image.status().to_string();
  // The same header at a small size gets past the guard and fails on the missing data instead.
  StatusOr<RgbImage> small = decode_rgb(png_header_only(100, 100));
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument) << small.status().to_string();
}

TEST(ImageDecode, HugeJpegHeaderIsRefusedBeforeDecoding) {
  std::vector<uint8_t> bytes = read_file_bytes(fixture("rocket.jpg"));
  size_t sof = 0;
  for (size_t i = 2; i + 9 < bytes.size(); ++i) {
    if (bytes[i] == 0xFF && bytes[i + 1] == 0xC0) {
      sof = i;
      break;
    }
  }
  ASSERT_NE(sof, 0u);
  // SOF0: FF C0, length (2), precision (1), height (2), width (2). 65000 = 0xFDE8 (libjpeg's limit is 65500).
  bytes[sof + 5] = 0xFD, bytes[sof + 6] = 0xE8, bytes[sof + 7] = 0xFD, bytes[sof + 8] = 0xE8;
  StatusOr<RgbImage> image = decode_rgb(bytes);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kResourceExhausted) << image.status().to_string();
}

TEST(ImageDecode, PixelLimitIsInclusiveForEveryFormat) {
  for (const char* name : {"chelsea.png", "rocket.jpg", "chelsea_lossy.webp"}) {
    const std::vector<uint8_t> bytes = read_file_bytes(fixture(name));
    const RgbImage image = decode_ok(bytes);
    const int64_t pixels = int64_t{image.width} * image.height;
    EXPECT_TRUE(decode_rgb(bytes, DecodeOptions{pixels}).ok()) << name;
    StatusOr<RgbImage> refused = decode_rgb(bytes, DecodeOptions{pixels - 1});
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << name;
  }
}

TEST(ImageDecode, ZeroDimensionsAreInvalid) {
  StatusOr<RgbImage> png = decode_rgb(png_header_only(0, 10));
  ASSERT_FALSE(png.ok());
  EXPECT_EQ(png.status().code(), StatusCode::kInvalidArgument) << png.status().to_string();

  std::vector<uint8_t> jpeg = read_file_bytes(fixture("tiny.jpg"));
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = 0, jpeg[i + 6] = 0;  // height 0
      break;
    }
  }
  StatusOr<RgbImage> image = decode_rgb(jpeg);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << image.status().to_string();
}

TEST(ImageDecode, FileErrors) {
  StatusOr<RgbImage> missing = decode_rgb_file(fixture("no_such_image.png"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no_such_image.png"), std::string::npos);

  StatusOr<RgbImage> directory = decode_rgb_file(std::string(MMSERVE_FIXTURES_DIR) + "/images");
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::image
