// expand_pixel_levels (CPU) against the definition: each value is its channel's table entry for its level. Shapes
// with 1 and 3 channels, odd planes, n = 0, and every level present.
#include "kernels/pixel_levels/pixel_levels.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace mmserve::kernels {
namespace {

TEST(PixelLevels, EachValueIsItsChannelsTableEntry) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (int64_t channels : {1, 3}) {
    std::vector<float> table(static_cast<size_t>(channels * 256));
    for (float& v : table) v = dist(rng);
    for (int64_t n : {0, 1, 3}) {
      for (int64_t plane : {1, 7, 256, 1001}) {
        std::vector<uint8_t> levels(static_cast<size_t>(n * channels * plane));
        for (size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<uint8_t>(i % 3 == 0 ? i % 256 : rng());
        std::vector<float> out(levels.size(), -99.0f);
        expand_pixel_levels(levels.data(), n, channels, plane, table.data(), out.data());
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = 0; c < channels; ++c) {
            for (int64_t p = 0; p < plane; ++p) {
              const size_t at = static_cast<size_t>((i * channels + c) * plane + p);
              ASSERT_EQ(out[at], table[static_cast<size_t>(c * 256 + levels[at])]) << i << " " << c << " " << p;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
