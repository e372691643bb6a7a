// COCO RLE encoding and decoding (see mask_rle.h): rleEncode, rleToString, rleFrString and rleDecode of
// pycocotools' common/maskApi.c, with the decoder checking what pycocotools trusts (characters, truncation,
// overflow, the total against the mask size), since the strings a client sends are outside bytes.
// Tests: tests/unit/frontends/image/mask_rle_test.cpp.
#include "frontends/image/mask_rle.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace mmserve::image {
namespace {

constexpr int kMaxChars = 7;                             // 35 bits: every delta of two uint32 counts fits
constexpr int64_t kMaxDecodedPixels = int64_t{1} << 28;  // 256 Mpx: refuse absurd sizes before allocating

}  // namespace

std::vector<uint32_t> coco_rle_runs(const uint8_t* mask, int height, int width) {
  MMSERVE_CHECK(height >= 0 && width >= 0, "coco_rle_runs needs a non-negative size");
  MMSERVE_CHECK(int64_t{height} * width <= std::numeric_limits<uint32_t>::max(), "mask too large for COCO RLE");
  MMSERVE_CHECK(mask != nullptr || int64_t{height} * width == 0, "coco_rle_runs needs a mask");
  // COCO's order is column-major. Walking a row-major mask down its columns touches a new cache line per pixel
  // (~1 ms for a click's three 640 x 427 masks), so the mask is first transposed in tiles into a column-major
  // copy of 0/1 bytes. The runs are then read off the transitions, 8 bytes at a time: XOR-ing a word with itself
  // shifted by one byte (the previous word's last byte shifted in) leaves bit 0 set in exactly the bytes that
  // differ from their predecessor, and each set bit ends a run. Smooth masks cost one XOR per 8 pixels; noisy
  // ones (random weights: a transition every ~2 pixels) one count-trailing-zeros per run instead of a
  // mispredicted branch per pixel.
  const size_t n = static_cast<size_t>(height) * width;
  std::vector<uint8_t> columns(n);
  constexpr int kTile = 32;
  for (int y0 = 0; y0 < height; y0 += kTile) {
    const int y1 = std::min(height, y0 + kTile);
    for (int x0 = 0; x0 < width; x0 += kTile) {
      const int x1 = std::min(width, x0 + kTile);
      for (int y = y0; y < y1; ++y) {
        const uint8_t* row = mask + static_cast<size_t>(y) * width;
        for (int x = x0; x < x1; ++x) columns[static_cast<size_t>(x) * height + y] = row[x] != 0 ? 1 : 0;
      }
    }
  }
  static_assert(std::endian::native == std::endian::little, "the word scan reads bytes in little-endian order");
  std::vector<uint32_t> runs;
  const uint8_t* c = columns.data();
  size_t i = 0, run_start = 0;
  uint64_t previous = 0;  // the byte before c[i]; runs alternate 0, 1, 0, ... starting with zeros
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, c + i, 8);
    uint64_t changed = word ^ ((word << 8) | previous);
    previous = word >> 56;
    while (changed != 0) {
      const size_t at = i + static_cast<size_t>(std::countr_zero(changed) >> 3);
      runs.push_back(static_cast<uint32_t>(at - run_start));  // a leading run of 0 zeros when c[0] is 1
      run_start = at;
      changed &= changed - 1;
    }
  }
  for (; i < n; ++i) {
    if (c[i] == previous) continue;
    runs.push_back(static_cast<uint32_t>(i - run_start));
    run_start = i;
    previous = c[i];
  }
  runs.push_back(static_cast<uint32_t>(n - run_start));
  return runs;
}

std::string coco_rle_runs_to_string(std::span<const uint32_t> runs) {
  std::string out;
  out.reserve(runs.size() * 2);
  for (size_t i = 0; i < runs.size(); ++i) {
    int64_t x = runs[i];
    if (i > 2) x -= runs[i - 2];
    bool more = true;
    while (more) {
      int64_t c = x & 0x1f;
      x >>= 5;  // arithmetic (C++20)
      more = (c & 0x10) != 0 ? x != -1 : x != 0;
      if (more) c |= 0x20;
      out.push_back(static_cast<char>(c + 48));
    }
  }
  return out;
}

StatusOr<std::vector<uint32_t>> coco_rle_runs_from_string(std::string_view counts) {
  std::vector<uint32_t> runs;
  size_t p = 0;
  while (p < counts.size()) {
    const size_t start = p;
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= counts.size()) {
        return invalid_argument("COCO RLE counts: the value at offset " + std::to_string(start) +
                                " is cut off by the end of the string");
      }
      if (k == kMaxChars) {
        return invalid_argument("COCO RLE counts: the value at offset " + std::to_string(start) + " is longer than " +
                                std::to_string(kMaxChars) + " characters");
      }
      const int c = static_cast<unsigned char>(counts[p]) - 48;
      if (c < 0 || c > 63) {
        return invalid_argument("COCO RLE counts: invalid character (code " +
                                std::to_string(static_cast<unsigned char>(counts[p])) + ") at offset " +
                                std::to_string(p) + "; expected '0'..'o'");
      }
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10) != 0) x |= static_cast<int64_t>(~uint64_t{0} << (5 * k));  // sign extension
    }
    if (runs.size() > 2) x += runs[runs.size() - 2];
    if (x < 0 || x > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
      return invalid_argument("COCO RLE counts: run " + std::to_string(runs.size()) + " (at offset " +
                              std::to_string(start) + ") comes out as " + std::to_string(x));
    }
    runs.push_back(static_cast<uint32_t>(x));
  }
  return runs;
}

std::string coco_rle_counts(const uint8_t* mask, int height, int width) {
  return coco_rle_runs_to_string(coco_rle_runs(mask, height, width));
}

StatusOr<std::vector<uint8_t>> decode_coco_rle(std::string_view counts, int height, int width) {
  if (height < 0 || width < 0) {
    return invalid_argument("COCO RLE: invalid size [" + std::to_string(height) + ", " + std::to_string(width) + "]");
  }
  const int64_t area = int64_t{height} * width;
  if (area > kMaxDecodedPixels) {
    return too_large("COCO RLE: a " + std::to_string(height) + "x" + std::to_string(width) + " mask is above " +
                     std::to_string(kMaxDecodedPixels) + " pixels");
  }
  ASSIGN_OR_RETURN(std::vector<uint32_t> runs, coco_rle_runs_from_string(counts));
  int64_t total = 0;
  for (uint32_t r : runs) total += r;  // at most 2^32 runs of < 2^32: no overflow in int64
  if (total != area) {
    return invalid_argument("COCO RLE: the runs cover " + std::to_string(total) + " pixels, the size [" +
                            std::to_string(height) + ", " + std::to_string(width) + "] has " + std::to_string(area));
  }
  std::vector<uint8_t> mask(static_cast<size_t>(area), 0);
  int64_t pos = 0;  // column-major index
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i % 2 == 1 && runs[i] > 0) {  // a run of ones (never reached for an empty mask: no division by 0)
      int64_t x = pos / height, y = pos % height;
      for (uint32_t j = 0; j < runs[i]; ++j) {
        mask[static_cast<size_t>(y * width + x)] = 1;
        if (++y == height) {
          y = 0;
          ++x;
        }
      }
    }
    pos += runs[i];
  }
  return mask;
}

}  // namespace mmserve::image
