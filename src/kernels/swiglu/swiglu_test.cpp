// swiglu against silu(g) * u in double over odd widths, a fused [gate | up] layout, in place on gate, and large
// |gate| (sigmoid saturating to 0 and 1 without NaN).
#include "kernels/swiglu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(Swiglu, MatchesFormulaOnFusedLayout) {
  for (int64_t cols : {1, 5, 172, 1000}) {
    const int64_t rows = 6, ld = 2 * cols + 3;  // [gate | up | pad]
    std::vector<float> in = random_floats(static_cast<size_t>(rows * ld), 9, -8.0f, 8.0f);
    in[0] = 100.0f;
    in[1 % cols] = -100.0f;
    std::vector<float> y(static_cast<size_t>(rows * cols), 3.0f);
    swiglu(in.data(), in.data() + cols, ld, rows, cols, y.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double g = in[r * ld + c], u = in[r * ld + cols + c];
        const double want = g / (1.0 + std::exp(-g)) * u;
        EXPECT_NEAR(y[r * cols + c], want, 1e-6 * std::max(1.0, std::fabs(want))) << r << " " << c;
      }
    }
    std::vector<float> in_place = in;  // y over gate's columns
    swiglu(in_place.data(), in_place.data() + cols, ld, rows, cols, in_place.data(), ld);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(in_place[r * ld + c], y[r * cols + c]);
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
