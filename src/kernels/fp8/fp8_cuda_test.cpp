// The FP8 quantisers against fp8_quantize / fp8_quantize_rows (codes equal bit for bit) over bf16, f16 and f32 inputs,
// odd shapes and strides, values that saturate and values in the subnormals; the scaled FP8 GEMM (CublasLtGemm::run_fp8)
// against fp8_gemm over E4M3 x E4M3 and E4M3 x E5M2, per-tensor and rowwise scales, bias, bf16 / f16 / f32 outputs,
// accumulation onto D (o / down into the residual); and broken arguments refused before launching. Skipped, with the reason, where no GPU is visible.
#include "kernels/fp8/fp8_cuda.h"

#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/fp8/fp8.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;

// Values over many binades (from the subnormals of E4M3 to past its largest value), both signs, zeros.
std::vector<float> spread_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-14.0f, 11.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (i % 13 == 0) ? 0.0f : std::exp2(exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  }
  return v;
}

// fp8_encode against CUDA's own conversion (the host build of cuda_fp8.h: no GPU needed) for both formats, over every
// float whose bits are a multiple of 89 (all exponents and signs, many mantissas) and the neighbourhoods of every code
// and midpoint. (kv_cache_cuda_test.cpp checks E4M3 the same way under the caches' names.)
TEST(Fp8Codes, MatchCudasConversionInBothFormats) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const __nv_fp8_interpretation_t kind = f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 89) {
      float x;
      const uint32_t b32 = static_cast<uint32_t>(bits);
      std::memcpy(&x, &b32, 4);
      if (std::isnan(x)) continue;
      ASSERT_EQ(fp8_encode(x, f), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind)) << fp8_format_name(f) << " x = " << x;
    }
    for (int c = 0; c < 128; ++c) {
      const float lo = fp8_decode(static_cast<uint8_t>(c), f);
      const float hi = fp8_decode(static_cast<uint8_t>(c + 1), f);
      if (!std::isfinite(lo)) continue;
      for (float x : {lo, std::isfinite(hi) ? 0.5f * (lo + hi) : 2 * lo}) {
        for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e30f), -x}) {
          ASSERT_EQ(fp8_encode(y, f), __nv_cvt_float_to_fp8(y, __NV_SATFINITE, kind)) << fp8_format_name(f) << " x = " << y;
        }
      }
    }
    EXPECT_EQ(fp8_encode(INFINITY, f), __nv_cvt_float_to_fp8(INFINITY, __NV_SATFINITE, kind));
  }
}

struct QuantCase {
  int64_t rows, cols, ld_x, ld_q;
};
const QuantCase kQuantCases[] = {{1, 1, 1, 1}, {3, 17, 20, 17}, {37, 300, 300, 304}, {2, 4096, 4100, 4096}};

TEST(Fp8QuantizeCuda, StaticScaleEqualsTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      for (const QuantCase& c : kQuantCases) {
        // Inputs rounded through the dtype, so both sides quantise the same values.
        const std::vector<float> x = cuda_test::round_through(spread_values(c.rows * c.ld_x, 1), dtype);
        const float scale = 0.37f;
        std::vector<uint8_t> want(c.rows * c.ld_q, 0xAA);
        for (int64_t r = 0; r < c.rows; ++r) fp8_quantize(&x[r * c.ld_x], c.cols, scale, format, &want[r * c.ld_q]);
        DeviceVector<uint8_t> dx(cuda_test::encode(x, dtype));
        DeviceVector<uint8_t> dq(std::vector<uint8_t>(c.rows * c.ld_q, 0xAA));
        DeviceVector<float> dscale(std::vector<float>{scale});
        Fp8QuantizeCudaArgs args{dx.get(), dtype, c.rows, c.cols, c.ld_x, format, dq.get(), c.ld_q};
        ASSERT_TRUE(fp8_quantize_cuda(args, dscale.get(), nullptr).ok());
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint8_t> got = dq.download();
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], want[i]) << dtype_name(dtype) << " " << fp8_format_name(format) << " rows " << c.rows
                                     << " cols " << c.cols << " at " << i << " x " << x[(i / c.ld_q) * c.ld_x + i % c.ld_q];
        }
      }
    }
  }
}

