// Tests of layer_norm_cuda() against its CPU twin layer_norm() on the same f32 inputs, for every output
// dtype, over odd shapes (every launch path: warp per row with float4 or scalar packs, block per row, and
// the three-pass fallback past 8192 columns), misaligned pointers and strides (the scalar path), row_index
// gathers, padded rows (padding never written), in-place f32, rows with a large mean, and broken arguments
// (rejected before anything is launched). Skipped, with the reason, where no GPU is visible.
//
// Tolerance, max |gpu - cpu| <= rel(dtype) * max|cpu| + conditioning, where:
//  - rel = 1e-5 for f32: both compute the same two-pass f32 formula, only the summation order (tree vs
//    SIMD lanes) and rsqrtf (<= 2 ulp) differ, a few ulp of the output scale;
//  - rel = 1e-3 for f16 and 1e-2 for bf16: the output is rounded to 16 bits, half an ulp is 2^-11 (f16)
//    and 2^-8 (bf16) of the output scale at most, plus the f32 differences above;
//  - conditioning = 2 sqrt(cols) ulp(f32) * max_row(|mean| * rstd) * max|gamma|: two f32 sums of `cols`
//    terms in different orders differ by ~sqrt(cols) ulp of the sum, so the means differ by that many ulp
//    of |mean|, which (x - mean) * rstd * gamma amplifies. Negligible for centred data; for the rows with
//    |mean| = 1700 std it is ~1e-2 at 768 columns, while a one-pass E[x^2] - E[x]^2 gets such rows wrong
//    by O(1), so the test still tells the two apart.
#include "kernels/layer_norm/layer_norm_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

using cuda_test::DeviceArray;
using cuda_test::kGuard;
using cuda_test::kSentinel;

struct LayerNormCudaCase {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::kBF16;
  int64_t x_pad = 0, y_pad = 0;        // row strides cols + pad
  bool gather = false;                 // rows picked from a larger x through row_index
  bool in_place = false;               // y = x (f32 only)
  bool misaligned = false;             // every pointer one element past 16-byte alignment
  float offset = 0.0f, spread = 1.0f;  // x in offset +- spread
};

std::string describe(const LayerNormCudaCase& c) {
  return std::string(dtype_name(c.dtype)) + " rows=" + std::to_string(c.rows) + " cols=" + std::to_string(c.cols) +
         " x_pad=" + std::to_string(c.x_pad) + " y_pad=" + std::to_string(c.y_pad) + (c.gather ? " gather" : "") +
         (c.in_place ? " in-place" : "") + (c.misaligned ? " misaligned" : "") + " offset=" + std::to_string(c.offset);
}

double rel_tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : dtype == DType::kF16 ? 1e-3 : 1e-2;
}

