// w4a16_gemm_cuda against its CPU twin w4a16_gemm_cpu on the same packed weight and the same dtype-rounded x. The
// tests go from the narrowest to the widest so that a failure says which part is wrong:
//   1. DequantizeKernelIsBitExact: the prefill path's dequantise kernel vs w4a16_dequantize_cpu, bit for bit (the
//      magic-number dequantisation, the scales' and zeros' layout, the nibble positions);
//   2. OneHotRowsReadSingleWeights: x rows that are unit vectors make every output one weight (exact in any
//      precision), so a wrong A / B / C fragment mapping shows as the (row, column) that came out instead;
//   3. GemmMatchesTheCpuTwin: odd shapes (n, k down to 16 x 64, chunks of 256 columns cut short), bf16 and f16,
//      group sizes 32 / 64 / 128 / -1, act-order, m = 1..64 (tensor-core kernel: one split writing y, forced
//      uneven splits, the heuristic's) and m > 64 (dequantise + cuBLASLt), outputs guarded against stray writes and
//      the workspace filled with NaN first past its counters (nothing else may rely on it being zeroed), and the
//      counters checked back at zero after every call (the next call's split-K needs them so);
//   4. the epilogue: y in f32 accumulated onto (the residual stream), a bias; 5. a graph captured once and replayed
//      on new x; 6. refusals.
// Tolerance, per output: eps * |want| + 2^-14 * sum_c |x_c * W_c|: eps = 2^-8 (bf16), 2^-11 (f16), 2^-20 (f32) covers
// the output's rounding to the dtype (the twin's output is f32), and the second term the f32 accumulation in another
// order (tensor cores, split-K partials). The (q - zero), scales and x are the same values on both sides; at m > 64
// the weights are rounded to the dtype (the cuBLASLt path), which adds the dtype's eps * sum_c |x_c * W_c|.
// Skipped, with the reason, where no GPU is visible.
#include "kernels/w4a16/w4a16_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gemm/gemm_cuda.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"
#include "kernels/w4a16/w4a16_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using w4a16_test::LogicalWeight;
using w4a16_test::random_weight;

struct Weight {
  W4A16Packed packed;
  std::unique_ptr<W4A16Buffers> device;
};

Weight make(int64_t n, int64_t k, int64_t gs, bool act, DType dtype, uint32_t seed) {
  const LogicalWeight logical = random_weight(n, k, gs, act, seed);
  auto packed = w4a16_pack(logical.view(), dtype);
  EXPECT_TRUE(packed.ok()) << packed.status().to_string();
  Weight w;
  if (!packed.ok()) return w;
  w.packed = std::move(*packed);
  auto device = w4a16_upload(w.packed);
  EXPECT_TRUE(device.ok()) << device.status().to_string();
  if (device.ok()) w.device = std::move(*device);
  return w;
}

std::string describe(const W4A16Packed& w, int64_t m, int split_k) {
  return std::string(dtype_name(w.dtype)) + " m=" + std::to_string(m) + " n=" + std::to_string(w.n) +
         " k=" + std::to_string(w.k) + " group_size=" + std::to_string(w.group_size) +
         (w.perm.empty() ? "" : " act-order") + " split_k=" + std::to_string(split_k) +
         (m > kW4A16MmaMaxRows ? " (cuBLASLt path)" : " (mma path)");
}

// The epilogue under test: y in f32 (the residual stream), accumulated onto, with a bias.
struct Output {
  bool f32 = false, accumulate = false, bias = false;
};