TEST(Fp8QuantizeCuda, DynamicPerTokenAndPerTensorScalesEqualTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (const QuantCase& c : kQuantCases) {
      std::vector<float> x = cuda_test::round_through(spread_values(c.rows * c.ld_x, 2), dtype);
      if (c.rows > 1) std::fill(x.begin() + c.ld_x, x.begin() + c.ld_x + c.cols, 0.0f);  // an all-zero row
      DeviceVector<uint8_t> dx(cuda_test::encode(x, dtype));
      // Per token.
      std::vector<uint8_t> want(c.rows * c.ld_q, 0xAA);
      std::vector<float> want_scales(c.rows);
      fp8_quantize_rows(x.data(), c.rows, c.cols, c.ld_x, Fp8Format::kE4M3, want.data(), c.ld_q, want_scales.data());
      DeviceVector<uint8_t> dq(std::vector<uint8_t>(c.rows * c.ld_q, 0xAA));
      DeviceVector<float> dscales(c.rows);
      Fp8QuantizeCudaArgs args{dx.get(), dtype, c.rows, c.cols, c.ld_x, Fp8Format::kE4M3, dq.get(), c.ld_q};
      ASSERT_TRUE(fp8_quantize_rows_cuda(args, dscales.get(), nullptr).ok());
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(dscales.download(), want_scales) << dtype_name(dtype) << " rows " << c.rows;
      EXPECT_EQ(dq.download(), want) << dtype_name(dtype) << " rows " << c.rows;
      // Per tensor.
      float amax = 0.0f;
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t col = 0; col < c.cols; ++col) amax = std::max(amax, std::fabs(x[r * c.ld_x + col]));
      }
      const float scale = fp8_scale_for_amax(amax, Fp8Format::kE4M3);
      std::fill(want.begin(), want.end(), 0xAA);
      for (int64_t r = 0; r < c.rows; ++r) fp8_quantize(&x[r * c.ld_x], c.cols, scale, Fp8Format::kE4M3, &want[r * c.ld_q]);
      DeviceVector<uint8_t> dq2(std::vector<uint8_t>(c.rows * c.ld_q, 0xAA));
      DeviceVector<float> dscale(1);
      DeviceVector<uint32_t> damax(std::vector<uint32_t>{0xFFFFFFFFu});  // garbage: the call zeroes it
      args.q = dq2.get();
      ASSERT_TRUE(fp8_quantize_tensor_cuda(args, dscale.get(), damax.get(), nullptr).ok());
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(dscale.download()[0], scale);
      EXPECT_EQ(dq2.download(), want);
    }
  }
}

