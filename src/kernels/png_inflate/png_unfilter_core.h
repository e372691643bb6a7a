// The second half of the PNG decoder shared by the CPU and CUDA twins (the first is png_inflate_core.h): unfilter
// + RGB conversion, as __host__ __device__ templates over a team of threads, and the decode of one whole image on
// one thread (the CPU twin's body; header-only, so that code which does not link mmserve_kernels, the image
// frontend's tests and the PNG fuzz target, runs the very same decoder).
// Row r is unfiltered by thread r % size() in chunks of pixels, one chunk per step, each row one step behind the row
// above (a wavefront: filters 1, 3 and 4 are serial along a row, 2, 3 and 4 need the row above), in place in the
// filtered rows, converting each chunk to RGB as it goes (png_decode.cpp's convert_row for 8-bit samples).
// Tests: png_inflate_test.cpp, png_inflate_cuda_test.cpp, tests/unit/frontends/image/png_fast_path_test.cpp,
// fuzz/png_fast_path_fuzz.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/png_inflate/png_inflate.h"
#include "kernels/png_inflate/png_inflate_core.h"
#include "kernels/png_inflate/png_inflate_zlib_core.h"

namespace mmserve::kernels::png_inflate {

// ---- Unfilter + convert. ----

MMSERVE_PNG_INLINE uint32_t predict(uint32_t filter, uint32_t a, uint32_t b, uint32_t c) {
  const int32_t ia = static_cast<int32_t>(a), ib = static_cast<int32_t>(b), ic = static_cast<int32_t>(c);
  const int32_t pa = ib > ic ? ib - ic : ic - ib, pb = ia > ic ? ia - ic : ic - ia;
  const int32_t pc = ia + ib > 2 * ic ? ia + ib - 2 * ic : 2 * ic - ia - ib;
  const uint32_t paeth = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
  return filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) >> 1 : filter == 4 ? paeth : 0;
}

// Unfilters `height` rows of `width` pixels of kChannels bytes in place at `rows` (each a filter byte first) and
// writes RGB8 HWC at `out`. False (in every thread) on a filter type above 4.
template <int kChannels, class Team>
MMSERVE_PNG_HD bool unfilter_rows(Team& team, uint8_t* rows, uint32_t width, uint32_t height, uint8_t* out) {
  const uint32_t threads = team.size(), t = team.lane();
  const uint64_t stride = uint64_t{width} * kChannels + 1;
  const uint32_t chunk = (width + threads - 1) / threads;  // pixels per step
  const uint32_t chunks = (width + chunk - 1) / chunk;     // steps per row
  // Row r starts at step start(r): one after the row above, or when its thread is free (rows longer than the team).
  const uint64_t group_steps = chunks > threads ? chunks : threads;
  const auto start = [&](uint32_t r) { return uint64_t{r / threads} * group_steps + r % threads; };
  const uint64_t steps = start(height - 1) + chunks;
  uint32_t r = t, filter = 0;
  uint32_t left[kChannels] = {};
  for (uint64_t s = 0; s < steps; ++s) {
    bool bad = false;
    if (r < height && s >= start(r)) {
      const uint32_t c = static_cast<uint32_t>(s - start(r));
      uint8_t* row = rows + r * stride + 1;
      const uint8_t* prev = r > 0 ? row - stride : nullptr;
      if (c == 0) {
        filter = row[-1];
        for (int k = 0; k < kChannels; ++k) left[k] = 0;
      }
      bad = filter > 4;
      const uint32_t x0 = c * chunk, x1 = x0 + chunk < width ? x0 + chunk : width;
      uint32_t upleft[kChannels];
      for (int k = 0; k < kChannels; ++k) upleft[k] = prev != nullptr && x0 > 0 ? prev[(x0 - 1) * kChannels + k] : 0;
      for (uint32_t x = x0; x < x1 && !bad; x += 4) {
        // Four pixels' loads first (in place: the compiler may not move them across the stores).
        uint32_t f[4 * kChannels], up[4 * kChannels];
        for (uint32_t q = 0; q < 4; ++q) {
          for (int k = 0; k < kChannels; ++k) {
            const uint64_t i = uint64_t{x + q} * kChannels + k;
            f[q * kChannels + k] = x + q < x1 ? row[i] : 0;
            up[q * kChannels + k] = x + q < x1 && prev != nullptr ? prev[i] : 0;
          }
        }
        for (uint32_t q = 0; q < 4 && x + q < x1; ++q) {
          uint32_t px[kChannels];
          for (int k = 0; k < kChannels; ++k) {
            const uint32_t b = up[q * kChannels + k];
            px[k] = (f[q * kChannels + k] + predict(filter, left[k], b, upleft[k])) & 0xff;
            row[uint64_t{x + q} * kChannels + k] = static_cast<uint8_t>(px[k]);
            left[k] = px[k];
            upleft[k] = b;
          }
          uint8_t* o = out + (uint64_t{r} * width + x + q) * 3;
          o[0] = static_cast<uint8_t>(px[0]);
          o[1] = static_cast<uint8_t>(kChannels >= 3 ? px[1 % kChannels] : px[0]);
          o[2] = static_cast<uint8_t>(kChannels >= 3 ? px[2 % kChannels] : px[0]);
        }
      }
      if (c == chunks - 1) r += threads;
    }
    if (team.sync_or(bad)) return false;
  }
  return true;
}

