// decode_png's fast path (libdeflate + our unfiltering) against libpng alone: files built here byte by byte
// (every filter type, every 8-bit colour type it takes, IDAT split anywhere) must be taken and decode to
// libpng's pixels; files libpng writes itself (adaptive filters, 8 KiB IDATs) too; and every file it must not
// take (bad CRC, unknown filter, too much or too little data, other chunks, small zlib windows, 16-bit, palette,
// interlace) must be left to libpng, so that decode_rgb's answer and message stay libpng's. Every file here also
// goes through split_png_for_device + the GPU decoder's CPU twin (kernels/png_inflate, header-only here), which must
// give the fast path's pixels when it succeeds and fail where it gives up; so must the fixture PNGs.
#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "frontends/image/codecs.h"
#include "frontends/image/image.h"
#include "frontends/image/png_device.h"
#include "kernels/png_inflate/png_unfilter_core.h"
#include "reference_codecs.h"
#include "test_paths.h"

namespace mmserve::image {
namespace {

using testing::put_be32;
using testing::put_chunk;

struct RawPng {
  uint32_t width = 0, height = 0;
  int bit_depth = 8, color_type = PNG_COLOR_TYPE_RGB, interlace = 0;
  std::vector<uint8_t> filtered;  // height rows of (filter byte, row bytes)
  size_t idat_max = 1 << 20;      // the IDAT chunk size the stream is split into
  int window_bits = 15;
  size_t sync_every = 0;  // > 0: a Z_SYNC_FLUSH (an empty stored block, ~5 bytes) after every this many bytes
  std::vector<std::pair<std::string, std::vector<uint8_t>>> before_idat;  // extra chunks
};

std::vector<uint8_t> build_png(const RawPng& spec) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, spec.width);
  put_be32(ihdr, spec.height);
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(spec.bit_depth), static_cast<uint8_t>(spec.color_type), 0, 0,
                           static_cast<uint8_t>(spec.interlace)});
  put_chunk(out, "IHDR", ihdr);
  for (const auto& [type, data] : spec.before_idat) put_chunk(out, type.c_str(), data);
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, spec.window_bits, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> stream(deflateBound(&z, spec.filtered.size()) * 8 + 64);
  z.next_out = stream.data();
  z.avail_out = static_cast<uInt>(stream.size());
  const size_t piece = spec.sync_every > 0 ? spec.sync_every : spec.filtered.size();
  for (size_t pos = 0; pos < spec.filtered.size(); pos += piece) {
    z.next_in = const_cast<uint8_t*>(spec.filtered.data()) + pos;
    z.avail_in = static_cast<uInt>(std::min(piece, spec.filtered.size() - pos));
    EXPECT_EQ(deflate(&z, Z_SYNC_FLUSH), Z_OK);
  }
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  stream.resize(z.total_out);
  deflateEnd(&z);
  for (size_t pos = 0; pos < stream.size(); pos += spec.idat_max) {
    const size_t n = std::min(spec.idat_max, stream.size() - pos);
    put_chunk(out, "IDAT", std::vector<uint8_t>(stream.begin() + pos, stream.begin() + pos + n));
  }
  put_chunk(out, "IEND", {});
  return out;
}

int channels(int color_type) {
  return color_type == PNG_COLOR_TYPE_GRAY         ? 1
         : color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
         : color_type == PNG_COLOR_TYPE_RGB        ? 3
                                                   : 4;
}

// Random rows, each with the given filter type (-1: a random one per row).
RawPng random_png(uint32_t width, uint32_t height, int color_type, int filter, unsigned seed) {
  std::mt19937 rng(seed);
  RawPng spec;
  spec.width = width, spec.height = height, spec.color_type = color_type;
  const size_t row = width * static_cast<size_t>(channels(color_type));
  for (uint32_t y = 0; y < height; ++y) {
    spec.filtered.push_back(static_cast<uint8_t>(filter >= 0 ? filter : rng() % 5));
    for (size_t i = 0; i < row; ++i) spec.filtered.push_back(static_cast<uint8_t>(rng() % 24 + (i % 7) * 30));
  }
  return spec;
}

std::span<const uint8_t> span_of(const std::vector<uint8_t>& v) {
  return {v.data(), v.size()};
}

