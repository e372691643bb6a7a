// rel_pos_attention_cuda (both paths: the tensor-core kernel for f16/bf16 and the CUDA-core one, forced for every
// dtype) against the CPU twin on identical inputs (q, k, v rounded through the dtype first), over odd shapes: 1x1 and
// 3x5 windows, SAM's 14x14 windows (many sequences) and 64x64 global grid (ViT-H's 4096 tokens x head_dim 80, fewer
// heads), head_dim 8/16/20/64/80/128, with and without tables, strided rows. Tolerance: max |gpu - twin| <= tol *
// max |twin|: f32 2e-5, f16 2e-3, bf16 2e-2 (P rounded to the dtype before P V, as attention_kv_cuda_test.cpp).
// Also a capture into a CUDA graph replays the same numbers. Skips, saying why, without a GPU.
#include "kernels/rel_pos_attention/rel_pos_attention_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

struct Case {
  DType dtype;
  int64_t sequences, height, width, heads, head_dim;
  bool bias = true;
  int64_t pad = 0;
  std::string name() const {
    return std::string(dtype_name(dtype)) + " " + std::to_string(sequences) + "x" + std::to_string(height) + "x" +
           std::to_string(width) + " h" + std::to_string(heads) + " d" + std::to_string(head_dim) +
           (bias ? " bias" : "") + (pad ? " strided" : "");
  }
};

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 2e-5 : dtype == DType::kF16 ? 2e-3 : 2e-2;
}

void run_case(const Case& c, bool simt, uint32_t seed) {
  SCOPED_TRACE(c.name() + (simt ? " simt" : ""));
  const int64_t tokens = c.height * c.width, hidden = c.heads * c.head_dim;
  const int64_t ld = 3 * hidden + c.pad, out_ld = hidden + c.pad;
  // Values through the dtype, so the twin sees exactly what the GPU reads.
  std::vector<float> qkv = random_floats(static_cast<size_t>(c.sequences * tokens * ld), seed, -1.5f, 1.5f);
  const std::vector<uint8_t> qkv_bytes = cuda_test::encode(qkv, c.dtype);
  qkv = cuda_test::decode(qkv_bytes, c.dtype);
  const std::vector<float> rh = random_floats(static_cast<size_t>((2 * c.height - 1) * c.head_dim), seed + 1, -0.3f, 0.3f);
  const std::vector<float> rw = random_floats(static_cast<size_t>((2 * c.width - 1) * c.head_dim), seed + 2, -0.3f, 0.3f);
  RelPosAttentionArgs a;
  a.qkv_ld = ld, a.out_ld = out_ld, a.sequences = c.sequences, a.height = c.height, a.width = c.width;
  a.heads = c.heads, a.head_dim = c.head_dim, a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> twin(static_cast<size_t>(c.sequences * tokens * out_ld), 0.0f);
  a.qkv = qkv.data(), a.out = twin.data(), a.dtype = DType::kF32;
  if (c.bias) a.rel_pos_h = rh.data(), a.rel_pos_w = rw.data();
  ASSERT_TRUE(rel_pos_attention_cpu(a).ok());

  DeviceVector<uint8_t> d_qkv(qkv_bytes);
  DeviceVector<uint8_t> d_out(twin.size() * dtype_size(c.dtype));
  DeviceVector<float> d_rh(rh), d_rw(rw), d_bias(static_cast<size_t>(rel_pos_attention_bias_floats(a)));
  ASSERT_CUDA_OK(cudaMemset(d_out.get(), 0, d_out.size()));
  a.qkv = d_qkv.get(), a.out = d_out.get(), a.dtype = c.dtype, a.bias = d_bias.get();
  if (c.bias) a.rel_pos_h = d_rh.get(), a.rel_pos_w = d_rw.get();
  const Status st = simt ? rel_pos_attention_cuda_simt(a, nullptr) : rel_pos_attention_cuda(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = cuda_test::decode(d_out.download(), c.dtype);
  double worst = 0.0, max_ref = 0.0;
  for (int64_t r = 0; r < c.sequences * tokens; ++r) {
    for (int64_t col = 0; col < hidden; ++col) {
      const size_t i = static_cast<size_t>(r * out_ld + col);
      if (!std::isfinite(got[i])) {
        worst = INFINITY;
        continue;
      }
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - twin[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(twin[i])));
    }
  }
  EXPECT_LE(worst, tolerance(c.dtype) * max_ref) << "max error " << worst << " of max " << max_ref;
}

