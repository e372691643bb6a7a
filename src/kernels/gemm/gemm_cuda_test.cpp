// cuBLASLt GEMM against the CPU GEMM (its twin), over odd shapes, every dtype pair, bias and beta.
//
// Inputs are rounded through the input dtype before the CPU reference sees them, so the only differences
// are accumulation order (f32 both sides: ~1e-6 relative) and, for 16-bit outputs, the final rounding of D
// (half an ulp: 2^-9 relative for bf16, 2^-12 for f16). Tolerances are set from those, times a safety margin.
#include "kernels/gemm/gemm_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_small_m_cuda.h"
#include "kernels/swiglu/swiglu_cuda.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Case {
  int64_t m, n, k;
  DType in, out;
  bool bias;
  float beta;
  int64_t pad = 0;  // extra elements per row in every leading dimension (strided operands)
};

double tolerance(DType out, int64_t k) {
  const double accumulate = 1e-6 * std::sqrt(static_cast<double>(k)) * 4;
  if (out == DType::kBF16) return 8e-3 + accumulate;
  if (out == DType::kF16) return 1e-3 + accumulate;
  return 2e-5 + accumulate;
}

void run_case(CublasLtGemm& gemm, const Case& c) {
  SCOPED_TRACE(testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k << " " << dtype_name(c.in) << "->"
                                  << dtype_name(c.out) << " bias=" << c.bias << " beta=" << c.beta << " pad=" << c.pad);
  const int64_t lda = c.k + c.pad, ldw = c.k + c.pad, ldd = c.n + c.pad;
  std::vector<float> a = cuda_test::round_through(random_values(c.m * lda, 1), c.in);
  std::vector<float> w = cuda_test::round_through(random_values(c.n * ldw, 2), c.in);
  std::vector<float> d0 = cuda_test::round_through(random_values(c.m * ldd, 3), c.out);
  std::vector<float> bias = cuda_test::round_through(random_values(c.n, 4), c.out);

  // CPU twin: D = A W^T (+ beta D0) (+ bias).
  std::vector<float> want = d0;
  kernels::gemm(false, true, c.m, c.n, c.k, 1.0f, a.data(), lda, w.data(), ldw, c.beta, want.data(), ldd);
  if (c.bias) {
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) want[i * ldd + j] += bias[j];
  }

  DeviceVector<uint8_t> da(cuda_test::encode(a, c.in)), dw(cuda_test::encode(w, c.in));
  DeviceVector<uint8_t> dd(cuda_test::encode(d0, c.out)), db(cuda_test::encode(bias, c.out));
  GemmCudaArgs args;
  args.m = c.m, args.n = c.n, args.k = c.k;
  args.a = da.get(), args.lda = lda, args.w = dw.get(), args.ldw = ldw, args.in_dtype = c.in;
  args.d = dd.get(), args.ldd = ldd, args.out_dtype = c.out;
  args.bias = c.bias ? db.get() : nullptr;
  args.beta = c.beta;
  Status s = gemm.run(args, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got = cuda_test::decode(dd.download(), c.out);

  double max_ref = 1e-3;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i * ldd + j])));
  const double tol = tolerance(c.out, c.k) * max_ref;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      ASSERT_NEAR(got[i * ldd + j], want[i * ldd + j], tol) << "at " << i << "," << j;
    }
    // Padding columns of D are never written.
    for (int64_t j = c.n; j < ldd; ++j) ASSERT_EQ(got[i * ldd + j], d0[i * ldd + j]) << "pad at " << i << "," << j;
  }
}

class GemmCudaTest : public testing::Test {
 protected:
  void SetUp() override {
    MMSERVE_REQUIRE_GPU();
    ASSERT_CUDA_OK(cudaMalloc(&workspace_, CublasLtGemm::kDefaultWorkspaceBytes));
    auto gemm = CublasLtGemm::create(workspace_, CublasLtGemm::kDefaultWorkspaceBytes);
    ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
    gemm_ = std::move(gemm).value();
  }
  void TearDown() override {
    gemm_.reset();
    if (workspace_) cudaFree(workspace_);
  }
  void* workspace_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
};