void check_layer_norm(const LayerNormCudaCase& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const float eps = 1e-5f;
  const int64_t x_rows = c.gather ? 2 * c.rows + 3 : c.rows;
  const int64_t x_ld = c.cols + c.x_pad;
  const int64_t y_ld = c.in_place ? x_ld : c.cols + c.y_pad;
  const int64_t shift = c.misaligned ? 1 : 0;
  std::vector<float> x = random_floats(x_rows * x_ld, seed, -c.spread, c.spread);
  for (float& v : x) v += c.offset;
  const std::vector<float> gamma = random_floats(c.cols, seed + 1, 0.5f, 1.5f);
  const std::vector<float> beta = random_floats(c.cols, seed + 2);
  std::vector<int32_t> row_index;
  for (int64_t i = 0; c.gather && i < c.rows; ++i)
    row_index.push_back(static_cast<int32_t>((x_rows - 1 - 2 * i) % x_rows));

  // The CPU twin on the same rows, gathered into a contiguous matrix; and each row's conditioning.
  std::vector<float> gathered(c.rows * c.cols), want(c.rows * c.cols);
  double mean_times_rstd = 0.0;
  for (int64_t i = 0; i < c.rows; ++i) {
    const int64_t source = c.gather ? row_index[i] : i;
    std::copy_n(x.begin() + source * x_ld, c.cols, gathered.begin() + i * c.cols);
    double mean = 0.0, variance = 0.0;
    for (int64_t j = 0; j < c.cols; ++j) mean += gathered[i * c.cols + j];
    mean /= static_cast<double>(c.cols);
    for (int64_t j = 0; j < c.cols; ++j) variance += std::pow(gathered[i * c.cols + j] - mean, 2);
    variance /= static_cast<double>(c.cols);
    mean_times_rstd = std::max(mean_times_rstd, std::fabs(mean) / std::sqrt(variance + eps));
  }
  {
    const Tensor xt(gathered.data(), DType::kF32, {c.rows, c.cols});
    const Tensor gt(const_cast<float*>(gamma.data()), DType::kF32, {c.cols});
    const Tensor bt(const_cast<float*>(beta.data()), DType::kF32, {c.cols});
    Tensor yt(want.data(), DType::kF32, {c.rows, c.cols});
    layer_norm(xt, gt, bt, eps, yt);
  }

  const DeviceArray dx(x, DType::kF32, shift), dw(gamma, DType::kF32, shift), db(beta, DType::kF32, shift);
  const DeviceArray dy(std::vector<float>(c.in_place ? 0 : c.rows * y_ld, kSentinel), c.dtype, shift);
  const DeviceVector<int32_t> di(row_index);
  ASSERT_TRUE(dx.allocated() && dw.allocated() && db.allocated() && dy.allocated());
  LayerNormCudaArgs args;
  args.x = static_cast<const float*>(dx.data());
  args.x_ld = x_ld;
  args.row_index = c.gather ? di.get() : nullptr;
  args.weight = static_cast<const float*>(dw.data());
  args.bias = static_cast<const float*>(db.data());
  args.eps = eps;
  args.rows = c.rows;
  args.cols = c.cols;
  args.y = c.in_place ? dx.data() : dy.data();
  args.y_dtype = c.dtype;
  args.y_ld = y_ld;
  const Status status = layer_norm_cuda(args, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());

  const std::vector<float> y = c.in_place ? dx.download() : dy.download();
  std::vector<float> got(c.rows * c.cols);
  for (int64_t i = 0; i < c.rows; ++i) {
    std::copy_n(y.begin() + i * y_ld, c.cols, got.begin() + i * c.cols);
    for (int64_t j = c.cols; j < y_ld; ++j) {
      const float expected = c.in_place ? x[i * x_ld + j] : kSentinel;
      ASSERT_EQ(y[i * y_ld + j], expected) << "padding written, row " << i << " col " << j;
    }
  }

  double scale = 0.0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const double gamma_max = *std::max_element(gamma.begin(), gamma.end());
  const double conditioning =
      2.0 * std::sqrt(static_cast<double>(c.cols)) * std::ldexp(1.0, -24) * mean_times_rstd * gamma_max;
  const double tolerance = rel_tolerance(c.dtype) * scale + conditioning;
  double worst = 0.0;
  int64_t worst_at = 0;
  for (int64_t i = 0; i < c.rows * c.cols; ++i) {
    const double error = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(error <= worst)) {  // NaN counts as the worst
      worst = error;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tolerance) << "at row " << worst_at / c.cols << " col " << worst_at % c.cols << ": got "
                              << got[worst_at] << ", cpu " << want[worst_at];
}

TEST(LayerNormCudaTest, OddShapesEveryDtype) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t rows : {1, 3, 17, 129}) {
      for (int64_t cols : {1, 7, 64, 768, 1000, 3072}) check_layer_norm({rows, cols, dtype}, seed += 3);
    }
  }
}

