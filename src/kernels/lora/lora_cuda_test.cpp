// lora_apply_cuda against lora_bgmv (once per target) on the same dtype-rounded inputs: 4 slots of ranks 1, 16, 0 (an
// adapter that leaves this linear alone) and 7 in storage of r_max 16 (ranks mixed, nothing read past a slot's rank:
// the storage past it holds NaN), rows without an adapter, odd output widths, one to three targets writing the
// slices of one fused row, y strided and accumulated onto (f32 and the input dtype), f32 / bf16 / f16 inputs, `in`
// over one and several 512-wide chunks (the last partial); the gathered path (<= 64 rows) and the segmented one
// (runs of rows under one slot, broken by others); and broken arguments refused before launching. Skipped, with the
// reason, where no GPU is visible.
#include "kernels/lora/lora_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <limits>
#include <vector>

#include "kernels/lora/lora.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

constexpr int64_t kSlots = 4, kRMax = 16;

struct Case {
  std::vector<int32_t> row_slot;
  int64_t in = 0, x_ld = 0;
  std::vector<int64_t> outs;                // one per target
  std::vector<std::vector<int64_t>> ranks;  // [target][slot]
};

void check(const Case& c, DType dtype, DType y_dtype) {
  const int64_t rows = static_cast<int64_t>(c.row_slot.size()), targets = static_cast<int64_t>(c.outs.size());
  int64_t width = 0;
  for (int64_t o : c.outs) width += o;
  const int64_t y_ld = width + 5;
  const std::vector<float> x =
      cuda_test::round_through(random_floats(static_cast<size_t>(rows * c.x_ld), 3, -1, 1), dtype);
  const std::vector<float> y0 =
      cuda_test::round_through(random_floats(static_cast<size_t>(rows * y_ld), 4, -1, 1), y_dtype);
  std::vector<float> want = y0;
  std::deque<DeviceVector<uint8_t>> d_a, d_b;  // DeviceVector does not move
  std::deque<DeviceVector<int32_t>> d_rank;
  std::deque<DeviceVector<float>> d_scale;
  const std::vector<float> scales = {2.0f, 0.25f, 1.0f, -1.5f};
  int64_t column = 0;
  for (int64_t t = 0; t < targets; ++t) {
    const int64_t out = c.outs[t];
    // Storage: every slot's A [r_max, in] and B [out, r_max]; past each slot's rank NaN, which must not be read.
    std::vector<float> a =
        cuda_test::round_through(random_floats(static_cast<size_t>(kSlots * kRMax * c.in), 10 + t, -1, 1), dtype);
    std::vector<float> b =
        cuda_test::round_through(random_floats(static_cast<size_t>(kSlots * out * kRMax), 20 + t, -1, 1), dtype);
    std::vector<std::vector<float>> ta(kSlots), tb(kSlots);
    std::vector<LoraSegmentWeights> w(kSlots);
    for (int64_t s = 0; s < kSlots; ++s) {
      const int64_t rank = c.ranks[t][s];
      for (int64_t j = 0; j < kRMax; ++j) {
        float* row = a.data() + (s * kRMax + j) * c.in;
        if (j < rank) {
          ta[s].insert(ta[s].end(), row, row + c.in);
        } else {
          std::fill(row, row + c.in, std::numeric_limits<float>::quiet_NaN());
        }
      }
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t j = 0; j < kRMax; ++j) {
          float& v = b[s * out * kRMax + o * kRMax + j];
          if (j < rank) {
            tb[s].push_back(v);
          } else {
            v = std::numeric_limits<float>::quiet_NaN();
          }
        }
      }
      w[s] = {ta[s].data(), tb[s].data(), rank, scales[s]};
    }
    lora_bgmv(x.data(), c.x_ld, rows, c.row_slot.data(), w.data(), c.in, out, want.data() + column, y_ld);
    d_a.emplace_back(cuda_test::encode(a, dtype));
    d_b.emplace_back(cuda_test::encode(b, dtype));
    d_rank.emplace_back(std::vector<int32_t>(c.ranks[t].begin(), c.ranks[t].end()));
    d_scale.emplace_back(scales);
    column += out;
  }
  DeviceVector<uint8_t> d_x(cuda_test::encode(x, dtype)), d_y(cuda_test::encode(y0, y_dtype));
  DeviceVector<int32_t> d_slot(c.row_slot);
  const int64_t ws = lora_cuda_workspace_floats(rows, c.in, kRMax, static_cast<int>(targets));
  DeviceVector<float> d_ws(static_cast<size_t>(ws));
  LoraCudaArgs p;
  p.x = d_x.get(), p.x_ld = c.x_ld, p.rows = rows, p.in = c.in, p.dtype = dtype, p.row_slot = d_slot.get();
  p.param_stride = 1, p.r_max = kRMax, p.num_targets = static_cast<int>(targets);
  column = 0;
  for (int64_t t = 0; t < targets; ++t) {
    LoraCudaTarget& g = p.target[t];
    g.a = d_a[t].get(), g.a_slot_stride = kRMax * c.in, g.b = d_b[t].get(), g.b_slot_stride = c.outs[t] * kRMax;
    g.ranks = d_rank[t].get(), g.scales = d_scale[t].get(), g.out = c.outs[t];
    g.y = d_y.get() + column * dtype_size(y_dtype);
    column += c.outs[t];
  }
  p.y_dtype = y_dtype, p.y_ld = y_ld, p.workspace = d_ws.get(), p.workspace_floats = ws;
  ASSERT_TRUE(lora_apply_cuda(p, nullptr).ok());
  const std::vector<float> got = cuda_test::decode(d_y.download(), y_dtype);
  const float rel = y_dtype == DType::kF32 ? 1e-5f : y_dtype == DType::kBF16 ? 1.0f / 128 : 1.0f / 1024;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t target = 0, first = 0;
    for (int64_t o = 0; o < y_ld; ++o) {
      while (target < targets && o >= first + c.outs[target]) first += c.outs[target++];
      const size_t i = static_cast<size_t>(r * y_ld + o);
      const int32_t slot = c.row_slot[static_cast<size_t>(r)];
      if (target == targets || slot < 0 || c.ranks[target][slot] == 0) {
        ASSERT_EQ(got[i], y0[i]) << "untouched row " << r << " column " << o;
      } else {
        ASSERT_NEAR(got[i], want[i], rel * std::max(1.0f, std::fabs(want[i])) * 4) << "row " << r << " column " << o;
      }
    }
  }
}