TEST_F(GemmCudaTest, OddShapesEveryDtype) {
  for (DType in : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType out : {in, DType::kF32}) {
      for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
               {1, 1, 1}, {1, 512, 768}, {3, 5, 7}, {17, 33, 65}, {50, 768, 768}, {129, 2304, 768}, {77, 64, 3072}}) {
        run_case(*gemm_, {m, n, k, in, out, false, 0.0f});
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(GemmCudaTest, BiasAndResidualAccumulate) {
  for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
    run_case(*gemm_, {37, 96, 64, in, in, true, 0.0f});               // qkv / fc1: bias, 16-bit out
    run_case(*gemm_, {37, 96, 64, in, DType::kF32, true, 1.0f});      // out_proj / fc2: x += ... + b
    run_case(*gemm_, {200, 768, 3072, in, DType::kF32, true, 1.0f});  // ViT-B fc2 shape
    run_case(*gemm_, {5, 8, 16, in, DType::kF32, false, 0.5f});       // arbitrary beta
    if (HasFatalFailure()) return;
  }
}

// f32 with M <= 64 and K >= 64 goes through gemm_small_m_cuda: SAM's decoder shapes (8 tokens x 256 x 256,
// 8 x 128 x 256, the IoU head's one row), rows across several 16-row passes, K not a multiple of 4 (the scalar
// loads), padded leading dimensions, bias and beta; M = 65 is the first shape back on cuBLASLt.
TEST_F(GemmCudaTest, SmallMFloat32) {
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {8, 256, 256}, {8, 128, 256}, {1, 256, 256}, {1, 4, 256}, {16, 2048, 256}, {17, 33, 65},
           {33, 9, 130}, {64, 256, 64}, {63, 100, 301}, {65, 256, 256}}) {
    run_case(*gemm_, {m, n, k, DType::kF32, DType::kF32, false, 0.0f});
    run_case(*gemm_, {m, n, k, DType::kF32, DType::kF32, true, 1.0f});
    run_case(*gemm_, {m, n, k, DType::kF32, DType::kF32, true, 0.5f, 3});  // misaligned rows: scalar loads
  }
}

// 16-bit inputs with M = 1 and K, lda a multiple of 8 go through gemm_small_m16_cuda: the decoders' batch-1
// projections (Llama-3-8B's o projection 1 x 4096 x 4096), K below one unrolled sweep (8, 264) and across several,
// N not a multiple of the 8 columns of a CTA, bias (16-bit and f32 out) and beta; M = 2..5 and misaligned rows are
// cuBLASLt's (the same checks hold either way).
TEST_F(GemmCudaTest, SmallM16Bit) {
  for (DType in : {DType::kBF16, DType::kF16}) {
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 4096, 4096}, {1, 33, 8}, {2, 19, 264}, {3, 100, 1032}, {4, 257, 2048}, {5, 64, 512}}) {
      run_case(*gemm_, {m, n, k, in, in, false, 0.0f});
      run_case(*gemm_, {m, n, k, in, in, true, 0.0f});
      run_case(*gemm_, {m, n, k, in, DType::kF32, true, 1.0f});
      run_case(*gemm_, {m, n, k, in, DType::kF32, false, 0.5f, 8});  // padded rows, still 16-byte aligned
      run_case(*gemm_, {m, n, k, in, DType::kF32, true, 1.0f, 3});   // misaligned rows: cuBLASLt
      if (HasFatalFailure()) return;
    }
  }
}