TEST(LayerNormCudaTest, ClipShapesManyRows) {
  MMSERVE_REQUIRE_GPU();
  check_layer_norm({2000, 768, DType::kBF16}, 101);  // ViT-B hidden
  check_layer_norm({1232, 512, DType::kF16}, 102);   // text tower hidden
  check_layer_norm({257, 1024, DType::kF32}, 103);   // ViT-L hidden: the widest warp-path row
}

TEST(LayerNormCudaTest, WideRowsBlockPathAndFallback) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // 1025..8192: block per row (float4 packs when cols % 4 == 0, else scalar); 9000, 12288: the fallback.
    for (int64_t cols : {1025, 1028, 1280, 2052, 4096, 5001, 8192, 9000, 12288}) {
      check_layer_norm({5, cols, dtype}, seed += 3);
    }
  }
}

TEST(LayerNormCudaTest, MisalignedPointersUseScalarPath) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 300;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t cols : {7, 64, 768, 3072, 9000}) {
      LayerNormCudaCase c{17, cols, dtype};
      c.misaligned = true;
      check_layer_norm(c, seed += 3);
    }
  }
}

TEST(LayerNormCudaTest, PaddedAndOddStrides) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 400;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    check_layer_norm({17, 768, dtype, /*x_pad=*/4, /*y_pad=*/8}, seed += 3);   // aligned strides: float4 path
    check_layer_norm({17, 768, dtype, /*x_pad=*/1, /*y_pad=*/0}, seed += 3);   // odd x_ld: scalar path
    check_layer_norm({17, 768, dtype, /*x_pad=*/0, /*y_pad=*/3}, seed += 3);   // odd y_ld: scalar path
    check_layer_norm({3, 3072, dtype, /*x_pad=*/12, /*y_pad=*/4}, seed += 3);  // block path
  }
}

TEST(LayerNormCudaTest, RowIndexGather) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 500;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t cols : {7, 64, 768, 3072, 9000}) {
      LayerNormCudaCase c{17, cols, dtype, /*x_pad=*/4, /*y_pad=*/8};
      c.gather = true;
      check_layer_norm(c, seed += 3);
    }
    LayerNormCudaCase pooled{256, 768, dtype, 0, 0};  // CLIP pooling: one class token per image
    pooled.gather = true;
    check_layer_norm(pooled, seed += 3);
  }
}

TEST(LayerNormCudaTest, InPlaceF32) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 600;
  for (int64_t cols : {1, 7, 768, 1000, 3072, 9000}) {
    for (bool misaligned : {false, true}) {
      LayerNormCudaCase c{17, cols, DType::kF32, /*x_pad=*/4};
      c.in_place = true;
      c.misaligned = misaligned;
      check_layer_norm(c, seed += 3);
    }
  }
}

TEST(LayerNormCudaTest, LargeMeanRowsKeepPrecision) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 700;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t cols : {512, 768, 3072, 9000}) {
      LayerNormCudaCase c{17, cols, dtype};
      c.offset = 1000.0f;
      c.spread = 1.0f;
      check_layer_norm(c, seed += 3);
    }
  }
}

TEST(LayerNormCudaTest, ConstantRowsGiveBetaExactly) {
  MMSERVE_REQUIRE_GPU();
  for (int64_t cols : {7, 768, 3072}) {
    SCOPED_TRACE("cols=" + std::to_string(cols));
    const int64_t rows = 3;
    const std::vector<float> x(rows * cols, 3.25f);  // every partial sum is exact, so mean is exactly 3.25
    const std::vector<float> gamma = random_floats(cols, 801, 0.5f, 1.5f), beta = random_floats(cols, 802);
    const DeviceArray dx(x, DType::kF32, 0), dw(gamma, DType::kF32, 0), db(beta, DType::kF32, 0);
    const DeviceArray dy(std::vector<float>(rows * cols, kSentinel), DType::kF32, 0);
    LayerNormCudaArgs args;
    args.x = static_cast<const float*>(dx.data());
    args.x_ld = cols;
    args.weight = static_cast<const float*>(dw.data());
    args.bias = static_cast<const float*>(db.data());
    args.rows = rows;
    args.cols = cols;
    args.y = dy.data();
    args.y_dtype = DType::kF32;
    args.y_ld = cols;
    const Status status = layer_norm_cuda(args, nullptr);
    ASSERT_TRUE(status.ok()) << status.to_string();
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> y = dy.download();
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(y[i], beta[i % cols]) << "at " << i;
  }
}

