// Tests of activation_cuda() against its CPU twin activation() on the same inputs (rounded through the
// storage dtype, as the GPU reads them), for every activation and dtype, over odd counts (whole 16-byte
// packs plus a tail), misaligned starts (the scalar path), counts past one grid's worth of threads (the
// grid-stride loop), saturating inputs, kNone (no change), and broken arguments (rejected before any launch).
// Elements before and after the array must stay untouched. Skipped, with the reason, where no GPU is visible.
//
// Tolerance per element: |gpu - cpu| <= rel(dtype) * |cpu| + 1e-5 * max|cpu|.
//  - 1e-5 * max|cpu|: both compute the same f32 formula with different exp/erf/tanh (CUDA's libm, <= 2 ulp;
//    the CPU's Cephes-style polynomials, ~2 ulp); near the zero of 1 + erf or 1 + tanh the cancellation
//    turns those ulps into a larger relative error of a tiny output, but never more than a few ulp of the
//    output scale;
//  - rel = 0 for f32; 2^-11 (f16) and 2^-8 (bf16): the GPU rounds its f32 result to 16 bits, which moves it
//    by at most half an ulp, i.e. that fraction of the value.
#include "kernels/activation/activation_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/activation/activation.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

using cuda_test::DeviceArray;
using cuda_test::kGuard;
using cuda_test::kSentinel;

double rel_tolerance(DType dtype) {
  return dtype == DType::kF32 ? 0.0 : dtype == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

void check_activation(Activation act, DType dtype, int64_t count, int64_t shift, uint32_t seed) {
  SCOPED_TRACE(std::string(activation_name(act)) + " " + dtype_name(dtype) + " count=" + std::to_string(count) +
               " shift=" + std::to_string(shift));
  std::vector<float> values = random_floats(count, seed, -6.0f, 6.0f);
  const float specials[] = {0.0f, -100.0f, 20.0f, -20.0f, 1e-3f, -1e-3f};  // saturation and the origin
  for (size_t i = 0; i < std::size(specials) && i < values.size(); ++i) values[i * 7 % values.size()] = specials[i];
  const std::vector<float> input = cuda_test::round_through(values, dtype);

  std::vector<float> want(input.size());
  if (count > 0) {
    const Tensor xt(const_cast<float*>(input.data()), DType::kF32, {count});
    Tensor yt(want.data(), DType::kF32, {count});
    activation(xt, yt, act);
  }

  const DeviceArray dx(input, dtype, shift);
  ASSERT_TRUE(dx.allocated());
  const Status status = activation_cuda(act, dx.data(), dtype, count, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dx.download();

  double scale = 0.0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const double rel = rel_tolerance(dtype), abs = 1e-5 * scale;
  int64_t failures = 0, first = -1;
  for (int64_t i = 0; i < count; ++i) {
    if (got[i] == want[i]) continue;
    const double error = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(error <= rel * std::fabs(want[i]) + abs)) {  // NaN fails
      if (first < 0) first = i;
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << "first at " << first << ": input " << (first >= 0 ? input[first] : 0.0f) << ", got "
                         << (first >= 0 ? got[first] : 0.0f) << ", cpu " << (first >= 0 ? want[first] : 0.0f);
}

constexpr Activation kActivations[] = {Activation::kQuickGelu, Activation::kGelu, Activation::kGeluTanh};
constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST(ActivationCudaTest, OddCountsEveryActivationAndDtype) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (Activation act : kActivations) {
    for (DType dtype : kDtypes) {
      for (int64_t count : {1, 3, 4, 7, 8, 9, 64, 768, 1000, 3072, 17 * 3072 + 5}) {
        check_activation(act, dtype, count, /*shift=*/0, seed += 3);
      }
    }
  }
}

TEST(ActivationCudaTest, MisalignedStartUsesScalarPath) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (Activation act : kActivations) {
    for (DType dtype : kDtypes) {
      for (int64_t count : {1, 7, 768, 1000, 3 * 3072 + 5}) check_activation(act, dtype, count, /*shift=*/1, seed += 3);
    }
  }
}

TEST(ActivationCudaTest, MoreWorkThanOneGridLoops) {
  MMSERVE_REQUIRE_GPU();
  // The grid is capped at 8192 blocks of 256 threads (2^21 threads): these counts give some threads a
  // second trip round the grid-stride loop, on both paths, and a pack tail after that.
  check_activation(Activation::kQuickGelu, DType::kBF16, (int64_t{1} << 24) + 8 * 3 + 5, 0, 201);
  check_activation(Activation::kGelu, DType::kF32, (int64_t{1} << 23) + 4 * 5 + 3, 0, 202);
  check_activation(Activation::kGeluTanh, DType::kF16, (int64_t{1} << 21) + 77, 1, 203);
}

TEST(ActivationCudaTest, NoneLeavesDataUnchanged) {
  MMSERVE_REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    const std::vector<float> input = cuda_test::round_through(random_floats(1000, 301), dtype);
    const DeviceArray dx(input, dtype, 0);
    const Status status = activation_cuda(Activation::kNone, dx.data(), dtype, 1000, nullptr);
    ASSERT_TRUE(status.ok()) << status.to_string();
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dx.download(), input) << dtype_name(dtype);
  }
}

TEST(ActivationCudaTest, ZeroCountIsANoOp) {
  MMSERVE_REQUIRE_GPU();
  const Status status = activation_cuda(Activation::kGelu, nullptr, DType::kBF16, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(ActivationCudaTest, BrokenArgumentsAreRejectedWithoutLaunching) {
  MMSERVE_REQUIRE_GPU();
  const std::vector<float> input = cuda_test::round_through(random_floats(64, 401), DType::kF16);
  const DeviceArray dx(input, DType::kF16, 0);
  void* x = dx.data();
  void* odd = static_cast<char*>(x) + 1;  // not aligned to a 2-byte element
  EXPECT_FALSE(activation_cuda(Activation::kGelu, nullptr, DType::kF16, 64, nullptr).ok()) << "null x";
  EXPECT_FALSE(activation_cuda(Activation::kGelu, x, DType::kF16, -1, nullptr).ok()) << "negative count";
  EXPECT_FALSE(activation_cuda(Activation::kGelu, odd, DType::kF16, 8, nullptr).ok()) << "misaligned element";
  EXPECT_FALSE(activation_cuda(static_cast<Activation>(42), x, DType::kF16, 64, nullptr).ok()) << "bad activation";
  const Status bad_dtype = activation_cuda(Activation::kGelu, x, DType::kI8, 64, nullptr);
  EXPECT_EQ(bad_dtype.code(), StatusCode::kUnimplemented) << bad_dtype.to_string();
  EXPECT_FALSE(activation_cuda(Activation::kGelu, x, DType::kF8E5M2, 64, nullptr).ok()) << "f8";
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dx.download(), input) << "a rejected call changed x";
}

}  // namespace
}  // namespace mmserve::kernels
