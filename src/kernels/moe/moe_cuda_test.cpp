// The MoE routing kernels on the GPU against their CPU twins (moe.h) on the same inputs: routing over odd expert
// counts (1, 5, 8, 33, 256) and k with ties and a well-separated router (the same ids; weights within 1e-6), the plan
// bit for bit (offsets, pairs, rows) with empty experts, permute exactly in f32 and bf16, combine with and without
// the residual add (within 1e-6 relative), and broken arguments refused before launching. Skipped, with the reason,
// where no GPU is visible.
#include "kernels/moe/moe_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/moe/moe.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

TEST(MoeCudaTest, RouteAndPlanEqualTheCpuTwins) {
  MMSERVE_REQUIRE_GPU();
  for (int64_t experts : {1, 5, 8, 33, 256}) {
    for (int64_t k : {1, 2, 3}) {
      if (k > experts) continue;
      SCOPED_TRACE(std::to_string(experts) + " experts, top-" + std::to_string(k));
      const int64_t tokens = 37, ld = experts + 2;
      // Logits on a grid of 1/8 plus one exact tie per token: separated enough that expf's ulps cannot reorder.
      std::vector<float> logits = random_floats(static_cast<size_t>(tokens * ld), 11, -4.0f, 4.0f);
      for (float& v : logits) v = std::round(v * 8.0f) / 8.0f + 0.0f;
      for (int64_t t = 0; t < tokens && experts > 2; ++t) logits[t * ld + 2] = logits[t * ld + 1];
      std::vector<int32_t> want_ids(static_cast<size_t>(tokens * k));
      std::vector<float> want_w(want_ids.size());
      moe_route(logits.data(), ld, tokens, experts, k, want_ids.data(), want_w.data());
      DeviceVector<float> d_logits(logits), d_w(want_w.size());
      DeviceVector<int32_t> d_ids(want_ids.size());
      ASSERT_TRUE(moe_route_cuda(d_logits.get(), ld, tokens, experts, k, d_ids.get(), d_w.get(), nullptr).ok());
      const std::vector<int32_t> ids = d_ids.download();
      const std::vector<float> w = d_w.download();
      EXPECT_EQ(ids, want_ids);
      for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], want_w[i], 1e-6) << i;
      // The plan of those ids.
      const MoePlan want = moe_plan(want_ids.data(), tokens, experts, k);
      DeviceVector<int32_t> offsets(static_cast<size_t>(experts + 1)), pair(want_ids.size()), row_of(want_ids.size());
      ASSERT_TRUE(
          moe_plan_cuda(d_ids.get(), tokens, experts, k, offsets.get(), pair.get(), row_of.get(), nullptr).ok());
      EXPECT_EQ(offsets.download(), want.offsets);
      EXPECT_EQ(pair.download(), want.pair);
      EXPECT_EQ(row_of.download(), want.row_of);
    }
  }
}

TEST(MoeCudaTest, PermuteAndCombineEqualTheCpuTwins) {
  MMSERVE_REQUIRE_GPU();
  const int64_t tokens = 19, experts = 7, k = 3, cols = 45, ld = 50;
  std::vector<float> logits = random_floats(static_cast<size_t>(tokens * experts), 5, -3.0f, 3.0f);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  std::vector<float> w(ids.size());
  moe_route(logits.data(), experts, tokens, experts, k, ids.data(), w.data());
  const MoePlan plan = moe_plan(ids.data(), tokens, experts, k);
  DeviceVector<int32_t> d_pair(plan.pair), d_row_of(plan.row_of), d_ids(ids);
  DeviceVector<float> d_w(w);
  // Permute, f32 and bf16 (bit patterns moved as they are).
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::vector<float> x =
        cuda_test::round_through(random_floats(static_cast<size_t>(tokens * ld), 6, -1, 1), dtype);
    std::vector<float> want(static_cast<size_t>(tokens * k * cols));
    moe_permute(x.data(), ld, plan, cols, want.data(), cols);
    const std::vector<uint8_t> bytes = cuda_test::encode(x, dtype);
    DeviceVector<uint8_t> d_x(bytes), d_xp(want.size() * dtype_size(dtype));
    ASSERT_TRUE(
        moe_permute_cuda(d_x.get(), ld, dtype, d_pair.get(), tokens * k, k, cols, d_xp.get(), cols, nullptr).ok());
    EXPECT_EQ(cuda_test::decode(d_xp.download(), dtype), want) << dtype_name(dtype);
  }
  // Combine into a fresh output and onto a residual.
  const std::vector<float> yp = random_floats(static_cast<size_t>(tokens * k * cols), 7, -2, 2);
  const std::vector<float> residual = random_floats(static_cast<size_t>(tokens * ld), 8, -1, 1);
  std::vector<float> sum(static_cast<size_t>(tokens * ld), 0.0f);
  moe_combine(yp.data(), cols, plan, ids.data(), w.data(), cols, sum.data(), ld);
  DeviceVector<float> d_yp(yp);
  for (bool accumulate : {false, true}) {
    DeviceVector<float> d_out(residual);
    ASSERT_TRUE(moe_combine_cuda(d_yp.get(), cols, d_row_of.get(), d_ids.get(), d_w.get(), tokens, k, cols, d_out.get(),
                                 ld, accumulate, nullptr)
                    .ok());
    const std::vector<float> out = d_out.download();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < ld; ++c) {
        const size_t i = static_cast<size_t>(t * ld + c);
        const float want = c >= cols ? residual[i] : accumulate ? residual[i] + sum[i] : sum[i];
        EXPECT_NEAR(out[i], want, 1e-6f * std::max(1.0f, std::fabs(want))) << t << " " << c << " " << accumulate;
      }
    }
  }
}