template <class Team>
MMSERVE_PNG_HD bool unfilter_rows_any(Team& team, uint8_t* rows, uint32_t width, uint32_t height, uint32_t channels,
                                      uint8_t* out) {
  switch (channels) {
    case 1: return unfilter_rows<1>(team, rows, width, height, out);
    case 2: return unfilter_rows<2>(team, rows, width, height, out);
    case 3: return unfilter_rows<3>(team, rows, width, height, out);
    default: return unfilter_rows<4>(team, rows, width, height, out);
  }
}

// The filtered rows' size of a valid image, or 0 (kBadImage): png_inflate_scratch_bytes's rules.
MMSERVE_PNG_INLINE uint64_t filtered_bytes(uint32_t width, uint32_t height, uint32_t channels) {
  if (width == 0 || height == 0 || channels < 1 || channels > 4) return 0;
  const uint64_t bytes = uint64_t{height} * (uint64_t{width} * channels + 1);
  return bytes > kPngInflateFilteredBytesMax ? 0 : bytes;
}

MMSERVE_PNG_INLINE bool inside(uint64_t offset, uint64_t bytes, uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

// An image's filtered bytes, or 0 (kBadImage) for a bad shape or a range outside its buffer.
MMSERVE_PNG_INLINE uint64_t checked_filtered_bytes(const PngInflateImage& image, uint64_t streams_bytes,
                                                   uint64_t scratch_bytes, uint64_t out_bytes) {
  const uint64_t filtered = filtered_bytes(image.width, image.height, image.channels);
  if (filtered == 0 || !inside(image.stream_offset, image.stream_bytes, streams_bytes) ||
      !inside(image.scratch_offset, filtered, scratch_bytes) ||
      !inside(image.out_offset, uint64_t{image.width} * image.height * 3, out_bytes)) {
    return 0;
  }
  return filtered;
}

// ---- One image on one thread (host). ----

// The CPU twin's whole decode of one image: `scratch` holds filtered_bytes(...) bytes.
inline Status decode_image_serial(InflateWorkspace& ws, const uint8_t* zlib, uint64_t zlib_bytes, uint32_t width,
                                  uint32_t height, uint32_t channels, uint8_t* scratch, uint8_t* rgb,
                                  PngHuffmanDecoder decoder = PngHuffmanDecoder::kSerial) {
  const uint64_t filtered = filtered_bytes(width, height, channels);
  if (filtered == 0) return Status::kBadImage;
  SerialTeam team;
  const Status inflated = inflate_zlib(team, ws, zlib, zlib_bytes, scratch, static_cast<uint32_t>(filtered), decoder);
  if (inflated != Status::kOk) return inflated;
  return unfilter_rows_any(team, scratch, width, height, channels, rgb) ? Status::kOk : Status::kBadFilter;
}

}  // namespace mmserve::kernels::png_inflate

namespace mmserve::kernels {

// One image, serially (png_inflate.h's contract): `rgb` holds width * height * 3 bytes. Header-only so that code
// which does not link mmserve_kernels (the image frontend's tests, the PNG fuzz target) runs the same decoder.
// `decoder` kSpeculative runs the warp's algorithm on this thread (the tests' check of it).
inline PngInflateStatus inflate_png_image(std::span<const uint8_t> zlib, uint32_t width, uint32_t height,
                                          uint32_t channels, uint8_t* rgb,
                                          PngHuffmanDecoder decoder = PngHuffmanDecoder::kSerial) {
  const uint64_t filtered = png_inflate::filtered_bytes(width, height, channels);
  if (filtered == 0) return PngInflateStatus::kBadImage;
  std::vector<uint8_t> scratch(filtered);
  auto ws = std::make_unique<png_inflate::InflateWorkspace>();
  return png_inflate::decode_image_serial(*ws, zlib.data(), zlib.size(), width, height, channels, scratch.data(), rgb,
                                          decoder);
}

}  // namespace mmserve::kernels
