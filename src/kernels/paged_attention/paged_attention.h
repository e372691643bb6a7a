// Attention of the decoders (issue 14) over a paged KV cache: the keys and values of every sequence live in
// fixed-size blocks of one pool, found through the sequence's block table (vLLM's PagedAttention layout). One
// call serves a whole engine step: sequences decoding one token, prefill chunks of many tokens, and a mix of both
// (chunked prefill), each with its own length. This header holds the contract shared by the CPU twins (below)
// and the CUDA kernels (paged_attention_cuda.h: split-K flash-decoding for one-token queries, a tiled causal
// kernel over pages for longer ones).
//
// Layouts (row-major; W = kv_heads * head_dim, the width of one K or V row):
//   k_cache, v_cache  one layer's pool, [num_blocks, block_size, W]: the row of slot s (block s / block_size,
//                     offset s % block_size) at s * W.
//   block_tables      [num_seqs, block_table_ld] int32: sequence b's i-th block of keys (positions
//                     [i * block_size, (i + 1) * block_size)) is block block_tables[b * block_table_ld + i].
//   seq_lens          [num_seqs] int32: L_b, the keys of sequence b after this step (its past plus its new tokens).
//   query_start       [num_seqs + 1] int32, non-decreasing, query_start[0] = 0: sequence b's new tokens are the
//                     rows [query_start[b], query_start[b + 1]) of q and out; q_len_b = their count <= L_b.
//   q                 [num_tokens rows, q_ld], query head h at columns [h * head_dim, +head_dim).
//   out               [num_tokens rows, out_ld], columns [0, heads * head_dim); must not alias q or the caches.
// Semantics (causal, bottom-right aligned, as a decoder's step is): new token i of sequence b sits at position
//   p = L_b - q_len_b + i and sees the keys j <= p (and, with window > 0, as Mistral's sliding window, only
//   j > p - window). out[row, h, :] = sum_j softmax_j(scale * q[row, h, :] . k[j, g, :]) * v[j, g, :] with
//   g = h / (heads / kv_heads) (grouped-query attention; heads is a multiple of kv_heads).
//   Blocks a sequence does not reach are never read; a row with q_len_b = 0 does nothing. Keys of position j are
//   wherever the block table says, whoever wrote them (a prefix shared with another sequence is read in place).
// Types: q and out have `dtype` (f32, f16, bf16); softmax and accumulation in f32. The pool (k_cache, v_cache)
//   holds `kv_storage`:
//   - kSame: elements of `dtype`.
//   - kFp8E4M3 / kFp8E5M2 (an FP8 KV cache, vLLM's --kv-cache-dtype fp8 / fp8_e4m3 / fp8_e5m2): one byte per
//     element, the OCP codes of kernels/fp8/fp8.h, with one f32 scale per tensor per layer (*k_scale for K,
//     *v_scale for V; 1.0 unless the checkpoint carries calibrated k_scale / v_scale). The write stores
//     code = fp8_encode(value / scale) (IEEE f32 division, round to nearest even, saturating to +-448 / +-57344:
//     fp8_quantize's semantics, so the CUDA write equals the twin bit for bit); attention reads value =
//     fp8_decode(code) * scale. The kernels may apply the scale to the scores (K) and to the output (V) instead
//     of to every element, which differs from the formula by f32 rounding only. f16 or bf16 activations only
//     (f32 with an FP8 pool is kInvalidArgument: nothing serves it). Scales must be positive and finite (the CPU
//     twin checks; the GPU reads them on the device and trusts them). An FP8 pool holds twice the tokens of a
//     16-bit one in the same bytes.
//
// paged_kv_write (vLLM's reshape_and_cache): row t of k and of v (W columns, row stride src_ld, in `dtype`) goes
//   to slot slot_mapping[t] of k_cache and v_cache (as `kv_storage`: quantised with the write's k_scale / v_scale
//   as above); slots < 0 are skipped (padding rows of a captured step).
//
// Device pointers for the CUDA versions (the int32 arrays too, so a captured CUDA graph replays a step while
// lengths and tables change); host pointers for the CPU twins.
// Tests: paged_attention_test.cpp (CPU twin vs a naive double loop over a contiguous copy, FP8 pools vs the loop
// over the dequantised values), paged_attention_cuda_test.cpp (GPU vs twin over odd shapes, both FP8 formats);
// bench: paged_attention_cuda_bench.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

// What the pool's K and V elements are (the contract above): the activation dtype, or FP8 codes with scales.
enum class PagedKvStorage { kSame, kFp8E4M3, kFp8E5M2 };

const char* paged_kv_storage_name(PagedKvStorage storage);  // "same", "fp8_e4m3", "fp8_e5m2"
// Bytes of one pool element: dtype_size(dtype) for kSame, 1 for FP8.
int64_t paged_kv_element_bytes(PagedKvStorage storage, DType dtype);

struct PagedAttentionArgs {
  const void* q = nullptr;
  int64_t q_ld = 0;  // elements between rows of q (>= heads * head_dim)
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  void* out = nullptr;
  int64_t out_ld = 0;  // elements between rows of out (>= heads * head_dim)
  DType dtype = DType::kBF16;
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_ld]
  int64_t block_table_ld = 0;             // >= the blocks of the longest sequence
  const int32_t* seq_lens = nullptr;      // [num_seqs]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  int64_t num_seqs = 0, num_tokens = 0;   // num_tokens = query_start[num_seqs] (rows of q and out)
  int64_t heads = 0, kv_heads = 0, head_dim = 0, block_size = 16;
  int64_t num_blocks = 0;  // of the pool (bounds for the twin's checks)
  float scale = 1.0f;
  int64_t window = 0;  // > 0: sliding window (Mistral)
  PagedKvStorage kv_storage = PagedKvStorage::kSame;
  const float* k_scale = nullptr;  // FP8 pools: one float each (device on CUDA, host on the twin)
  const float* v_scale = nullptr;
  // Host-side bounds the CUDA kernels size their grids by (upper bounds are fine: extra work exits early):
  int64_t max_seq_len = 0;    // >= every L_b
  int64_t max_query_len = 0;  // >= every q_len_b
  // CUDA only: scratch for split-K partials, paged_attention_cuda_workspace_bytes(args) bytes, 16-byte aligned,
  // zeroed once before its first use (paged_attention_cuda.h).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct PagedKvWriteArgs {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t src_ld = 0;  // elements between rows of k and v (>= W): e.g. columns of a fused QKV output
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DType dtype = DType::kBF16;
  const int32_t* slot_mapping = nullptr;  // [num_tokens]
  int64_t num_tokens = 0, width = 0;      // width = W
  int64_t num_slots = 0;                  // num_blocks * block_size (the twin checks slots against it)
  PagedKvStorage kv_storage = PagedKvStorage::kSame;
  const float* k_scale = nullptr;  // FP8 pools: one float each (device on CUDA, host on the twin)
  const float* v_scale = nullptr;
};

// Shape, stride, pointer and dtype checks shared by both implementations (kInvalidArgument naming the field).
Status paged_attention_validate(const PagedAttentionArgs& args);
Status paged_kv_write_validate(const PagedKvWriteArgs& args);

// CPU twins (host pointers). They also check the data (lengths, table entries, slots within the pool):
// kInvalidArgument instead of reading out of bounds.
Status paged_attention_cpu(const PagedAttentionArgs& args);
Status paged_kv_write_cpu(const PagedKvWriteArgs& args);

}  // namespace mmserve::kernels