class W4A16Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!cuda_device_available(&reason)) return;
    ASSERT_CUDA_OK(cudaMalloc(&gemm_workspace_, CublasLtGemm::kDefaultWorkspaceBytes));
    auto created = CublasLtGemm::create(gemm_workspace_, CublasLtGemm::kDefaultWorkspaceBytes);
    ASSERT_TRUE(created.ok()) << created.status().to_string();
    gemm_ = std::move(*created);
  }
  void TearDown() override {
    gemm_.reset();
    if (gemm_workspace_) cudaFree(gemm_workspace_);
  }

  // Runs the GEMM on `x` (already rounded to the dtype) and returns y as f32; y starts as y0 (accumulating) or as
  // sentinels, the workspace NaN-filled past the zeroed counters (w4a16_cuda.h), which must come back zero.
  std::vector<float> run(const Weight& w, const std::vector<float>& x, int64_t m, int split_k, cudaStream_t stream,
                         const Output& o = {}, const std::vector<float>& y0 = {}, const std::vector<float>& bias = {}) {
    const DType dtype = w.packed.dtype, y_dtype = o.f32 ? DType::kF32 : dtype;
    DeviceVector<uint8_t> dx(cuda_test::encode(x, dtype));
    cuda_test::DeviceArray dy(
        o.accumulate ? y0 : std::vector<float>(static_cast<size_t>(m * w.packed.n), cuda_test::kSentinel), y_dtype, 0);
    DeviceVector<uint8_t> dbias(cuda_test::encode(bias, y_dtype));
    const size_t ws_bytes = w4a16_workspace_bytes(m, w.device->view, split_k);
    DeviceVector<uint8_t> ws(ws_bytes + 256);
    const size_t zero_bytes = ws_bytes > 0 ? kW4A16WorkspaceZeroBytes : 0;
    EXPECT_EQ(cudaMemset(ws.get(), 0xff, ws_bytes + 256), cudaSuccess);
    EXPECT_EQ(cudaMemset(ws.get(), 0, zero_bytes), cudaSuccess);
    W4A16Output out;
    out.f32 = o.f32, out.accumulate = o.accumulate, out.bias = o.bias ? dbias.get() : nullptr;
    const Status st = w4a16_gemm_cuda(dx.get(), dtype, m, w.device->view, dy.data(), ws.get(), ws_bytes, gemm_.get(),
                                      stream, out, split_k);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a kernel failed: " << describe(w.packed, m, split_k);
    std::vector<uint8_t> counters(zero_bytes);
    EXPECT_EQ(cudaMemcpy(counters.data(), ws.get(), zero_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::count(counters.begin(), counters.end(), uint8_t{0}), static_cast<std::ptrdiff_t>(zero_bytes))
        << "the split-K counters were not left at zero: " << describe(w.packed, m, split_k);
    return dy.download();
  }

  void check(const Weight& w, int64_t m, int split_k, uint32_t seed, const Output& o = {}) {
    const W4A16Packed& p = w.packed;
    const DType y_dtype = o.f32 ? DType::kF32 : p.dtype;
    const std::string what = describe(p, m, split_k) + (o.f32 ? " y f32" : "") + (o.accumulate ? " accumulate" : "") +
                             (o.bias ? " bias" : "");
    SCOPED_TRACE(what);
    const std::vector<float> x =
        cuda_test::round_through(test_util::random_floats(static_cast<size_t>(m * p.k), seed, -1, 1), p.dtype);
    const std::vector<float> y0 =
        o.accumulate
            ? cuda_test::round_through(test_util::random_floats(static_cast<size_t>(m * p.n), seed + 1, -1, 1), y_dtype)
            : std::vector<float>{};
    const std::vector<float> bias =
        o.bias ? cuda_test::round_through(test_util::random_floats(static_cast<size_t>(p.n), seed + 2, -1, 1), y_dtype)
               : std::vector<float>{};
    std::vector<float> want(static_cast<size_t>(m * p.n));
    w4a16_gemm_cpu(x.data(), m, p, want.data());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < p.n; ++c) {
        if (o.bias) want[r * p.n + c] += bias[c];
        if (o.accumulate) want[r * p.n + c] += y0[r * p.n + c];
      }
    }
    const std::vector<float> weight = w4a16_dequantize_cpu(p);
    const std::vector<float> got = run(w, x, m, split_k, nullptr, o, y0, bias);
    const double eps = y_dtype == DType::kF32 ? 1.0 / (1 << 20) : y_dtype == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
    int64_t bad = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < p.n; ++c) {
        double abs_sum = 0;
        for (int64_t i = 0; i < p.k; ++i) abs_sum += std::fabs(double{x[r * p.k + i]} * weight[c * p.k + i]);
        const double g = got[r * p.n + c], e = want[r * p.n + c];
        double tol = eps * std::fabs(e) + abs_sum / 16384 + 1e-6;
        // m > 64 goes through cuBLASLt on the dequantised weight, each weight rounded to the dtype (the twin and the
        // mma kernel scale each group's f32 sum instead: w4a16.h), up to 2^-8 (bf16) / 2^-11 (f16) of it; and
        // cuBLASLt's split-K algorithms may reduce the partial sums in the output type: with a 16-bit y each
        // reduction rounds once more (seen on the H100: ~2 bf16 ulps on an accumulated y, 2026-12-07).
        if (m > 64) {
          const double weight_eps = p.dtype == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
          tol += weight_eps * abs_sum;
          if (y_dtype != DType::kF32) tol += eps * (abs_sum + (o.accumulate ? std::fabs(y0[r * p.n + c]) : 0.0));
        }
        if (!(std::fabs(g - e) <= tol)) {
          if (bad < 6) {
            ADD_FAILURE() << what << ": y[" << r << "][" << c << "] = " << g << ", twin " << e << ", tolerance " << tol
                          << " (row " << c % 16 << " of its 16-row strip, token " << r % 8 << " of its 8-token tile)";
          }
          ++bad;
        }
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << m * p.n << " outputs wrong";
  }

  void* gemm_workspace_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
};

