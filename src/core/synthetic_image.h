// The synthetic picture `mmserve bench` sends (cli/bench_payloads.cpp) and the GPU decode benchmarks decode
// (kernels/png_inflate): RGB8 pixels that are recognisable but not trivially compressible (gradients, a disc,
// stripes, +-12 noise), so a PNG of it is Huffman-coded, nearly all literals, as photographs are. One recipe, so the
// kernel benchmark measures the bytes the server benchmark sends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mmserve {

inline std::vector<uint8_t> synthetic_image_pixels(int width, int height, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-12, 12);
  const double cx = width * (0.3 + 0.4 * (seed % 7) / 7.0), cy = height * 0.5, r = std::min(width, height) * 0.3;
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool disc = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
      const bool stripe = ((x + y + static_cast<int>(seed) * 13) / 16) % 2 == 0;
      int rgb[3] = {255 * x / std::max(1, width - 1), 255 * y / std::max(1, height - 1),
                    static_cast<int>(128 + 100 * ((seed % 3) - 1))};
      if (disc) rgb[(seed + 1) % 3] = 230;
      if (stripe && !disc) rgb[2] = rgb[2] / 2;
      uint8_t* p = &px[(static_cast<size_t>(y) * width + x) * 3];
      for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(std::clamp(rgb[c] + noise(rng), 0, 255));
    }
  }
  return px;
}

}  // namespace mmserve
