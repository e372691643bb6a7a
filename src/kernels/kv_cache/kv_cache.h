// KV-cache maintenance for autoregressive decoding (Whisper's decoder): append new K/V rows at a position
// held in device memory, reorder cache rows for beam search, and compress K/V (cross-attention's, computed
// once per request) to FP8 E4M3 or INT8 with per (batch row, head) scales. This header holds the
// contracts and the CPU twins; the CUDA versions are in kv_cache_cuda.h.
//
// Layouts (row-major, W = heads * head_dim = width):
//   a cache is [batch, capacity, W] (row r of batch b at (b * capacity + r) * W), the layout that
//   AttentionKvArgs reads with kv_ld = W and kv_batch_stride = capacity.
// Tests: kv_cache_test.cpp (CPU twins vs naive loops, FP8 rounding against hand-checked values),
// kv_cache_cuda_test.cpp (GPU vs twin, bit for bit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/fp8/fp8.h"
#include "kernels/attention/attention_kv.h"

namespace mmserve::kernels {

// kv_cache_append: for each batch row b and i < n, cache[b, positions[b] + i, :] = src[b * n + i, :] (W
// columns), for k into k_cache and v into v_cache (v / v_cache may both be null: k only). Rows whose target
// position falls outside [0, capacity) are dropped (the device cannot report them; the caller bounds the
// positions). `positions` lives in device memory for the CUDA version (host memory for the twin), so a
// captured graph replays the append while the position advances.
struct KvCacheAppendArgs {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t src_ld = 0;  // elements between rows of k and v (>= width): e.g. columns of a fused QKV output
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DType dtype = DType::kBF16;  // of sources and caches (f32, f16, bf16)
  int64_t batch = 0, n = 0, capacity = 0, width = 0;
  const int32_t* positions = nullptr;  // [batch]
};

// kv_cache_gather: dst batch row i = src batch row src_index[i] (its first `rows` cache rows, i.e.
// rows * width elements of element_bytes each, starting at the batch row's base), for i < batch. Any
// element type (element_bytes 1, 2 or 4: caches, compressed caches, and the [batch, heads] scale arrays with
// capacity = rows = 1, width = heads). In place (dst == src) goes through `scratch`, which then must hold
// kv_cache_gather_scratch_bytes(args); out of place, dst must not overlap src. Indices outside
// [0, batch_src) leave the dst row untouched on the GPU (kInvalidArgument on the CPU twin, which can see
// them).
struct KvCacheGatherArgs {
  const void* src = nullptr;
  void* dst = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  size_t element_bytes = 2;
  int64_t batch = 0;      // rows of dst (= entries of src_index)
  int64_t batch_src = 0;  // batch rows of src
  int64_t capacity = 0, rows = 0, width = 0;
  const int32_t* src_index = nullptr;  // [batch]
};
size_t kv_cache_gather_scratch_bytes(const KvCacheGatherArgs& args);

// quantize_kv: src [batch * rows, src_ld] (rows of batch b start at b * rows; columns [0, heads * head_dim))
// in f32/f16/bf16 -> dst rows at (b * dst_batch_stride + r) * dst_ld, 1-byte elements: FP8 E4M3 or INT8.
// scale[b * heads + h] = absmax over the (b, h) block / 448 (FP8) or / 127 (INT8); stored = x / scale
// (f32 division), FP8 rounded to nearest even with saturation to +-448 (as __nv_cvt_float_to_fp8 with
// __NV_SATFINITE), INT8 rounded to nearest even and clamped to [-127, 127]. An all-zero block gets scale 0
// and zeros. Dequantised value = stored * scale (what AttentionKvArgs' k_scale / v_scale mean).
struct QuantizeKvArgs {
  const void* src = nullptr;
  int64_t src_ld = 0;
  DType dtype = DType::kBF16;
  void* dst = nullptr;
  int64_t dst_ld = 0;                       // >= heads * head_dim
  int64_t dst_batch_stride = 0;             // rows between batches of dst (>= rows)
  KvStorage storage = KvStorage::kFp8E4M3;  // kFp8E4M3 or kInt8
  float* scale = nullptr;                   // [batch, heads], written
  int64_t batch = 0, rows = 0, heads = 0, head_dim = 0;
};

// FP8 E4M3 (OCP "fn": bias 7, max 448, no infinities, NaN 0x7f/0xff) <-> f32, bit-exact with CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) and its inverse: fp8.h's codes, under the names the caches use.
inline uint8_t f32_to_fp8_e4m3(float x) { return fp8_encode(x, Fp8Format::kE4M3); }
inline float fp8_e4m3_to_f32(uint8_t v) { return fp8_decode(v, Fp8Format::kE4M3); }

// Argument checks shared by the twins and the CUDA versions (kInvalidArgument naming the field).
Status kv_cache_append_validate(const KvCacheAppendArgs& args);
Status kv_cache_gather_validate(const KvCacheGatherArgs& args);
Status quantize_kv_validate(const QuantizeKvArgs& args);

// CPU twins: host pointers throughout.
Status kv_cache_append_cpu(const KvCacheAppendArgs& args);
Status kv_cache_gather_cpu(const KvCacheGatherArgs& args);
Status quantize_kv_cpu(const QuantizeKvArgs& args);

}  // namespace mmserve::kernels