TEST(LayerNormCudaTest, NoRowsIsANoOp) {
  MMSERVE_REQUIRE_GPU();
  LayerNormCudaArgs args;  // null pointers: nothing may be touched
  args.cols = 768;
  args.x_ld = args.y_ld = 768;
  const Status status = layer_norm_cuda(args, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(LayerNormCudaTest, BrokenArgumentsAreRejectedWithoutLaunching) {
  MMSERVE_REQUIRE_GPU();
  const int64_t rows = 3, cols = 64;
  const DeviceArray dx(random_floats(rows * cols, 901), DType::kF32, 0);
  const DeviceArray dw(random_floats(cols, 902), DType::kF32, 0), db(random_floats(cols, 903), DType::kF32, 0);
  const DeviceArray dy(std::vector<float>(rows * cols, kSentinel), DType::kBF16, 0);
  LayerNormCudaArgs good;
  good.x = static_cast<const float*>(dx.data());
  good.x_ld = cols;
  good.weight = static_cast<const float*>(dw.data());
  good.bias = static_cast<const float*>(db.data());
  good.rows = rows;
  good.cols = cols;
  good.y = dy.data();
  good.y_dtype = DType::kBF16;
  good.y_ld = cols;

  std::vector<std::pair<std::string, LayerNormCudaArgs>> broken;
  auto add = [&](const std::string& what, auto edit) {
    LayerNormCudaArgs a = good;
    edit(a);
    broken.emplace_back(what, a);
  };
  add("null x", [](LayerNormCudaArgs& a) { a.x = nullptr; });
  add("null weight", [](LayerNormCudaArgs& a) { a.weight = nullptr; });
  add("null bias", [](LayerNormCudaArgs& a) { a.bias = nullptr; });
  add("null y", [](LayerNormCudaArgs& a) { a.y = nullptr; });
  add("i8 output", [](LayerNormCudaArgs& a) { a.y_dtype = DType::kI8; });
  add("f8 output", [](LayerNormCudaArgs& a) { a.y_dtype = DType::kF8E4M3; });
  add("negative rows", [](LayerNormCudaArgs& a) { a.rows = -1; });
  add("zero cols", [](LayerNormCudaArgs& a) { a.cols = 0; });
  add("x_ld < cols", [](LayerNormCudaArgs& a) { a.x_ld = a.cols - 1; });
  add("y_ld < cols", [](LayerNormCudaArgs& a) { a.y_ld = a.cols - 1; });
  add("negative eps", [](LayerNormCudaArgs& a) { a.eps = -1.0f; });
  add("NaN eps", [](LayerNormCudaArgs& a) { a.eps = std::nanf(""); });
  add("x not float-aligned",
      [](LayerNormCudaArgs& a) { a.x = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.x) + 2); });
  add("bf16 y aliasing x", [](LayerNormCudaArgs& a) { a.y = const_cast<float*>(a.x); });
  for (const auto& [what, args] : broken) {
    const Status status = layer_norm_cuda(args, nullptr);
    EXPECT_FALSE(status.ok()) << what;
  }
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  for (float v : dy.download()) ASSERT_EQ(v, kSentinel) << "a rejected call wrote y";
  const Status wrong_dtype = layer_norm_cuda(
      [&] {
        LayerNormCudaArgs a = good;
        a.y_dtype = DType::kI32;
        return a;
      }(),
      nullptr);
  EXPECT_EQ(wrong_dtype.code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace mmserve::kernels
