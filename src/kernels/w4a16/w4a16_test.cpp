// W4A16 on the host (w4a16.h): the packing read back equals, bit for bit, the weight computed from the logical form
// (every shape, group size 32 / 64 / 128 / -1, with and without act-order, bf16 and f16); the CPU twin's GEMM
// against a double-precision loop over the logical form at M = 1, 3, 17, 64, 100 (the flash-attention rule against a
// naive f32 loop); and every shape and value the kernels cannot take refused with a message.
#include "kernels/w4a16/w4a16.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/testing/kernel_test_util.h"
#include "kernels/w4a16/w4a16_layout.h"
#include "kernels/w4a16/w4a16_test_util.h"

namespace mmserve::kernels {
namespace {

using w4a16_test::LogicalWeight;
using w4a16_test::random_weight;
using w4a16_test::reference_weight;

struct Shape {
  int64_t n, k;
};
// The smallest the layout takes, a partial 256-column chunk (192, 320, 640), several row tiles that are not a
// multiple of the kernel's 64-row CTA, and two far from square.
const Shape kShapes[] = {{16, 64}, {48, 192}, {80, 320}, {272, 640}, {32, 1024}, {1040, 128}};
const int64_t kGroupSizes[] = {32, 64, 128, -1};

std::string name(const Shape& s, int64_t gs, bool act, DType dtype) {
  return "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " group_size=" + std::to_string(gs) +
         (act ? " act-order " : " ") + dtype_name(dtype);
}

TEST(W4A16, PackedWeightReadsBackAsTheLogicalOne) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    for (int64_t gs : kGroupSizes) {
      if (gs != -1 && s.k % gs != 0) continue;  // refused: W4A16.ShapesTheKernelCannotTakeAreRefused
      for (bool act : {false, true}) {
        for (DType dtype : {DType::kBF16, DType::kF16}) {
          SCOPED_TRACE(name(s, gs, act, dtype));
          const LogicalWeight w = random_weight(s.n, s.k, gs, act, seed++);
          auto packed = w4a16_pack(w.view(), dtype);
          ASSERT_TRUE(packed.ok()) << packed.status().to_string();
          // One group: sorting by group is the identity, so no permutation is kept.
          const bool permuted = act && w.groups() > 1;
          ASSERT_EQ(packed->perm.empty(), !permuted);
          const std::vector<float> want = reference_weight(w, dtype), got = w4a16_dequantize_cpu(*packed);
          ASSERT_EQ(got.size(), want.size());
          int64_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            if (got[i] != want[i] && bad++ < 5) {
              ADD_FAILURE() << "W[" << i / s.k << "][" << i % s.k << "] = " << got[i] << ", want " << want[i];
            }
          }
          EXPECT_EQ(bad, 0) << "weights read back wrong";
          // The packed order is the logical one permuted by perm.
          const std::vector<float> in_packed_order = w4a16_dequantize_cpu(*packed, true);
          for (int64_t r = 0; r < s.n && permuted; ++r) {
            for (int64_t j = 0; j < s.k; ++j) {
              ASSERT_EQ(in_packed_order[r * s.k + j], want[r * s.k + packed->perm[j]]) << r << " " << j;
            }
          }
          if (permuted) {  // groups contiguous in packed order
            for (int64_t j = 0; j < s.k; ++j) ASSERT_EQ(w.group_of(packed->perm[j]), j / w.gs()) << j;
          }
        }
      }
    }
  }
}

TEST(W4A16, SortedGIdxNeedsNoPermutation) {
  LogicalWeight w = random_weight(16, 128, 32, false, 5);
  w.g_idx.resize(128);
  for (int c = 0; c < 128; ++c) w.g_idx[c] = c / 32;
  auto packed = w4a16_pack(w.view(), DType::kBF16);
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  EXPECT_TRUE(packed->perm.empty());
}