TEST_F(W4A16Cuda, DequantizeKernelIsBitExact) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t gs : {32, 64, 128, -1}) {
      for (bool act : {false, true}) {
        const Weight w = make(272, 640, gs, act, dtype, seed++);
        ASSERT_TRUE(w.device);
        SCOPED_TRACE(describe(w.packed, 0, 0));
        DeviceVector<uint16_t> out(static_cast<size_t>(272 * 640));
        ASSERT_TRUE(w4a16_dequantize_cuda(w.device->view, out.get(), nullptr).ok());
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint16_t> raw = out.download();
        const std::vector<float> want = w4a16_dequantize_cpu(w.packed, true);
        std::vector<uint8_t> bytes(raw.size() * 2);
        std::memcpy(bytes.data(), raw.data(), bytes.size());
        const std::vector<float> got = cuda_test::decode(bytes, dtype);
        int64_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (got[i] != want[i] && bad++ < 6) {
            ADD_FAILURE() << "W[" << i / 640 << "][" << i % 640 << "] = " << got[i] << ", want " << want[i];
          }
        }
        EXPECT_EQ(bad, 0) << bad << " weights wrong: the dequantisation or the sz layout";
      }
    }
  }
}

TEST_F(W4A16Cuda, OneHotRowsReadSingleWeights) {
  MMSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const Weight w = make(48, 320, 64, false, dtype, 7);
    ASSERT_TRUE(w.device);
    const int64_t m = 17, n = 48, k = 320;
    std::vector<float> x(static_cast<size_t>(m * k), 0.0f);
    std::vector<int64_t> hot(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) hot[r] = (r * 37 + 5) % k, x[r * k + hot[r]] = 1.0f;
    const std::vector<float> weight = w4a16_dequantize_cpu(w.packed);
    for (int split_k : {1, 2}) {
      const std::vector<float> got = run(w, x, m, split_k, nullptr);
      int64_t bad = 0;
      for (int64_t r = 0; r < m && bad < 6; ++r) {
        for (int64_t o = 0; o < n && bad < 6; ++o) {
          const float want = weight[o * k + hot[r]];
          if (got[r * n + o] == want) continue;
          ++bad;
          std::string found = "no weight of that value";
          for (int64_t oo = 0; oo < n; ++oo) {
            for (int64_t c = 0; c < k; ++c) {
              if (weight[oo * k + c] == got[r * n + o]) {
                found = "e.g. W[" + std::to_string(oo) + "][" + std::to_string(c) + "]";
                oo = n;
                break;
              }
            }
          }
          ADD_FAILURE() << dtype_name(dtype) << " split_k=" << split_k << ": y[" << r << "][" << o << "] should be W["
                        << o << "][" << hot[r] << "] = " << want << ", got " << got[r * n + o] << " (" << found << ")";
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST_F(W4A16Cuda, GemmMatchesTheCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  struct Shape {
    int64_t n, k;
  };
  // {64, 768}: with group size 96 and 3 splits, ranges that start inside a group (the per-group scaling's carry).
  const Shape shapes[] = {{16, 64}, {48, 192}, {80, 320}, {272, 640}, {208, 2048}, {1040, 128}, {64, 768}};
  uint32_t seed = 11;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape& s : shapes) {
      for (int64_t gs : {32, 64, 96, 128, -1}) {  // 96: a tile across two groups
        if (gs != -1 && s.k % gs != 0) continue;
        for (bool act : {false, true}) {
          const Weight w = make(s.n, s.k, gs, act, dtype, seed++);
          ASSERT_TRUE(w.device);
          for (int64_t m : {1, 2, 3, 8, 9, 17, 33, 64}) {
            for (int split_k : {0, 1, 3}) check(w, m, split_k, seed++);
          }
          for (int64_t m : {65, 100}) check(w, m, 0, seed++);
          if (HasFailure()) return;  // the first failing configuration says the most
        }
      }
    }
  }
}

TEST_F(W4A16Cuda, EpilogueWritesTheResidualAndTheBias) {
  MMSERVE_REQUIRE_GPU();
  // o / down: f32 residual, accumulated; qkv: a bias in the dtype; both at once; through one split (the mma
  // kernel's epilogue), three (the reduce's) and m > 64 (cuBLASLt's beta and bias).
  const Output outputs[] = {{true, true, false}, {false, false, true}, {true, true, true}, {false, true, false}};
  uint32_t seed = 61;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool act : {false, true}) {
      const Weight w = make(272, 640, 64, act, dtype, seed++);
      ASSERT_TRUE(w.device);
      for (const Output& o : outputs) {
        for (int64_t m : {1, 9, 64}) {
          for (int split_k : {1, 3}) check(w, m, split_k, seed++, o);
        }
        check(w, 100, 0, seed++, o);
        if (HasFailure()) return;
      }
    }
  }
}

