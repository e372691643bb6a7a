// lora_sgmv against the two products written out in double: segments with different adapters and ranks (1, 4, 16),
// one without an adapter and an empty one; rows strided; y accumulated onto, never overwritten.
#include "kernels/lora/lora.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(Lora, SegmentedDeltasAreEachSegmentsAdapter) {
  const int64_t in = 37, out = 29, x_ld = 41, y_ld = 33;
  const std::vector<int32_t> starts = {0, 3, 3, 8, 9, 15};  // 5 segments: 3 rows, empty, 5, 1, 6
  const std::vector<int64_t> ranks = {4, 16, 0, 1, 16};
  const std::vector<float> scales = {2.0f, 0.5f, 1.0f, 3.0f, 0.25f};
  const int64_t rows = starts.back(), segs = 5;
  std::vector<std::vector<float>> a, b;
  std::vector<LoraSegmentWeights> w(static_cast<size_t>(segs));
  for (int64_t s = 0; s < segs; ++s) {
    a.push_back(random_floats(static_cast<size_t>(ranks[s] * in), 10 + s, -1, 1));
    b.push_back(random_floats(static_cast<size_t>(out * ranks[s]), 20 + s, -1, 1));
  }
  for (int64_t s = 0; s < segs; ++s) w[s] = {a[s].data(), b[s].data(), ranks[s], scales[s]};
  const std::vector<float> x = random_floats(static_cast<size_t>(rows * x_ld), 3, -1, 1);
  const std::vector<float> base = random_floats(static_cast<size_t>(rows * y_ld), 4, -1, 1);
  std::vector<float> y = base;
  lora_sgmv(x.data(), x_ld, starts.data(), segs, w.data(), in, out, y.data(), y_ld);
  for (int64_t s = 0; s < segs; ++s) {
    for (int64_t r = starts[s]; r < starts[s + 1]; ++r) {
      for (int64_t o = 0; o < y_ld; ++o) {
        double want = base[r * y_ld + o];
        if (o < out && ranks[s] > 0) {
          double delta = 0;
          for (int64_t j = 0; j < ranks[s]; ++j) {
            double t = 0;
            for (int64_t c = 0; c < in; ++c) t += double{a[s][j * in + c]} * x[r * x_ld + c];
            delta += double{b[s][o * ranks[s] + j]} * t;
          }
          want += delta * scales[s];
        }
        EXPECT_NEAR(y[r * y_ld + o], want, 1e-4 * std::max(1.0, std::fabs(want))) << s << " " << r << " " << o;
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
