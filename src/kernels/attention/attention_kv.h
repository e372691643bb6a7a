// Multi-head attention of q against separate K and V buffers (Whisper: encoder self-attention, decoder
// cross-attention over the encoder's K/V, decoder self-attention over a KV cache), with K/V optionally
// stored compressed (FP8 E4M3 or INT8 with per (batch row, head) scales). This header holds the contract
// shared by the CPU twin (attention_kv_cpu, below) and the CUDA kernel (attention_kv_cuda.h).
//
// Contract (row-major, H = heads * head_dim):
//   q   [batch * q_len rows, q_ld]: row i of batch b at (b * q_len + i) * q_ld, columns [h * head_dim, +head_dim)
//   k,v row j of batch b at (b * kv_batch_stride + j) * kv_ld, same columns; k and v may be column slices of
//       one buffer (a fused KV projection) or two KV caches [batch, capacity, H] (kv_batch_stride = capacity);
//       with `kv_shared` every batch row reads the same K/V (kv_batch_stride ignored) (cross-attention of several query rows over one
//       set of keys, e.g. SAM's tokens over the image taken as batch rows of q_len 1, which takes the split-KV
//       decode path; beams sharing an encoder output); compressed scales stay per (batch row, head)
//   out [batch * q_len rows, out_ld], columns [0, H); must not alias q, k or v; other columns untouched.
//   out[b,i,h,:] = sum_j softmax_j(scale * q[b,i,h,:] . k[b,j,h,:]) * v[b,j,h,:] over the visible keys j:
//     j < L_b with L_b = kv_lengths[b] (clamped to [0, kv_len]) or kv_len without kv_lengths, and, with
//     `causal`, j <= L_b - q_len + i (bottom-right aligned: the q_len new tokens are the last of the L_b
//     keys, so a decode step sees its whole past). A query row that sees no key gets zeros.
//     With `window` > 0 (Mistral's sliding window), query i also sees only the window keys ending at its own
//     position: j > L_b - q_len + i - window.
//   Grouped-query attention: with kv_heads > 0 (and heads a multiple of it) K and V hold kv_heads heads, columns
//   [g * head_dim, +head_dim), and query head h reads K/V head h / (heads / kv_heads) (compressed scales are per
//   (batch row, K/V head) then); 0 means kv_heads = heads.
//   Keys that are not visible are never read, so padding past L_b may hold anything (NaN included).
// Types: q and out have `dtype` (f32, f16, bf16). With storage kSame, k and v have `dtype` too; with
// kFp8E4M3 / kInt8 they are 1-byte elements (__nv_fp8_e4m3 / int8) and the real value is
// stored * k_scale[b * heads + h] (resp. v_scale), see quantize_kv in kv_cache/kv_cache.h.
// Softmax and accumulation in f32 (double on the CPU twin is not used: f32, like the GPU).
// Tests: attention_kv_test.cpp (CPU twin vs a naive double loop), attention_kv_cuda_test.cpp (GPU vs twin).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

// Element type of K and V: the activation dtype, or compressed with per (batch row, head) scales.
enum class KvStorage { kSame, kFp8E4M3, kInt8 };

struct AttentionKvArgs {
  const void* q = nullptr;
  int64_t q_ld = 0;  // elements between rows of q (>= heads * head_dim)
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t kv_ld = 0;            // elements between rows of k and of v (>= heads * head_dim)
  int64_t kv_batch_stride = 0;  // rows between batches (a KV cache's capacity, or kv_len); >= kv_len
  bool kv_shared = false;       // every batch row reads batch 0's K/V rows (kv_batch_stride is not read)
  void* out = nullptr;
  int64_t out_ld = 0;          // elements between rows of out (>= heads * head_dim)
  DType dtype = DType::kBF16;  // q and out (f32, f16, bf16); K/V too when storage == kSame
  KvStorage storage = KvStorage::kSame;
  const float* k_scale = nullptr;  // [batch, heads], compressed storage only: value = stored * scale
  const float* v_scale = nullptr;
  int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, head_dim = 0;
  float scale = 1.0f;
  const int32_t* kv_lengths = nullptr;  // [batch]: keys j >= kv_lengths[b] hidden (else kv_len); nullable
  bool causal = false;                  // bottom-right aligned: query i sees keys j <= L_b - q_len + i
  int64_t window = 0;                   // > 0 (with causal): query i sees keys j > L_b - q_len + i - window
  int64_t kv_heads = 0;                 // heads of K/V (grouped-query attention); 0: heads. CPU twin only so far
  // CUDA only: scratch for the split-KV partials of the decode path (q_len == 1), at least
  // attention_kv_cuda_workspace_bytes(args) bytes, 16-byte aligned; may be null when that is 0.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Rows between the K/V of consecutive batch rows as the kernels index them: 0 when shared.
inline int64_t attention_kv_batch_rows(const AttentionKvArgs& a) { return a.kv_shared ? 0 : a.kv_batch_stride; }

// Checks the arguments that do not depend on the data (shapes, strides, pointers, dtypes); shared by both
// implementations. kInvalidArgument with a message naming the field.
Status attention_kv_validate(const AttentionKvArgs& args);

// The CPU twin: host pointers (kv_lengths, k_scale, v_scale too), every dtype and storage. Parallel over
// (batch, head) with OpenMP.
Status attention_kv_cpu(const AttentionKvArgs& args);

}  // namespace mmserve::kernels