TEST(Fp8QuantizeCuda, RefusesBrokenArguments) {
  MMSERVE_REQUIRE_GPU();
  DeviceVector<float> s(1);
  DeviceVector<uint8_t> buf(64);
  Fp8QuantizeCudaArgs args{buf.get(), DType::kBF16, 2, 8, 4 /* < cols */, Fp8Format::kE4M3, buf.get(), 8};
  EXPECT_EQ(fp8_quantize_cuda(args, s.get(), nullptr).code(), StatusCode::kInvalidArgument);
  args.ld_x = 8;
  EXPECT_EQ(fp8_quantize_cuda(args, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  args.dtype = DType::kI32;
  EXPECT_EQ(fp8_quantize_cuda(args, s.get(), nullptr).code(), StatusCode::kUnimplemented);
}

struct GemmCase {
  int64_t m, n, k, lda, ldw, ldd;
};

class Fp8GemmCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!cuda_device_available(&reason)) GTEST_SKIP() << "GPU test skipped: " << reason;
    ASSERT_CUDA_OK(cudaMalloc(&workspace_, CublasLtGemm::kDefaultWorkspaceBytes));
    auto created = CublasLtGemm::create(workspace_, CublasLtGemm::kDefaultWorkspaceBytes);
    ASSERT_TRUE(created.ok()) << created.status().to_string();
    gemm_ = std::move(*created);
  }
  void TearDown() override {
    gemm_.reset();
    if (workspace_) cudaFree(workspace_);
  }

  // A random finite code of `f`, in a moderate range (|value| <= 16) so sums stay far from overflow.
  static uint8_t code(std::mt19937& rng, Fp8Format f) {
    for (;;) {
      const uint8_t c = static_cast<uint8_t>(rng() & 0xFF);
      const float v = fp8_decode(c, f);
      if (std::isfinite(v) && std::fabs(v) <= 16.0f) return c;
    }
  }

  void check(const GemmCase& c, Fp8Format wf, Fp8ScaleMode mode, DType out, bool bias, bool accumulate = false) {
    std::mt19937 rng(static_cast<uint32_t>(c.m * 131 + c.n * 7 + c.k));
    std::vector<uint8_t> a(c.m * c.lda), w(c.n * c.ldw);
    for (auto& v : a) v = code(rng, Fp8Format::kE4M3);
    for (auto& v : w) v = code(rng, wf);
    const bool rows = mode == Fp8ScaleMode::kRowwise;
    std::vector<float> as(rows ? c.m : 1), ws(rows ? c.n : 1), b(c.n);
    for (auto& s : as) s = 0.01f + 0.001f * (rng() % 100);
    for (auto& s : ws) s = 0.002f + 0.0001f * (rng() % 100);
    for (int64_t j = 0; j < c.n; ++j) b[j] = cuda_test::round_through({0.05f * static_cast<float>(j % 9) - 0.2f}, out)[0];
    std::vector<float> want(c.m * c.ldd, 0.0f);
    Fp8GemmCpuArgs ref;
    ref.m = c.m, ref.n = c.n, ref.k = c.k, ref.a = a.data(), ref.lda = c.lda, ref.w = w.data(), ref.ldw = c.ldw;
    ref.w_format = wf, ref.a_scale = as.data(), ref.a_scale_per_row = rows, ref.w_scale = ws.data();
    ref.w_scale_per_row = rows, ref.bias = bias ? b.data() : nullptr, ref.d = want.data(), ref.ldd = c.ldd;
    fp8_gemm(ref);
    // accumulate: D starts as a residual stream and the GEMM adds onto it (cuBLASLt's beta = 1, C = D).
    std::vector<float> d0(c.m * c.ldd, 0.0f);
    if (accumulate) {
      for (size_t i = 0; i < d0.size(); ++i) d0[i] = 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) want[i * c.ldd + j] += d0[i * c.ldd + j];
      }
    }

    DeviceVector<uint8_t> da(a), dw(w);
    DeviceVector<float> das(as), dws(ws);
    DeviceVector<uint8_t> dbias(cuda_test::encode(b, out));
    cuda_test::DeviceArray dd(d0, out, 0);
    Fp8GemmCudaArgs args;
    args.m = c.m, args.n = c.n, args.k = c.k, args.a = da.get(), args.lda = c.lda, args.w = dw.get(), args.ldw = c.ldw;
    args.w_format = wf, args.scale_mode = mode, args.a_scale = das.get(), args.w_scale = dws.get();
    args.d = dd.data(), args.ldd = c.ldd, args.out_dtype = out, args.bias = bias ? dbias.get() : nullptr;
    args.accumulate = accumulate;
    const Status st = gemm_->run_fp8(args, nullptr);
    if (rows && st.code() == StatusCode::kUnimplemented) GTEST_SKIP() << st.message();  // cuBLASLt lacks OUTER_VEC here
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = dd.download();
    // The products are exact (fp8 x fp8 fits in f32), but Hopper's FP8 MMA adds them at reduced precision (~14 bits:
    // errors up to ~1e-4 (2^-13) of the sum of |products| seen on the H100, 2026-12-07; the tolerance allows 2^-11); the
    // output dtype rounds once more.
    const double out_eps = out == DType::kF32 ? 0.0 : (out == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double magnitude = 0;
        for (int64_t t = 0; t < c.k; ++t) {
          magnitude += std::fabs(fp8_decode(a[i * c.lda + t], Fp8Format::kE4M3) * fp8_decode(w[j * c.ldw + t], wf));
        }
        magnitude *= static_cast<double>(as[rows ? i : 0]) * ws[rows ? j : 0];
        const double ref_v = want[i * c.ldd + j];
        const double tol = std::ldexp(1.0, -11) * magnitude + out_eps * std::fabs(ref_v) + 1e-6;
        ASSERT_NEAR(got[i * c.ldd + j], ref_v, tol) << "m " << c.m << " n " << c.n << " k " << c.k << " at " << i
                                                    << "," << j << " " << fp8_format_name(wf) << " "
                                                    << dtype_name(out) << (rows ? " rowwise" : " per-tensor");
      }
    }
  }

  void* workspace_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
};

