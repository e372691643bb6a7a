// Differential libFuzzer target for decode_png's fast path (frontends/image/png_decode.cpp) against libpng alone.
// Random bytes almost never carry right CRCs, so the input is read as a recipe and the PNG is built here: byte 0
// picks the colour type (and now and then 16-bit, palette, Adam7 or a small zlib window), bytes 1-2 the size
// (1..64 x 1..64), byte 3 the IDAT split, byte 4 a corruption (bit 0: one bit flipped after the CRCs are written;
// bit 1: the rows keep the input's length instead of the header's; bit 2: one ancillary chunk before the IDATs,
// its type from bits 3-7), the rest the filtered rows (filter bytes included, so unknown filter types appear). The
// raw input is decoded too.
// Whenever the fast path answers it must equal decode_png_libpng (pixels or refusal); decode_png must always
// equal decode_png_libpng. The GPU decoder's input (split_png_for_device) and its CPU twin (kernels/png_inflate,
// header-only) against the fast path, both ways: whenever the fast path succeeds, split + twin give its pixels;
// whenever split gives a stream and the twin succeeds, the fast path succeeded with the same pixels; no stream
// where the fast path gives up before inflating. Traps on any difference.
// Seeds: fuzz/corpus/png_fast_path_fuzz. Run: build/fuzz/fuzz/png_fast_path_fuzz -max_total_time=60
// fuzz/corpus/png_fast_path_fuzz (docs/testing.md).
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "frontends/image/codecs.h"
#include "frontends/image/image.h"
#include "frontends/image/png_device.h"
#include "kernels/png_inflate/png_unfilter_core.h"

namespace {

using namespace mmserve::image;

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, const char* type, const uint8_t* data, size_t size) {
  put_be32(out, static_cast<uint32_t>(size));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data, data + size);
  put_be32(out, static_cast<uint32_t>(crc32(0, out.data() + start, static_cast<uInt>(out.size() - start))));
}

std::vector<uint8_t> build_png(const uint8_t* data, size_t size) {
  static const uint8_t kColourTypes[] = {0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 3};
  const uint8_t recipe = data[0];
  const uint8_t color_type = kColourTypes[(recipe & 15) % sizeof(kColourTypes)];
  const uint8_t bit_depth = (recipe & 0x30) == 0x30 ? 16 : 8;
  const uint8_t interlace = (recipe & 0xc0) == 0xc0 ? 1 : 0;
  const int window_bits = (recipe & 0xc0) == 0x80 ? 9 : 15;
  const uint32_t width = 1 + data[1] % 64, height = 1 + data[2] % 64;
  const size_t idat_max = 1 + data[3] * 16;
  const uint8_t corruption = data[4];
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  ihdr.insert(ihdr.end(), {bit_depth, color_type, 0, 0, interlace});
  put_chunk(out, "IHDR", ihdr.data(), ihdr.size());
  if (corruption & 4) {  // ancillary chunks of arbitrary lengths, on the fast path's list and off it
    static const char* kTypes[] = {"pHYs", "gAMA", "sRGB", "iCCP", "tEXt", "zTXt", "tRNS", "sBIT", "bKGD", "eXIf"};
    const char* type = kTypes[(corruption >> 3) % 10];
    put_chunk(out, type, data + 5, std::min<size_t>(size - 5, data[3] % 40));
  }
  if (color_type == 3) {
    const std::vector<uint8_t> palette(3 * 200, 0x5a);
    put_chunk(out, "PLTE", palette.data(), palette.size());
  }
  // Mostly exactly the rows the header needs (the input repeated), so that the fast path's success is exercised;
  // with bit 1 of the corruption byte, the input's own length (too much or too little data).
  std::vector<uint8_t> rows(data + 5, data + size);
  if ((corruption & 2) == 0 && !rows.empty()) {
    const size_t samples = color_type == 0 || color_type == 3 ? 1 : color_type == 4 ? 2 : color_type == 2 ? 3 : 4;
    const size_t needed = height * (1 + width * samples * (bit_depth / 8));
    for (size_t i = rows.size(); i < needed; ++i) rows.push_back(rows[i % (size - 5)]);
    rows.resize(needed);
  }
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::vector<uint8_t> stream(deflateBound(&z, rows.size()));
  z.next_in = rows.data();
  z.avail_in = static_cast<uInt>(rows.size());
  z.next_out = stream.data();
  z.avail_out = static_cast<uInt>(stream.size());
  deflate(&z, Z_FINISH);
  stream.resize(z.total_out);
  deflateEnd(&z);
  for (size_t pos = 0; pos < stream.size(); pos += idat_max) {
    put_chunk(out, "IDAT", stream.data() + pos, std::min(idat_max, stream.size() - pos));
  }
  put_chunk(out, "IEND", nullptr, 0);
  if (corruption & 1) out[(corruption >> 1) * 7919 % out.size()] ^= static_cast<uint8_t>(1 << (corruption % 8));
  return out;
}

// split_png_for_device + the CPU twin of kernels/png_inflate against decode_png_fast's answer `fast`.
void check_split(std::span<const uint8_t> file, const DecodeOptions& options,
                 const std::optional<mmserve::StatusOr<RgbImage>>& fast) {
  const std::optional<mmserve::StatusOr<PngStream>> split = split_png_for_device(file, options);
  if (!split.has_value()) {
    if (fast.has_value()) __builtin_trap();  // split refused a file the fast path inflated
    return;
  }
  if (!split->ok()) {
    if (!fast.has_value() || fast->ok() || fast->status().message() != split->status().message()) __builtin_trap();
    return;
  }
  const PngStream& png = **split;
  std::vector<uint8_t> rgb(size_t{png.width} * png.height * 3);
  const bool twin_ok =
      mmserve::kernels::inflate_png_image(png.zlib(), png.width, png.height, static_cast<uint32_t>(png.channels),
                                          rgb.data()) == mmserve::kernels::PngInflateStatus::kOk;
  const bool fast_ok = fast.has_value() && fast->ok();
  if (twin_ok != fast_ok) __builtin_trap();
  if (fast_ok && rgb != (*fast)->pixels) __builtin_trap();
}

void check(std::span<const uint8_t> file) {
  DecodeOptions options;
  options.max_pixels = 4LL * 1024 * 1024;
  const mmserve::StatusOr<RgbImage> reference = detail::decode_png_libpng(file, options);
  const std::optional<mmserve::StatusOr<RgbImage>> fast = detail::decode_png_fast(file, options);
  const auto same = [&](const mmserve::StatusOr<RgbImage>& a) {
    if (a.ok() != reference.ok()) return false;
    if (!a.ok()) return a.status().message() == reference.status().message();
    return a->width == reference->width && a->height == reference->height && a->pixels == reference->pixels;
  };
  if (fast && !same(*fast)) __builtin_trap();
  if (!same(detail::decode_png(file, options))) __builtin_trap();
  check_split(file, options, fast);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5 || size > (1 << 16)) return 0;
  const std::vector<uint8_t> file = build_png(data, size);
  if (!file.empty()) check(file);
  if (size >= 8 && data[0] == 0x89) check(std::span<const uint8_t>(data, size));
  return 0;
}