TEST_F(W4A16Cuda, LlamaShapesWithTheHeuristicSplits) {
  MMSERVE_REQUIRE_GPU();
  // Many chunks per split (k = 14336: 56 chunks, several shared-memory stages of x) and many CTAs (n = 4096),
  // group 128, both dtypes.
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const Weight down = make(256, 14336, 128, false, dtype, 21);
    ASSERT_TRUE(down.device);
    for (int64_t m : {1, 5, 64}) check(down, m, 0, 30 + static_cast<uint32_t>(m));
    // One split over all 56 chunks: x staged 9 chunks at a time (m <= 8), 4 (m <= 16), 2 (m <= 32), 1 (m <= 64).
    for (int64_t m : {1, 12, 20, 40}) check(down, m, 1, 50 + static_cast<uint32_t>(m));
    const Weight o = make(4096, 512, 128, true, dtype, 22);
    ASSERT_TRUE(o.device);
    for (int64_t m : {1, 16}) check(o, m, 0, 40 + static_cast<uint32_t>(m));
  }
}

TEST_F(W4A16Cuda, GraphReplayReadsTheNewInput) {
  MMSERVE_REQUIRE_GPU();
  const Weight w = make(272, 1024, 128, true, DType::kBF16, 31);
  ASSERT_TRUE(w.device);
  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int64_t m : {int64_t{5}, int64_t{100}}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const int64_t n = w.packed.n, k = w.packed.k;
    const size_t ws_bytes = w4a16_workspace_bytes(m, w.device->view);
    DeviceVector<uint8_t> dx(static_cast<size_t>(m * k * 2)), dy(static_cast<size_t>(m * n * 2)), ws(ws_bytes + 16);
    ASSERT_CUDA_OK(cudaMemset(ws.get(), 0, ws_bytes + 16));  // the split-K counters (w4a16_cuda.h)
    const auto input = [&](uint32_t seed) {
      return cuda_test::round_through(test_util::random_floats(static_cast<size_t>(m * k), seed, -1, 1), DType::kBF16);
    };
    // Warm up (cuBLASLt's heuristic runs on the first call of a shape), then capture.
    dx.upload(cuda_test::encode(input(1), DType::kBF16));
    ASSERT_TRUE(
        w4a16_gemm_cuda(dx.get(), DType::kBF16, m, w.device->view, dy.get(), ws.get(), ws_bytes, gemm_.get(), stream)
            .ok());
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<uint8_t> direct = dy.download();
    cudaGraph_t graph = nullptr;
    ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const Status st =
        w4a16_gemm_cuda(dx.get(), DType::kBF16, m, w.device->view, dy.get(), ws.get(), ws_bytes, gemm_.get(), stream);
    ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(st.ok()) << st.to_string();
    cudaGraphExec_t exec = nullptr;
    ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    ASSERT_CUDA_OK(cudaMemsetAsync(dy.get(), 0, m * n * 2, stream));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(dy.download(), direct) << "the replay differs from the direct call on the same x";
    // New x, same graph: the result follows x.
    const std::vector<float> x2 = input(2);
    dx.upload(cuda_test::encode(x2, DType::kBF16));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<float> got = cuda_test::decode(dy.download(), DType::kBF16);
    // The reference of the path taken: the twin at m <= 64; above, the product with the dequantised weights, each
    // rounded to bf16 (what cuBLASLt multiplies: w4a16.h, rounding), in double.
    std::vector<float> want(static_cast<size_t>(m * n));
    if (m <= kW4A16MmaMaxRows) {
      w4a16_gemm_cpu(x2.data(), m, w.packed, want.data());
    } else {
      const std::vector<float> weight = w4a16_dequantize_cpu(w.packed);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t o = 0; o < n; ++o) {
          double acc = 0;
          for (int64_t c = 0; c < k; ++c) acc += double{x2[r * k + c]} * weight[o * k + c];
          want[r * n + o] = static_cast<float>(acc);
        }
      }
    }
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(double{got[i]} - want[i]) / (1 + std::fabs(want[i]));
      if (e > worst) worst = e, at = i;
    }
    EXPECT_LT(worst, 2.0 / 256) << "replay on a new x: y[" << at / n << "][" << at % n << "] = " << got[at] << ", want "
                                << want[at];
    ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
    ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  }
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