TEST(W4A16, CpuGemmMatchesTheLogicalWeight) {
  uint32_t seed = 100;
  const Shape shapes[] = {{16, 64}, {48, 192}, {272, 640}, {32, 1024}};
  for (const Shape& s : shapes) {
    for (int64_t gs : kGroupSizes) {
      if (gs != -1 && s.k % gs != 0) continue;
      for (bool act : {false, true}) {
        for (DType dtype : {DType::kBF16, DType::kF16}) {
          const LogicalWeight w = random_weight(s.n, s.k, gs, act, seed++);
          auto packed = w4a16_pack(w.view(), dtype);
          ASSERT_TRUE(packed.ok()) << packed.status().to_string();
          for (int64_t m : {1, 3, 17, 64, 100}) {
            SCOPED_TRACE(name(s, gs, act, dtype) + " m=" + std::to_string(m));
            const std::vector<float> x = test_util::random_floats(static_cast<size_t>(m * s.k), seed++, -1, 1);
            std::vector<float> got(static_cast<size_t>(m * s.n)), naive(got.size());
            std::vector<double> ref(got.size());
            w4a16_gemm_cpu(x.data(), m, *packed, got.data());
            // y = sum over groups of round_dtype(scale) * sum over the group's columns of (q - zero) * x, from the
            // logical form: in double (the reference) and in f32 (the naive error it is measured against).
            for (int64_t r = 0; r < m; ++r) {
              for (int64_t o = 0; o < s.n; ++o) {
                std::vector<double> sums(static_cast<size_t>(w.groups()), 0.0);
                std::vector<float> sums32(sums.size(), 0.0f);
                for (int64_t c = 0; c < s.k; ++c) {
                  const size_t gi = static_cast<size_t>(w.group_of(c));
                  const float qz = static_cast<float>(w.q[static_cast<size_t>(o * s.k + c)]) -
                                   static_cast<float>(w.zeros[static_cast<size_t>(o * w.groups()) + gi]);
                  sums[gi] += static_cast<double>(x[r * s.k + c]) * qz;
                  sums32[gi] += x[r * s.k + c] * qz;
                }
                double acc = 0;
                float acc32 = 0;
                for (size_t g = 0; g < sums.size(); ++g) {
                  const float scale = w4a16_test::round_to(w.scales[static_cast<size_t>(o * w.groups()) + g], dtype);
                  acc += scale * sums[g], acc32 += scale * sums32[g];
                }
                ref[r * s.n + o] = acc, naive[r * s.n + o] = acc32;
              }
            }
            test_util::expect_within_naive_error(got, naive, ref, 1e-6 * test_util::max_abs(ref), "w4a16_gemm_cpu");
          }
        }
      }
    }
  }
}

// The mma kernel finds a tile's group with a multiply instead of a division (w4a16_layout.h: group_of): exact for
// every column below the limit and every group size the check takes (checked exhaustively over the columns for
// the sizes a checkpoint meets and a spread of others, the whole-row groups of Llama / Mixtral widths included).
TEST(W4A16, GroupIndexWithoutADivisionIsExact) {
  std::vector<int64_t> sizes = {32, 64, 96, 128, 160, 192, 256, 4096, 11008, 14336, 28672};
  for (int64_t d = 2; d <= 2048; d = d * 3 / 2 + 1) sizes.push_back(32 * d);
  sizes.push_back(w4a16_layout::kMaxGroupedCols - 32);
  for (int64_t gs : sizes) {
    const uint32_t magic = w4a16_layout::group_magic(gs);
    int64_t bad = 0;
    for (int64_t col = 0; col < w4a16_layout::kMaxGroupedCols; col += 16) {  // the kernel asks at multiples of 32
      if (w4a16_layout::group_of(static_cast<uint32_t>(col), magic) != static_cast<uint32_t>(col / gs)) ++bad;
    }
    EXPECT_EQ(bad, 0) << "group size " << gs;
  }
}

TEST(W4A16, ShapesTheKernelCannotTakeAreRefused) {
  const auto refused = [](const LogicalWeight& w, const std::string& why) {
    const Status st = w4a16_check(w.view());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_FALSE(st.message().empty()) << why;
    EXPECT_FALSE(w4a16_pack(w.view(), DType::kBF16).ok()) << why;
  };
  EXPECT_TRUE(w4a16_check(random_weight(16, 64, 32, false, 1).view()).ok());
  EXPECT_TRUE(w4a16_check(random_weight(16, 64, -1, true, 1).view()).ok());
  refused(random_weight(24, 64, 32, false, 1), "n % 16");
  refused(random_weight(16, 96, 32, false, 1), "k % 64");
  refused(random_weight(0, 64, 32, false, 1), "n = 0");
  refused(random_weight(16, 192, 128, false, 1), "group_size does not divide k");
  refused(random_weight(16, 128, 16, false, 1), "group_size below 32");
  refused(random_weight(16, 144 * 2, 48, false, 1), "k % 64 and group_size 48");
  refused(random_weight(16, 128, 0, false, 1), "group_size 0");
  LogicalWeight w = random_weight(16, 128, 32, false, 2);
  w.q[37] = 16;
  refused(w, "q above 15");
  w = random_weight(16, 128, 32, false, 2);
  w.zeros[3] = 128;
  refused(w, "zero above 127");
  w = random_weight(16, 128, 32, false, 2);
  w.scales[5] = std::numeric_limits<float>::infinity();
  refused(w, "scale not finite");
  w = random_weight(16, 128, 32, true, 3);
  w.g_idx[0] = 4;
  refused(w, "g_idx past the groups");
  w = random_weight(16, 128, 32, true, 3);
  for (int c = 0; c < 128; ++c) w.g_idx[c] = c < 40 ? 0 : 1 + (c - 40) * 3 / 88;  // group 0 holds 40 columns
  refused(w, "g_idx groups of unequal sizes");
  w = random_weight(16, 64, 32, false, 2);
  Int4WeightView big = w.view();  // the check reads the shape before the arrays
  big.k = w4a16_layout::kMaxGroupedCols, big.group_size = -1;
  EXPECT_EQ(w4a16_check(big).code(), StatusCode::kInvalidArgument) << "k at the group index's limit";
  Int4WeightView v = w.view();
  v.scales = nullptr;
  EXPECT_EQ(w4a16_check(v).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(w4a16_pack(w.view(), DType::kF32).ok()) << "f32 activations";
}

}  // namespace
}  // namespace mmserve::kernels