// The decode path's expert GEMV against moe_gemv on the same 16-bit-rounded inputs: x by token (x_div = k) and by
// pair, odd n, k a multiple of 8 but not of 256, f32 and 16-bit outputs (within 1e-5 relative of the f32 sum, or
// one rounding of the output dtype).
TEST(MoeCudaTest, ExpertGemvEqualsTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  const int64_t experts = 5, n = 37, k = 136, tokens = 3, topk = 2, pairs = tokens * topk;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t x_div : {topk, int64_t{1}}) {
      for (DType out : {DType::kF32, dtype}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " -> " + dtype_name(out) + " x_div " + std::to_string(x_div));
        const int64_t x_rows = x_div == 1 ? pairs : tokens;
        const std::vector<float> x =
            cuda_test::round_through(random_floats(static_cast<size_t>(x_rows * k), 3, -1, 1), dtype);
        const std::vector<float> w =
            cuda_test::round_through(random_floats(static_cast<size_t>(experts * n * k), 4, -1, 1), dtype);
        const std::vector<int32_t> ids = {4, 0, 2, 2, 1, 3};
        std::vector<float> want(static_cast<size_t>(pairs * n));
        moe_gemv(x.data(), k, x_div, w.data(), n * k, ids.data(), pairs, n, k, want.data(), n);
        DeviceVector<uint8_t> d_x(cuda_test::encode(x, dtype)), d_w(cuda_test::encode(w, dtype));
        DeviceVector<int32_t> d_ids(ids);
        DeviceVector<uint8_t> d_y(static_cast<size_t>(pairs * n) * dtype_size(out));
        ASSERT_TRUE(moe_gemv_cuda(d_x.get(), k, x_div, d_w.get(), n * k, dtype, d_ids.get(), pairs, n, k, d_y.get(),
                                  out, n, nullptr)
                        .ok());
        const std::vector<float> y = cuda_test::decode(d_y.download(), out);
        const float rel = out == DType::kF32 ? 1e-5f : out == DType::kBF16 ? 1.0f / 128 : 1.0f / 1024;
        for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], rel * std::max(1.0f, std::fabs(want[i]))) << i;
      }
    }
  }
  EXPECT_EQ(moe_gemv_cuda(nullptr, 8, 1, nullptr, 8, DType::kBF16, nullptr, 65, 8, 8, nullptr, DType::kF32, 8, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

// The grouped expert GEMM against moe_grouped_gemm on the same 16-bit-rounded inputs: an empty expert, a one-row
// expert and experts spanning several tiles of every block_m; odd n (partial n tiles, also for SwiGLU's halves), k a
// multiple of 8 but not of the 64-wide k step; A read in place and gathered (a_rows / a_div); f32 and 16-bit
// outputs; a row bound past the routing's rows (its extra tiles must write nothing); rows outside every expert
// keep their sentinel.
TEST(MoeCudaTest, GroupedGemmEqualsTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  const std::vector<int32_t> offsets = {0, 0, 1, 71, 71, 104, 301};  // 6 experts: 0, 1, 70, 0, 33, 197 rows
  const int64_t experts = 6, rows = offsets.back(), bound = rows + 40, k = 136, a_div = 2;
  const float kSentinel = -7.0f;
  std::vector<int32_t> a_rows(static_cast<size_t>(bound));
  for (int64_t r = 0; r < bound; ++r) a_rows[r] = static_cast<int32_t>((r * 37) % (2 * bound));  // a scatter
  DeviceVector<int32_t> d_offsets(offsets), d_a_rows(a_rows);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool swiglu : {false, true}) {
      const int64_t n = swiglu ? 45 : 131, w_rows = swiglu ? 2 * n : n;
      const std::vector<float> a =
          cuda_test::round_through(random_floats(static_cast<size_t>(bound * k), 21, -1, 1), dtype);
      const std::vector<float> w =
          cuda_test::round_through(random_floats(static_cast<size_t>(experts * w_rows * k), 22, -1, 1), dtype);
      DeviceVector<uint8_t> d_a(cuda_test::encode(a, dtype)), d_w(cuda_test::encode(w, dtype));
      for (bool gather : {false, true}) {
        // The reference: the plain products (gate and up separately for SwiGLU), rounded as the kernel rounds.
        std::vector<float> prod(static_cast<size_t>(bound * w_rows), kSentinel);
        moe_grouped_gemm(a.data(), k, gather ? a_rows.data() : nullptr, a_div, w.data(), w_rows * k, offsets.data(),
                         experts, w_rows, k, false, prod.data(), w_rows);
        for (int64_t block_m : {32, 64, 128}) {
          for (DType out : {DType::kF32, dtype}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " -> " + dtype_name(out) + (swiglu ? " swiglu" : "") +
                         (gather ? " gathered" : "") + " block_m " + std::to_string(block_m));
            DeviceVector<int32_t> tile_map(static_cast<size_t>(2 * moe_grouped_gemm_tiles(bound, experts, block_m)));
            ASSERT_TRUE(moe_tile_map_cuda(d_offsets.get(), bound, experts, block_m, tile_map.get(), nullptr).ok());
            DeviceVector<uint8_t> d_y(
                cuda_test::encode(std::vector<float>(static_cast<size_t>(bound * n), kSentinel), out));
            MoeGroupedGemmArgs g;
            g.a = d_a.get(), g.lda = k, g.a_rows = gather ? d_a_rows.get() : nullptr, g.a_div = a_div;
            g.w = d_w.get(), g.w_stride = w_rows * k, g.dtype = dtype, g.offsets = d_offsets.get();
            g.experts = experts, g.rows = bound, g.n = n, g.k = k, g.swiglu = swiglu;
            g.y = d_y.get(), g.y_dtype = out, g.ldy = n, g.block_m = block_m, g.tile_map = tile_map.get();
            ASSERT_TRUE(moe_grouped_gemm_cuda(g, nullptr).ok());
            const std::vector<float> y = cuda_test::decode(d_y.download(), out);
            const float eps_in = dtype == DType::kBF16 ? 1.0f / 256 : 1.0f / 2048;
            const float eps_out = out == DType::kF32 ? 1e-6f : eps_in;
            int64_t bad = 0;
            for (int64_t r = 0; r < bound; ++r) {
              for (int64_t j = 0; j < n; ++j) {
                const float got = y[r * n + j];
                if (r >= rows) {  // no expert's row
                  bad += got != kSentinel;
                  continue;
                }
                float want, tol;
                if (!swiglu) {
                  want = prod[r * w_rows + j];
                  tol = 4 * eps_out * std::max(1.0f, std::fabs(want)) + 1e-5f * std::sqrt(float(k));
                } else {  // gate and up rounded to the dtype, then silu(gate) * up in f32
                  const float gv = cuda_test::round_through({prod[r * w_rows + j]}, dtype)[0];
                  const float uv = cuda_test::round_through({prod[r * w_rows + n + j]}, dtype)[0];
                  want = gv / (1.0f + std::exp(-gv)) * uv;
                  // one ulp of gate or up may flip with the summation order
                  tol = 2 * eps_out * std::max(1.0f, std::fabs(want)) +
                        eps_in * (1.0f + std::fabs(gv)) * (1.0f + std::fabs(uv));
                }
                if (!(std::fabs(got - want) <= tol)) {
                  if (++bad <= 5) ADD_FAILURE() << "row " << r << " col " << j << ": " << got << " vs " << want;
                }
              }
            }
            EXPECT_EQ(bad, 0);
          }
        }
      }
    }
  }
  MoeGroupedGemmArgs broken;
  broken.n = 8, broken.k = 12, broken.lda = 12, broken.experts = 2, broken.rows = 4;  // k not a multiple of 8
  EXPECT_EQ(moe_grouped_gemm_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken.k = 16, broken.lda = 16, broken.block_m = 48;
  EXPECT_EQ(moe_grouped_gemm_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(moe_tile_map_cuda(nullptr, 4, 300, 64, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(MoeCudaTest, BrokenArgumentsAreRefusedBeforeLaunching) {
  MMSERVE_REQUIRE_GPU();
  EXPECT_EQ(moe_route_cuda(nullptr, 8, 4, 8, 0, nullptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(moe_route_cuda(nullptr, 8, 4, 8, 9, nullptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(moe_route_cuda(nullptr, 300, 4, 300, 2, nullptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(moe_plan_cuda(nullptr, 4, 0, 1, nullptr, nullptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(moe_combine_cuda(nullptr, 1, nullptr, nullptr, nullptr, 4, 65, 1, nullptr, 1, false, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(moe_route_cuda(nullptr, 8, 0, 8, 2, nullptr, nullptr, nullptr).ok());  // no tokens: nothing to do
}

}  // namespace
}  // namespace mmserve::kernels
