// lora_apply_cuda against lora_bgmv on the same dtype-rounded inputs: 4 slots of ranks 1, 16, 0 (an adapter that
// leaves this linear alone) and 7 in storage of r_max 16 (ranks mixed, nothing read past a slot's rank), rows without
// an adapter, odd output widths, y strided and accumulated onto (f32 and the input dtype), f32 / bf16 / f16 inputs;
// and broken arguments refused before launching. Skipped, with the reason, where no GPU is visible.
#include "kernels/lora/lora_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/lora/lora.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

TEST(LoraCudaTest, GatheredDeltasEqualTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  const int64_t slots = 4, r_max = 16, in = 136, out = 45, rows = 9, x_ld = 144, y_ld = 51;
  const std::vector<int64_t> ranks = {1, 16, 0, 7};
  const std::vector<float> scales = {2.0f, 0.25f, 1.0f, -1.5f};
  const std::vector<int32_t> row_slot = {1, -1, 0, 3, 3, 2, -1, 1, 0};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType y_dtype : {DType::kF32, dtype}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " -> " + dtype_name(y_dtype));
      // Storage: every slot's A [r_max, in] and B [out, r_max]; garbage past each slot's rank must not be read.
      std::vector<float> a = cuda_test::round_through(random_floats(static_cast<size_t>(slots * r_max * in), 1, -1, 1), dtype);
      std::vector<float> b = cuda_test::round_through(random_floats(static_cast<size_t>(slots * out * r_max), 2, -1, 1), dtype);
      const std::vector<float> x = cuda_test::round_through(random_floats(static_cast<size_t>(rows * x_ld), 3, -1, 1), dtype);
      const std::vector<float> y0 = cuda_test::round_through(random_floats(static_cast<size_t>(rows * y_ld), 4, -1, 1), y_dtype);
      // The twin's weights: each slot's first `rank` rows of A and columns of B, packed.
      std::vector<std::vector<float>> ta(slots), tb(slots);
      std::vector<LoraSegmentWeights> w(slots);
      for (int64_t s = 0; s < slots; ++s) {
        for (int64_t j = 0; j < ranks[s]; ++j) {
          ta[s].insert(ta[s].end(), a.begin() + (s * r_max + j) * in, a.begin() + (s * r_max + j + 1) * in);
        }
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t j = 0; j < ranks[s]; ++j) tb[s].push_back(b[s * out * r_max + o * r_max + j]);
        }
        w[s] = {ta[s].data(), tb[s].data(), ranks[s], scales[s]};
      }
      std::vector<float> want = y0;
      lora_bgmv(x.data(), x_ld, rows, row_slot.data(), w.data(), in, out, want.data(), y_ld);
      std::vector<int32_t> rank_i(ranks.begin(), ranks.end());
      DeviceVector<uint8_t> d_a(cuda_test::encode(a, dtype)), d_b(cuda_test::encode(b, dtype)),
          d_x(cuda_test::encode(x, dtype)), d_y(cuda_test::encode(y0, y_dtype));
      DeviceVector<int32_t> d_slot(row_slot), d_rank(rank_i);
      DeviceVector<float> d_scale(scales), d_t(static_cast<size_t>(rows * r_max));
      LoraCudaArgs p;
      p.x = d_x.get(), p.x_ld = x_ld, p.rows = rows, p.in = in, p.dtype = dtype, p.row_slot = d_slot.get();
      p.a = d_a.get(), p.a_slot_stride = r_max * in, p.b = d_b.get(), p.b_slot_stride = out * r_max;
      p.ranks = d_rank.get(), p.scales = d_scale.get(), p.param_stride = 1, p.r_max = r_max, p.out = out;
      p.t = d_t.get(), p.y = d_y.get(), p.y_dtype = y_dtype, p.y_ld = y_ld;
      ASSERT_TRUE(lora_apply_cuda(p, nullptr).ok());
      const std::vector<float> got = cuda_test::decode(d_y.download(), y_dtype);
      const float rel = y_dtype == DType::kF32 ? 1e-5f : y_dtype == DType::kBF16 ? 1.0f / 128 : 1.0f / 1024;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < y_ld; ++o) {
          const size_t i = static_cast<size_t>(r * y_ld + o);
          if (o >= out || row_slot[r] < 0 || ranks[row_slot[r]] == 0) {
            EXPECT_EQ(got[i], y0[i]) << "untouched " << r << " " << o;
          } else {
            EXPECT_NEAR(got[i], want[i], rel * std::max(1.0f, std::fabs(want[i])) * 4) << r << " " << o;
          }
        }
      }
    }
  }
  LoraCudaArgs broken;
  broken.rows = 2, broken.in = 12, broken.out = 4, broken.r_max = 4, broken.dtype = DType::kBF16;  // in % 8
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken.in = 16, broken.r_max = 300;
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::kernels