// split_png_for_device + the CPU twin of the GPU decoder against decode_png_fast: no stream where the fast path
// gives up before inflating, its guard's error, and otherwise success exactly when the fast path succeeds, with its
// pixels. Returns whether a stream came out.
bool expect_split_agrees(const std::vector<uint8_t>& file, const std::string& what, const DecodeOptions& options = {}) {
  const std::optional<StatusOr<RgbImage>> fast = detail::decode_png_fast(span_of(file), options);
  const std::optional<StatusOr<PngStream>> split = split_png_for_device(span_of(file), options);
  if (!split.has_value()) {
    EXPECT_FALSE(fast.has_value()) << what << ": split refused a file the fast path takes";
    return false;
  }
  if (!split->ok()) {
    EXPECT_TRUE(fast.has_value() && !fast->ok()) << what;
    if (fast.has_value() && !fast->ok()) {
      EXPECT_EQ(split->status().message(), fast->status().message()) << what;
    }
    return false;
  }
  const PngStream& png = **split;
  std::vector<uint8_t> rgb(size_t{png.width} * png.height * 3);
  const kernels::PngInflateStatus status =
      kernels::inflate_png_image(png.zlib(), png.width, png.height, static_cast<uint32_t>(png.channels), rgb.data());
  const bool taken = fast.has_value() && fast->ok();
  EXPECT_EQ(status == kernels::PngInflateStatus::kOk, taken)
      << what << ": the twin says " << kernels::png_inflate_status_name(status);
  if (taken && status == kernels::PngInflateStatus::kOk) {
    EXPECT_EQ(static_cast<int>(png.width), (*fast)->width) << what;
    EXPECT_EQ(static_cast<int>(png.height), (*fast)->height) << what;
    EXPECT_EQ(rgb, (*fast)->pixels) << what;
  }
  return true;
}

void expect_fast_equals_libpng(const std::vector<uint8_t>& file, const std::string& what) {
  EXPECT_TRUE(expect_split_agrees(file, what)) << what;
  std::optional<StatusOr<RgbImage>> fast = detail::decode_png_fast(span_of(file), {});
  ASSERT_TRUE(fast.has_value()) << what << ": the fast path gave up";
  ASSERT_TRUE(fast->ok()) << what << ": " << fast->status().to_string();
  StatusOr<RgbImage> reference = detail::decode_png_libpng(span_of(file), {});
  ASSERT_TRUE(reference.ok()) << what << ": " << reference.status().to_string();
  EXPECT_EQ((*fast)->width, reference->width) << what;
  EXPECT_EQ((*fast)->height, reference->height) << what;
  EXPECT_EQ((*fast)->pixels, reference->pixels) << what;
}

void expect_left_to_libpng(const std::vector<uint8_t>& file, const std::string& what) {
  EXPECT_FALSE(detail::decode_png_fast(span_of(file), {}).has_value()) << what;
  expect_split_agrees(file, what);
  StatusOr<RgbImage> decoded = decode_rgb(span_of(file));
  StatusOr<RgbImage> reference = detail::decode_png_libpng(span_of(file), {});
  ASSERT_EQ(decoded.ok(), reference.ok()) << what;
  if (decoded.ok()) {
    EXPECT_EQ(decoded->pixels, reference->pixels) << what;
  } else {
    EXPECT_EQ(decoded.status().message(), reference.status().message()) << what;
  }
}

TEST(PngFastPath, EveryFilterAndColourTypeEqualsLibpng) {
  unsigned seed = 1;
  for (int color_type :
       {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA}) {
    for (int filter = -1; filter <= 4; ++filter) {
      for (auto [w, h] : {std::pair<uint32_t, uint32_t>{1, 1}, {1, 9}, {7, 5}, {64, 33}, {201, 3}}) {
        RawPng spec = random_png(w, h, color_type, filter, seed++);
        const std::string what = "colour type " + std::to_string(color_type) + " filter " + std::to_string(filter) +
                                 " " + std::to_string(w) + "x" + std::to_string(h);
        expect_fast_equals_libpng(build_png(spec), what);
        spec.idat_max = 7;  // the stream split over many IDATs
        expect_fast_equals_libpng(build_png(spec), what + " in 7-byte IDATs");
      }
    }
  }
}

TEST(PngFastPath, FilesLibpngWritesAreTaken) {
  const int width = 160, height = 120;  // big enough for libpng to keep the 32 KiB window
  std::mt19937 rng(3);
  for (int color_type : {PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA, PNG_COLOR_TYPE_GRAY}) {
    testing::PngToWrite spec;
    spec.width = width, spec.height = height, spec.bit_depth = 8, spec.color_type = color_type;
    for (int i = 0; i < width * height * channels(color_type); ++i) {
      spec.rows.push_back(static_cast<uint8_t>((i % 97) + rng() % 16));
    }
    expect_fast_equals_libpng(testing::write_png(spec), "libpng's colour type " + std::to_string(color_type));
  }
}

