// Tests of swiglu_cuda() against its CPU twin swiglu(const SwigluArgs&) on the same inputs: every (in, out) dtype
// pair, the fused [gate | up] layout at odd and Llama widths (vectorised and scalar packs), separate buffers,
// misaligned pointers, in place on gate, more rows than one grid dimension holds, and broken arguments. Skipped,
// with the reason, where no GPU is visible.
//
// Tolerance per element: |gpu - cpu| <= rel * |cpu| + 1e-7. Both evaluate g / (1 + exp(-g)) * u in f32 from the
// same inputs; expf (CUDA <= 2 ulp, glibc < 1 ulp) and the rounding of 1 + e, the quotient and the product put
// the two a few ulp apart: rel = 1e-5 for f32 y; a 16-bit y can then round one ulp apart (rel = 2^-7 bf16,
// 2^-10 f16).
#include "kernels/swiglu/swiglu_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/swiglu/swiglu.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceArray;
using cuda_test::kSentinel;
using cuda_test::round_through;
using test_util::random_floats;

struct Case {
  int64_t rows = 1, cols = 1;
  DType in = DType::kBF16, out = DType::kBF16;
  bool fused = true, in_place = false, misaligned = false;
  int64_t y_pad = 0;
};

void check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(c.in)) + "->" + dtype_name(c.out) + " rows=" + std::to_string(c.rows) +
               " cols=" + std::to_string(c.cols) + (c.fused ? " fused" : " two buffers") +
               (c.in_place ? " in-place" : "") + (c.misaligned ? " misaligned" : ""));
  const int64_t in_ld = c.fused ? 2 * c.cols : c.cols, y_ld = c.in_place ? in_ld : c.cols + c.y_pad;
  const int64_t shift = c.misaligned ? 1 : 0;
  const std::vector<float> g = round_through(random_floats(c.rows * in_ld, seed, -10.0f, 10.0f), c.in);
  const std::vector<float> u = c.fused ? g : round_through(random_floats(c.rows * in_ld, seed + 1, -3.0f, 3.0f), c.in);

  std::vector<uint8_t> hg = cuda_test::encode(g, c.in), hu = cuda_test::encode(u, c.in);
  std::vector<uint8_t> hy = cuda_test::encode(std::vector<float>(c.rows * y_ld, kSentinel), c.out);
  const size_t in_size = dtype_size(c.in);
  SwigluArgs a;
  a.gate = hg.data();
  a.up = c.fused ? hg.data() + c.cols * in_size : hu.data();
  a.in_dtype = c.in;
  a.in_ld = in_ld;
  a.rows = c.rows;
  a.cols = c.cols;
  a.y = c.in_place ? static_cast<void*>(hg.data()) : hy.data();
  a.y_dtype = c.out;
  a.y_ld = y_ld;
  ASSERT_TRUE(swiglu(a).ok());
  const std::vector<float> want = cuda_test::decode(c.in_place ? hg : hy, c.out);

  const DeviceArray dg(g, c.in, shift), du(u, c.in, shift);
  const DeviceArray dy(std::vector<float>(c.in_place ? 0 : c.rows * y_ld, kSentinel), c.out, shift);
  a.gate = dg.data();
  a.up = c.fused ? static_cast<const uint8_t*>(dg.data()) + c.cols * in_size : du.data();
  a.y = c.in_place ? dg.data() : dy.data();
  const Status status = swiglu_cuda(a, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = c.in_place ? dg.download() : dy.download();
  ASSERT_EQ(got.size(), want.size());
  const double rel = c.out == DType::kF32 ? 1e-5 : c.out == DType::kF16 ? 1.0 / 1024 : 1.0 / 128;
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= rel * std::fabs(want[i]) + 1e-7)) {
      ++bad;
      ADD_FAILURE() << "at " << i / y_ld << "," << i % y_ld << ": gpu " << got[i] << " cpu " << want[i];
    }
  }
}

TEST(SwigluCudaTest, EveryDtypePairOddAndLlamaWidths) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType in : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t cols : {1, 7, 64, 1001, 14336}) check({5, cols, in, out}, seed += 3);
    }
  }
}

TEST(SwigluCudaTest, LayoutsAlignmentAndInPlace) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType d : {DType::kF32, DType::kBF16}) {
    check({9, 1024, d, d, false}, seed += 3);             // two buffers
    check({9, 1024, d, d, true, false, false, 3}, seed += 3);  // odd y stride: scalar
    check({9, 1024, d, d, true, true}, seed += 3);        // in place on gate
    check({9, 1024, d, d, true, false, true}, seed += 3); // misaligned
    check({9, 333, d, d, true, true, true}, seed += 3);
  }
  check({70000, 8, DType::kBF16, DType::kBF16}, seed += 3);  // rows past one grid dimension
}

TEST(SwigluCudaTest, BrokenArgumentsAreRejected) {
  MMSERVE_REQUIRE_GPU();
  SwigluArgs none;
  EXPECT_TRUE(swiglu_cuda(none, nullptr).ok());  // nothing to do
  const DeviceArray d(random_floats(64, 1), DType::kBF16, 0);
  SwigluArgs a;
  a.gate = d.data();
  a.up = static_cast<const char*>(d.data()) + 64;
  a.in_ld = 64;
  a.rows = 1;
  a.cols = 32;
  a.y = const_cast<void*>(a.up);  // aliases up
  a.y_ld = 32;
  EXPECT_FALSE(swiglu_cuda(a, nullptr).ok());
  a.y = static_cast<char*>(d.data()) + 1;  // misaligned
  EXPECT_FALSE(swiglu_cuda(a, nullptr).ok());
}

}  // namespace
}  // namespace mmserve::kernels