// gemv16_swiglu_cuda (the batch-1 MLP's GEMV and SwiGLU in one launch) equals, bit for bit, the pair it replaces:
// the M = 1 GEMV into a [1, 2 * inter] buffer, then swiglu_cuda; and the CPU twin (linear, then silu(g) * u on the
// rounded g and u) within one 16-bit ulp. inter not a multiple of the CTA's 8 columns, K across unrolled sweeps,
// padded weight rows, with and without bias.
TEST_F(GemmCudaTest, GemvSwigluEqualsGemvThenSwiglu) {
  for (DType in : {DType::kBF16, DType::kF16}) {
    for (auto [inter, k, pad, with_bias] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
             {96, 64, 0, false}, {1001, 264, 8, true}, {1536, 4096, 0, false}, {37, 2056, 0, true}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(in) << " inter=" << inter << " k=" << k << " pad=" << pad);
      const int64_t ldw = k + pad;
      const std::vector<float> a = cuda_test::round_through(random_values(k, 7), in);
      const std::vector<float> w = cuda_test::round_through(random_values(2 * inter * ldw, 8), in);
      const std::vector<float> bias = cuda_test::round_through(random_values(2 * inter, 9), in);
      DeviceVector<uint8_t> da(cuda_test::encode(a, in)), dw(cuda_test::encode(w, in)), db(cuda_test::encode(bias, in));
      DeviceVector<uint8_t> gate_up(static_cast<size_t>(2 * inter * 2)), y_pair(static_cast<size_t>(inter * 2)),
          y_fused(static_cast<size_t>(inter * 2));
      GemmCudaArgs g;
      g.m = 1, g.n = 2 * inter, g.k = k, g.a = da.get(), g.lda = k, g.w = dw.get(), g.ldw = ldw, g.in_dtype = in;
      g.d = gate_up.get(), g.ldd = 2 * inter, g.out_dtype = in, g.bias = with_bias ? db.get() : nullptr;
      ASSERT_TRUE(gemm_->run(g, nullptr).ok());
      SwigluArgs sw;
      sw.gate = gate_up.get(), sw.up = gate_up.get() + inter * 2, sw.in_dtype = in, sw.in_ld = 2 * inter;
      sw.rows = 1, sw.cols = inter, sw.y = y_pair.get(), sw.y_dtype = in, sw.y_ld = inter;
      ASSERT_TRUE(swiglu_cuda(sw, nullptr).ok());
      GemvSwigluArgs f;
      f.a = da.get(), f.w = dw.get(), f.ldw = ldw, f.bias = with_bias ? db.get() : nullptr, f.y = y_fused.get();
      f.inter = inter, f.k = k, f.dtype = in;
      ASSERT_TRUE(gemv16_swiglu_applies(f));
      const Status st = gemv16_swiglu_cuda(f, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<uint8_t> pair = y_pair.download(), fused = y_fused.download();
      ASSERT_EQ(pair, fused);
      // The CPU twin: linear in f32, g and u rounded to the dtype, silu(g) * u.
      std::vector<float> gu(static_cast<size_t>(2 * inter), 0.0f);
      kernels::gemm(false, true, 1, 2 * inter, k, 1.0f, a.data(), k, w.data(), ldw, 0.0f, gu.data(), 2 * inter);
      if (with_bias) {
        for (int64_t j = 0; j < 2 * inter; ++j) gu[j] += bias[j];
      }
      gu = cuda_test::round_through(gu, in);
      const std::vector<float> got = cuda_test::decode(fused, in);
      for (int64_t j = 0; j < inter; ++j) {
        const float gate = gu[j], up = gu[inter + j], want = gate / (1.0f + std::exp(-gate)) * up;
        ASSERT_NEAR(got[j], want, 2e-2 * std::max(1.0f, std::fabs(want))) << "column " << j;
      }
    }
  }
  GemvSwigluArgs bad;
  bad.inter = 4, bad.k = 12;  // K not a multiple of 8 (and null pointers)
  EXPECT_FALSE(gemv16_swiglu_cuda(bad, nullptr).ok());
}

TEST_F(GemmCudaTest, StridedOperands) {
  // Leading dimensions past the logical width (a slice of a fused [rows, 3H] projection, say); the
  // alignment of such rows can be below 16 bytes, which the plan cache must key on.
  for (DType in : {DType::kF32, DType::kBF16}) {
    run_case(*gemm_, {9, 24, 40, in, in, true, 0.0f, 8});
    run_case(*gemm_, {9, 24, 40, in, DType::kF32, true, 1.0f, 3});
    if (HasFatalFailure()) return;
  }
}

TEST_F(GemmCudaTest, SameShapeReusesPlanWithNewPointers) {
  // The plan cache is keyed by shape; a second call with other buffers (and another bias) must use them.
  run_case(*gemm_, {16, 32, 48, DType::kBF16, DType::kBF16, true, 0.0f});
  run_case(*gemm_, {16, 32, 48, DType::kBF16, DType::kBF16, true, 0.0f});
}

TEST_F(GemmCudaTest, BadArgumentsAreStatusNotCrash) {
  GemmCudaArgs args;
  args.m = 4, args.n = 4, args.k = 4;
  EXPECT_EQ(gemm_->run(args, nullptr).code(), StatusCode::kInvalidArgument);  // null pointers
  DeviceVector<float> buf(64);
  args.a = args.w = args.d = buf.get();
  args.lda = args.ldw = args.ldd = 2;  // too small
  EXPECT_EQ(gemm_->run(args, nullptr).code(), StatusCode::kInvalidArgument);
  args.lda = args.ldw = args.ldd = 4;
  args.in_dtype = DType::kI8;
  EXPECT_EQ(gemm_->run(args, nullptr).code(), StatusCode::kUnimplemented);
  args.in_dtype = DType::kBF16;
  args.out_dtype = DType::kF16;
  EXPECT_EQ(gemm_->run(args, nullptr).code(), StatusCode::kUnimplemented);
  args.n = 0;
  EXPECT_EQ(gemm_->run(args, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::kernels