TEST(PngFastPath, EverythingElseIsLeftToLibpng) {
  const RawPng good = random_png(40, 30, PNG_COLOR_TYPE_RGB, -1, 77);
  expect_fast_equals_libpng(build_png(good), "the good file");
  const std::vector<uint8_t> file = build_png(good);
  {
    std::vector<uint8_t> bad = file;
    bad[bad.size() - 20] ^= 1;  // inside the IDAT data: the CRC no longer matches
    expect_left_to_libpng(bad, "IDAT CRC");
    bad = file;
    bad[8 + 8 + 3] ^= 1;  // IHDR's width
    expect_left_to_libpng(bad, "IHDR CRC");
    expect_left_to_libpng(std::vector<uint8_t>(file.begin(), file.end() - 12), "no IEND");
    expect_left_to_libpng(std::vector<uint8_t>(file.begin(), file.begin() + file.size() / 2), "truncated");
  }
  RawPng spec = good;
  spec.filtered[0] = 5;
  expect_left_to_libpng(build_png(spec), "filter type 5");
  spec = good;
  spec.filtered.resize(spec.filtered.size() - 1);
  expect_left_to_libpng(build_png(spec), "one byte short");
  spec = good;
  spec.filtered.insert(spec.filtered.end(), 121, 0);
  expect_left_to_libpng(build_png(spec), "one row too many");
  spec = good;
  spec.window_bits = 9;
  expect_left_to_libpng(build_png(spec), "a 512-byte window");
  spec = good;
  spec.before_idat.push_back({"zzZz", {1, 2, 3}});
  expect_left_to_libpng(build_png(spec), "an unknown critical chunk");
  spec = good;
  spec.interlace = 1;
  expect_left_to_libpng(build_png(spec), "Adam7");
  spec = good;
  spec.bit_depth = 16;
  expect_left_to_libpng(build_png(spec), "16-bit");
  spec = random_png(40, 30, PNG_COLOR_TYPE_GRAY, 0, 5);
  spec.color_type = PNG_COLOR_TYPE_PALETTE;
  spec.before_idat.push_back({"PLTE", std::vector<uint8_t>(768, 9)});
  expect_left_to_libpng(build_png(spec), "palette");
}