TEST_F(W4A16Cuda, BrokenArgumentsAreRefused) {
  MMSERVE_REQUIRE_GPU();
  const Weight w = make(32, 1024, 128, false, DType::kBF16, 41);
  ASSERT_TRUE(w.device);
  const W4A16Device& d = w.device->view;
  DeviceVector<uint8_t> x(100 * 1024 * 2 + 16), y(100 * 32 * 2), ws(1 << 20);
  ASSERT_CUDA_OK(cudaMemset(ws.get(), 0, 1 << 20));  // the split-K counters (w4a16_cuda.h)
  const auto call = [&](const void* xp, DType dtype, int64_t m, const W4A16Device& dw, size_t ws_bytes,
                        CublasLtGemm* gemm) {
    return w4a16_gemm_cuda(xp, dtype, m, dw, y.get(), ws.get(), ws_bytes, gemm, nullptr).code();
  };
  EXPECT_EQ(call(x.get(), DType::kBF16, 3, d, 1 << 20, gemm_.get()), StatusCode::kOk);
  EXPECT_EQ(call(x.get(), DType::kBF16, 0, d, 0, gemm_.get()), StatusCode::kOk);
  EXPECT_EQ(call(x.get(), DType::kF16, 3, d, 1 << 20, gemm_.get()), StatusCode::kInvalidArgument) << "dtype mismatch";
  EXPECT_EQ(call(x.get(), DType::kF32, 3, d, 1 << 20, gemm_.get()), StatusCode::kInvalidArgument) << "f32";
  EXPECT_EQ(call(x.get() + 2, DType::kBF16, 3, d, 1 << 20, gemm_.get()), StatusCode::kInvalidArgument)
      << "x not 16-byte aligned";
  EXPECT_EQ(call(x.get(), DType::kBF16, -1, d, 1 << 20, gemm_.get()), StatusCode::kInvalidArgument);
  ASSERT_GT(w4a16_workspace_bytes(3, d), 0u);  // k = 1024: 4 chunks, the heuristic may split
  EXPECT_EQ(call(x.get(), DType::kBF16, 3, d, 16, gemm_.get()), StatusCode::kInvalidArgument) << "workspace";
  EXPECT_EQ(call(x.get(), DType::kBF16, 100, d, 16, gemm_.get()), StatusCode::kInvalidArgument)
      << "workspace of the cuBLASLt path";
  EXPECT_EQ(call(x.get(), DType::kBF16, 100, d, w4a16_workspace_bytes(100, d), nullptr), StatusCode::kInvalidArgument)
      << "no CublasLtGemm";
  W4A16Device broken = d;
  broken.n = 24;
  EXPECT_EQ(call(x.get(), DType::kBF16, 3, broken, 1 << 20, gemm_.get()), StatusCode::kInvalidArgument);
  broken = d, broken.group_size = 48;
  EXPECT_EQ(call(x.get(), DType::kBF16, 3, broken, 1 << 20, gemm_.get()), StatusCode::kInvalidArgument);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mmserve::kernels