const GemmCase kGemmCases[] = {{1, 16, 16, 16, 16, 16}, {16, 48, 64, 64, 80, 56}, {33, 272, 208, 224, 208, 272},
                               {128, 64, 512, 512, 512, 64}};

TEST_F(Fp8GemmCuda, PerTensorScalesMatchTheCpuTwin) {
  for (const GemmCase& c : kGemmCases) {
    for (DType out : {DType::kBF16, DType::kF32, DType::kF16}) {
      check(c, Fp8Format::kE4M3, Fp8ScaleMode::kTensor, out, /*bias=*/false);
    }
    check(c, Fp8Format::kE4M3, Fp8ScaleMode::kTensor, DType::kBF16, /*bias=*/true);
    check(c, Fp8Format::kE5M2, Fp8ScaleMode::kTensor, DType::kBF16, /*bias=*/false);
    check(c, Fp8Format::kE4M3, Fp8ScaleMode::kTensor, DType::kF32, /*bias=*/false, /*accumulate=*/true);  // o / down
  }
}

TEST_F(Fp8GemmCuda, RowwiseScalesMatchTheCpuTwin) {
  for (const GemmCase& c : kGemmCases) {
    check(c, Fp8Format::kE4M3, Fp8ScaleMode::kRowwise, DType::kBF16, /*bias=*/false);
    check(c, Fp8Format::kE4M3, Fp8ScaleMode::kRowwise, DType::kBF16, /*bias=*/true);
  }
}

TEST_F(Fp8GemmCuda, RefusesBrokenArguments) {
  DeviceVector<uint8_t> buf(4096);
  DeviceVector<float> s(64);
  Fp8GemmCudaArgs args;
  args.m = 4, args.n = 16, args.k = 24 /* not a multiple of 16 */, args.a = buf.get(), args.lda = 32;
  args.w = buf.get(), args.ldw = 32, args.a_scale = s.get(), args.w_scale = s.get(), args.d = buf.get(), args.ldd = 16;
  EXPECT_EQ(gemm_->run_fp8(args, nullptr).code(), StatusCode::kInvalidArgument);
  args.k = 32, args.lda = 16;  // lda < k
  EXPECT_EQ(gemm_->run_fp8(args, nullptr).code(), StatusCode::kInvalidArgument);
  args.lda = 32, args.w_scale = nullptr;
  EXPECT_EQ(gemm_->run_fp8(args, nullptr).code(), StatusCode::kInvalidArgument);
  args.w_scale = s.get(), args.a_format = Fp8Format::kE5M2, args.w_format = Fp8Format::kE5M2;
  EXPECT_EQ(gemm_->run_fp8(args, nullptr).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace mmserve::kernels