TEST(PngFastPath, AncillaryChunksLibpngCannotFailOnAreTaken) {
  const RawPng good = random_png(40, 30, PNG_COLOR_TYPE_RGB, -1, 78);
  // Well-formed, and malformed in the ways libpng only warns about (wrong lengths, a broken profile, duplicates).
  const std::vector<std::vector<std::pair<std::string, std::vector<uint8_t>>>> sets = {
      {{"pHYs", {0, 0, 11, 19, 0, 0, 11, 19, 1}}, {"gAMA", {0, 0, 177, 143}}, {"sRGB", {0}}},
      {{"tEXt", {'k', 'e', 'y', 0, 'v'}}, {"tIME", {7, 234, 12, 2, 13, 0, 0}}, {"sBIT", {5, 6, 5}}},
      {{"iCCP", {'p', 0, 0, 0x78, 0x9c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {"cHRM", std::vector<uint8_t>(32, 1)}},
      {{"pHYs", {1, 2}}, {"sRGB", {0, 1}}, {"gAMA", {1}}, {"tRNS", {0, 1, 0, 2, 0, 3}}, {"tRNS", {0}}},
      {{"zTXt", {'k', 0, 0, 1, 2, 3}}, {"iTXt", {'k', 0, 1, 0, 0, 0, 9, 9}}, {"sBIT", {9, 9, 9}}},
  };
  for (const auto& chunks : sets) {
    RawPng spec = good;
    spec.before_idat = chunks;
    expect_fast_equals_libpng(build_png(spec), "ancillary " + chunks.front().first);
  }
  for (const char* type : {"bKGD", "hIST", "sPLT", "eXIf", "acTL", "vpAg"}) {  // not on the list
    RawPng spec = good;
    spec.before_idat = {{type, {0, 0, 0, 0, 0, 0}}};
    expect_left_to_libpng(build_png(spec), type);
  }
}

TEST(PngFastPath, IdatLongerThanLibpngsLimitIsLeftToLibpng) {
  // A valid stream padded with empty stored blocks (a sync flush every 8 bytes): one IDAT longer than the filtered
  // size + zlib/deflate overhead. libpng refuses an IDAT above max(that, user_chunk_malloc_max) as "chunk data is
  // too large"; Debian's 8,000,000-byte default takes this one, a build with another limit may not: the fast path
  // stays below every build's limit and leaves it to libpng.
  RawPng spec = random_png(40, 30, PNG_COLOR_TYPE_RGB, 0, 6);
  spec.sync_every = 8;
  const std::vector<uint8_t> file = build_png(spec);
  const size_t limit = 30 * 121 + 6 + 5 * (30 + 1);
  ASSERT_GT(file.size() - 8 - 25 - 12 - 12, limit);  // the one IDAT's data
  expect_left_to_libpng(file, "an IDAT above the filtered size's limit");
  spec.idat_max = 1000;  // the same stream in chunks below the limit: taken
  expect_fast_equals_libpng(build_png(spec), "the same stream in 1000-byte IDATs");
}

TEST(PngFastPath, SplitForTheDeviceAgreesOnTheFixtures) {
  int taken = 0, files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(MMSERVE_FIXTURES_DIR)) {
    if (entry.path().extension() != ".png") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    expect_split_agrees(file, entry.path().filename().string());
    const std::optional<StatusOr<RgbImage>> fast = detail::decode_png_fast(span_of(file), {});
    taken += fast.has_value() && fast->ok() ? 1 : 0;
  }
  EXPECT_GT(files, 5);
  EXPECT_GT(taken, 0);  // some fixtures are plain 8-bit files the fast path takes
}

TEST(PngFastPath, SplitGivesNoStreamForFilesTheFastPathDoesNotTake) {
  const RawPng good = random_png(40, 30, PNG_COLOR_TYPE_RGB, -1, 79);
  std::vector<uint8_t> file = build_png(good);
  ASSERT_TRUE(split_png_for_device(span_of(file), {}).has_value());
  file[file.size() - 20] ^= 1;  // an IDAT CRC
  EXPECT_FALSE(split_png_for_device(span_of(file), {}).has_value());
  RawPng spec = good;
  spec.window_bits = 9;
  EXPECT_FALSE(split_png_for_device(span_of(build_png(spec)), {}).has_value()) << "a 512-byte window";
  spec = good;
  spec.bit_depth = 16;
  EXPECT_FALSE(split_png_for_device(span_of(build_png(spec)), {}).has_value()) << "16-bit";
  spec = good;
  spec.interlace = 1;
  EXPECT_FALSE(split_png_for_device(span_of(build_png(spec)), {}).has_value()) << "Adam7";
  // One IDAT: the stream lies inside the file; several: joined.
  const std::vector<uint8_t> one = build_png(good);
  const auto split_one = split_png_for_device(span_of(one), {});
  ASSERT_TRUE(split_one.has_value() && split_one->ok());
  EXPECT_TRUE((*split_one)->joined.empty());
  EXPECT_GE((*split_one)->zlib().data(), one.data());
  EXPECT_LE((*split_one)->zlib().data() + (*split_one)->zlib().size(), one.data() + one.size());
  spec = good;
  spec.idat_max = 100;
  const std::vector<uint8_t> many = build_png(spec);
  const auto split_many = split_png_for_device(span_of(many), {});
  ASSERT_TRUE(split_many.has_value() && split_many->ok());
  EXPECT_FALSE((*split_many)->joined.empty());
  EXPECT_EQ((*split_many)->channels, 3);
  EXPECT_EQ((*split_many)->color_type, PNG_COLOR_TYPE_RGB);
  expect_split_agrees(many, "many IDATs");
}

TEST(PngFastPath, PixelGuardComesFirstAsInLibpngsPath) {
  const std::vector<uint8_t> file = build_png(random_png(64, 64, PNG_COLOR_TYPE_RGB, 1, 9));
  DecodeOptions options;
  options.max_pixels = 64 * 64 - 1;
  std::optional<StatusOr<RgbImage>> fast = detail::decode_png_fast(span_of(file), options);
  ASSERT_TRUE(fast.has_value());
  StatusOr<RgbImage> reference = detail::decode_png_libpng(span_of(file), options);
  ASSERT_FALSE(fast->ok());
  ASSERT_FALSE(reference.ok());
  EXPECT_EQ(fast->status().code(), reference.status().code());
  EXPECT_EQ(fast->status().message(), reference.status().message());
  expect_split_agrees(file, "above the pixel limit", options);
}

}  // namespace
}  // namespace mmserve::image
