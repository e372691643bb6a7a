// Tests of l2_normalize_rows_cuda() against its CPU twin l2_normalize_rows() on the same rows, over odd
// shapes (float4 and scalar paths), misaligned rows, zero rows (must stay zero), rows of 1e-30 and 1e30
// (whose squares under- or overflow in f32), and broken arguments (rejected before any launch). Skipped,
// with the reason, where no GPU is visible.
//
// Tolerance: |gpu - cpu| <= 1e-6 * |cpu| per element. Both sum the squares in double and scale in double
// with one rounding to f32; only the order of the double sum differs (~1e-16 relative), so the outputs
// agree exactly or, where the double product sits on a rounding boundary, by 1 ulp (1.2e-7 relative).
#include "kernels/l2_normalize/l2_normalize_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/l2_normalize/l2_normalize.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

using cuda_test::DeviceArray;
using cuda_test::kSentinel;

// The rows as f32 on the device (sentinel-guarded, see cuda_test::DeviceArray).
class DeviceRows : public DeviceArray {
 public:
  DeviceRows(const std::vector<float>& values, int64_t shift) : DeviceArray(values, DType::kF32, shift) {}
  float* data() const { return static_cast<float*>(DeviceArray::data()); }
};

// Rows cycle through: random in [-1, 1], all zero, scaled by 1e-30, scaled by 1e30.
std::vector<float> test_rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> x = random_floats(rows * cols, seed);
  for (int64_t i = 0; i < rows; ++i) {
    const float scale = i % 4 == 1 ? 0.0f : i % 4 == 2 ? 1e-30f : i % 4 == 3 ? 1e30f : 1.0f;
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] *= scale;
  }
  return x;
}

void check_l2_normalize(int64_t rows, int64_t cols, int64_t shift, uint32_t seed) {
  SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " shift=" + std::to_string(shift));
  const std::vector<float> x = test_rows(rows, cols, seed);
  std::vector<float> want = x;
  Tensor wt(want.data(), DType::kF32, {rows, cols});
  l2_normalize_rows(wt);

  const DeviceRows dx(x, shift);
  ASSERT_TRUE(dx.allocated());
  const Status status = l2_normalize_rows_cuda(dx.data(), rows, cols, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dx.download();
  int64_t failures = 0, first = -1;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (got[i] == want[i]) continue;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= 1e-6 * std::fabs(want[i]))) {  // NaN fails
      if (first < 0) first = i;
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << "first at row " << first / cols << " col " << first % cols << ": got "
                         << (first >= 0 ? got[first] : 0.0f) << ", cpu " << (first >= 0 ? want[first] : 0.0f);
}

TEST(L2NormalizeCudaTest, OddShapes) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 17, 129}) {
    for (int64_t cols : {1, 7, 64, 512, 768, 1000, 3072}) check_l2_normalize(rows, cols, /*shift=*/0, seed += 3);
  }
}

TEST(L2NormalizeCudaTest, MisalignedRowsUseScalarPath) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int64_t cols : {1, 7, 64, 512, 1000}) check_l2_normalize(17, cols, /*shift=*/1, seed += 3);
}

TEST(L2NormalizeCudaTest, ClipPooledShape) {
  MMSERVE_REQUIRE_GPU();
  check_l2_normalize(256, 512, 0, 201);
  check_l2_normalize(256, 768, 0, 202);
}

TEST(L2NormalizeCudaTest, NoRowsIsANoOp) {
  MMSERVE_REQUIRE_GPU();
  const Status status = l2_normalize_rows_cuda(nullptr, 0, 512, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(L2NormalizeCudaTest, BrokenArgumentsAreRejectedWithoutLaunching) {
  MMSERVE_REQUIRE_GPU();
  const std::vector<float> x = random_floats(3 * 64, 301);
  const DeviceRows dx(x, 0);
  EXPECT_FALSE(l2_normalize_rows_cuda(nullptr, 3, 64, nullptr).ok()) << "null x";
  EXPECT_FALSE(l2_normalize_rows_cuda(dx.data(), -1, 64, nullptr).ok()) << "negative rows";
  EXPECT_FALSE(l2_normalize_rows_cuda(dx.data(), 3, 0, nullptr).ok()) << "zero cols";
  float* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(dx.data()) + 2);  // never dereferenced
  EXPECT_FALSE(l2_normalize_rows_cuda(odd, 3, 60, nullptr).ok()) << "misaligned";
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dx.download(), x) << "a rejected call changed x";
}

}  // namespace
}  // namespace mmserve::kernels