void check_every_dtype(const Case& c) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType y_dtype : {DType::kF32, dtype}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " -> " + dtype_name(y_dtype));
      check(c, dtype, y_dtype);
    }
  }
}

TEST(LoraCudaTest, GatheredDeltasEqualTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  check_every_dtype({{1, -1, 0, 3, 3, 2, -1, 1, 0}, 136, 144, {45}, {{1, 16, 0, 7}}});
}

TEST(LoraCudaTest, ThreeTargetsIntoOneFusedRow) {
  MMSERVE_REQUIRE_GPU();
  // q | k | v of unequal widths, in over three chunks (the last partial); target 1 leaves slot 3 alone.
  const Case c = {
      {1, -1, 0, 3, 3, 2, -1, 1, 0, 2, 1}, 1064, 1072, {40, 24, 17}, {{1, 16, 0, 7}, {16, 3, 0, 0}, {8, 9, 0, 2}}};
  check_every_dtype(c);
}

TEST(LoraCudaTest, SegmentedRowsEqualTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  // 77 rows (> 64: 8-row tiles): runs under one slot across tile borders, broken by other slots and by none.
  std::vector<int32_t> row_slot;
  for (int i = 0; i < 30; ++i) row_slot.push_back(1);
  for (int i = 0; i < 5; ++i) row_slot.push_back(-1);
  for (int i = 0; i < 20; ++i) row_slot.push_back(i % 3 == 0 ? 3 : 0);
  for (int i = 0; i < 22; ++i) row_slot.push_back(2 - (i % 2) * 3);  // 2, -1, 2, -1, ...
  check_every_dtype({row_slot, 520, 520, {33, 64}, {{1, 16, 0, 7}, {5, 12, 4, 16}}});
}

TEST(LoraCudaTest, BrokenArgumentsAreRefused) {
  MMSERVE_REQUIRE_GPU();
  DeviceVector<float> ws(64);
  DeviceVector<int32_t> ranks(std::vector<int32_t>{1}), row_slot(std::vector<int32_t>{0, -1});
  DeviceVector<float> scales(std::vector<float>{1.0f}), y(64), w(4096);
  LoraCudaArgs p;
  p.rows = 2, p.in = 16, p.r_max = 8, p.dtype = DType::kF32, p.x = w.get(), p.x_ld = 16, p.workspace = ws.get();
  p.workspace_floats = 64, p.y_ld = 8, p.row_slot = row_slot.get();
  p.target[0] = {w.get(), 128, w.get(), 64, ranks.get(), scales.get(), 8, y.get()};
  EXPECT_TRUE(lora_apply_cuda(p, nullptr).ok());
  LoraCudaArgs broken = p;
  broken.dtype = DType::kBF16, broken.in = 12;  // 16-bit in % 8
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken = p, broken.r_max = 300;
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken = p, broken.r_max = 12;  // not a multiple of 8
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken = p, broken.num_targets = 4;
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken = p, broken.target[0].out = 0;
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
  broken = p, broken.workspace_floats = 1;  // the shrink's partials would not fit
  EXPECT_EQ(lora_apply_cuda(broken, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::kernels
