// rms_norm against the definition in double, over odd widths, strided rows, in place, and rows of zeros (eps
// keeps them finite: zeros out).
#include "kernels/rms_norm/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(RmsNorm, MatchesDoubleDefinition) {
  for (int64_t cols : {1, 7, 64, 172, 1001}) {
    for (int64_t pad : {0, 5}) {
      const int64_t rows = 9, ld = cols + pad;
      std::vector<float> x = random_floats(static_cast<size_t>(rows * ld), 3, -3.0f, 3.0f);
      for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(4 * ld + c)] = 0.0f;  // a zero row
      const std::vector<float> w = random_floats(static_cast<size_t>(cols), 4, 0.5f, 1.5f);
      std::vector<float> y(static_cast<size_t>(rows * ld), 42.0f);
      rms_norm(x.data(), ld, w.data(), rows, cols, 1e-5f, y.data(), ld);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t c = 0; c < cols; ++c) ss += double{x[r * ld + c]} * x[r * ld + c];
        const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
        for (int64_t c = 0; c < cols; ++c) {
          const double want = w[c] * (x[r * ld + c] * inv);
          EXPECT_NEAR(y[r * ld + c], want, 2e-6 * std::max(1.0, std::fabs(want))) << r << " " << c;
        }
        for (int64_t c = cols; c < ld; ++c) EXPECT_EQ(y[r * ld + c], 42.0f) << "padding written";
      }
      std::vector<float> in_place = x;  // y aliasing x
      rms_norm(in_place.data(), ld, w.data(), rows, cols, 1e-5f, in_place.data(), ld);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(in_place[r * ld + c], y[r * ld + c]);
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
