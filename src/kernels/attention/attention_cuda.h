// Fused multi-head attention on the GPU (the CUDA twin of attention.h, for self-attention of encoders).
//
// Contract (row-major, device pointers):
//   qkv [batch * seq, qkv_ld] holds q in columns [0, H), k in [H, 2H), v in [2H, 3H), H = heads * head_dim
//       (the output of one fused QKV projection), element type `dtype` (f32, f16 or bf16);
//   out [batch * seq, out_ld], columns [0, H), same dtype; must not alias qkv.
//   out[b, i, h, :] = sum_j softmax_j(scale * q[b,i,h,:] . k[b,j,h,:] + mask) * v[b,j,h,:]
// Masks as in attention.h: `causal` hides j > i; `kv_lengths` (device, [batch] int32, nullable) hides keys
// j >= kv_lengths[b]; a query row that sees no key gets zeros. Softmax and accumulation in f32.
// Scores never touch global memory: one pass per (batch, head, query tile) with the tile's scores in
// registers/shared memory (FlashAttention-style). f16/bf16 use tensor cores.
// Tests: attention_cuda_test.cpp (vs the CPU twin over odd shapes); bench: attention_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

struct AttentionCudaArgs {
  const void* qkv = nullptr;
  int64_t qkv_ld = 0;  // elements between consecutive rows of qkv (>= 3 * heads * head_dim)
  void* out = nullptr;
  int64_t out_ld = 0;  // elements between consecutive rows of out (>= heads * head_dim)
  DType dtype = DType::kBF16;
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  float scale = 1.0f;
  bool causal = false;
  const int32_t* kv_lengths = nullptr;  // device, [batch], or nullptr
};

// Which shapes the kernel takes; anything else is kUnimplemented from attention_cuda() with a message
// naming the limit. f16/bf16: head_dim <= 128 (zero-padded to a multiple of 16) and K and V of one head
// resident in shared memory (227 KB per block on Hopper): seq <= 2384 / 1408 / 992 / 768 / 624 / 512 / 448
// / 384 for head_dim rounded up to 16 / 32 / 48 / 64 / 80 / 96 / 112 / 128. f32: head_dim <= 256 and
// seq <= 4096.
bool attention_cuda_supported(DType dtype, int64_t seq, int64_t head_dim);
Status attention_cuda(const AttentionCudaArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