TEST(RelPosAttentionCuda, MatchesCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  const Case shapes[] = {
      {DType::kF32, 2, 1, 1, 1, 8},      {DType::kF32, 3, 3, 5, 2, 20, true, 3}, {DType::kF32, 4, 14, 14, 2, 64},
      {DType::kF32, 1, 16, 16, 2, 80},   {DType::kF32, 1, 5, 5, 1, 128, false},  {DType::kBF16, 2, 1, 1, 1, 8},
      {DType::kBF16, 3, 3, 5, 2, 20, true, 3}, {DType::kBF16, 25, 14, 14, 2, 80}, {DType::kBF16, 2, 5, 5, 3, 16},
      {DType::kBF16, 1, 64, 64, 2, 80},  {DType::kBF16, 2, 9, 7, 1, 128, false, 8}, {DType::kBF16, 4, 14, 14, 1, 64},
      {DType::kF16, 3, 3, 5, 2, 20, true, 3}, {DType::kF16, 25, 14, 14, 2, 80}, {DType::kF16, 1, 64, 64, 1, 64},
      {DType::kF16, 2, 4, 4, 3, 8, false}};
  uint32_t seed = 100;
  for (const Case& c : shapes) {
    run_case(c, /*simt=*/false, seed);
    if (c.dtype != DType::kF32 && c.height * c.width <= 1024) run_case(c, /*simt=*/true, seed);
    seed += 7;
  }
}

TEST(RelPosAttentionCuda, GraphReplayMatchesEager) {
  MMSERVE_REQUIRE_GPU();
  const int64_t seqs = 4, side = 14, heads = 2, hd = 64, tokens = side * side, hidden = heads * hd;
  const std::vector<uint8_t> qkv = cuda_test::encode(random_floats(seqs * tokens * 3 * hidden, 5), DType::kBF16);
  DeviceVector<uint8_t> d_qkv(qkv), d_out(seqs * tokens * hidden * 2), d_out2(seqs * tokens * hidden * 2);
  DeviceVector<float> d_rh(random_floats((2 * side - 1) * hd, 6)), d_rw(random_floats((2 * side - 1) * hd, 7));
  RelPosAttentionArgs a;
  a.qkv = d_qkv.get(), a.qkv_ld = 3 * hidden, a.out = d_out.get(), a.out_ld = hidden, a.dtype = DType::kBF16;
  a.sequences = seqs, a.height = a.width = side, a.heads = heads, a.head_dim = hd, a.scale = 0.125f;
  a.rel_pos_h = d_rh.get(), a.rel_pos_w = d_rw.get();
  DeviceVector<float> d_bias(static_cast<size_t>(rel_pos_attention_bias_floats(a)));
  a.bias = d_bias.get();
  ASSERT_TRUE(rel_pos_attention_cuda(a, nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  a.out = d_out2.get();
  cudaGraph_t graph;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_TRUE(rel_pos_attention_cuda(a, stream).ok());
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(d_out.download(), d_out2.download());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(RelPosAttentionCuda, RefusesLargeHeadDim) {
  MMSERVE_REQUIRE_GPU();
  DeviceVector<float> buf(3 * 130 * 4 + 130 * 4);
  RelPosAttentionArgs a;
  a.qkv = buf.get(), a.qkv_ld = 3 * 130, a.out = buf.get() + 3 * 130 * 4, a.out_ld = 130, a.dtype = DType::kF32;
  a.sequences = 1, a.height = a.width = 2, a.heads = 1, a.head_dim = 130;
  EXPECT_EQ(rel_pos_attention_cuda(a, nullptr).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace mmserve::kernels
