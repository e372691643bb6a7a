// Rotary position embeddings as HF transformers computes them for Llama, Mistral and Qwen (rotate_half form:
// the first and second halves of each head are the pair, not interleaved lanes).
//
// rope_inv_freq: the inverse frequencies of one configuration, in float32 as HF's rope init functions compute
// them (`1 / base ** (arange(0, dim, 2) / dim)`, then the scaling): rope_type "default", "linear" (inv_freq /
// factor), "dynamic" (NTK: base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2)) once
// seq_len > max_pos, else default), "llama3" (Llama 3.1's wavelength bands: low frequencies / factor, high kept,
// the band between smoothly blended). All these have attention scaling 1.
// apply_rope: for each row r (one token, at position positions[r]) and each of `heads` heads of head_dim
// values at x + r * ld + h * head_dim: with f_i = positions[r] * inv_freq[i] (float32), for i < head_dim / 2,
//   x1' = x1 * cos f_i - x2 * sin f_i,  x2' = x2 * cos f_i + x1 * sin f_i   (x1 = x[i], x2 = x[i + head_dim/2]).
// In place, f32.
// apply_rope(const RopeArgs&): the dtype-generic contract the CUDA twin (rope_cuda.h) shares: the same rotation on
// x in f32, f16 or bf16 (computed in f32, rounded once to the dtype on the store). `heads` heads of head_dim
// starting at x, so q and k of a fused QKV row [q | k | v] are ONE call with x = the row's start and heads =
// q_heads + kv_heads (k's columns follow q's directly, and both rotate by the same angles).
// Tests: rope_test.cpp (against HF's formulas in double); bench: rope_bench.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/paged_attention/paged_attention.h"

namespace mmserve::kernels {

struct RopeScaling {
  std::string type = "default";  // default | linear | dynamic | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;                      // llama3
  double high_freq_factor = 4.0;                     // llama3
  int64_t original_max_position_embeddings = 8192;   // llama3 (and dynamic's max_pos when given)
};

// head_dim / 2 inverse frequencies. `seq_len` matters only for "dynamic" (the longest sequence the step sees).
std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling,
                                 int64_t max_position_embeddings, int64_t seq_len = 0);

void apply_rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_dim, const int32_t* positions,
                const float* inv_freq);

struct RopeArgs {
  void* x = nullptr;  // [rows, ld], rotated in place
  DType dtype = DType::kBF16;
  int64_t rows = 0, ld = 0;
  int64_t heads = 0, head_dim = 0;     // heads * head_dim <= ld
  const int32_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [head_dim / 2]
};

// kInvalidArgument / kUnimplemented for a broken shape, dtype or null pointer (shared by both twins).
Status validate_rope(const RopeArgs& args);

// The CPU twin of apply_rope_cuda: exactly apply_rope's f32 arithmetic on values loaded from `dtype`.
Status apply_rope(const RopeArgs& args);

// The CPU twin of apply_rope_and_cache_cuda: apply_rope, then paged_kv_write_cpu (whose k and v are the rotated
// rows' k and v columns). kv.num_tokens must equal args.rows and the dtypes match.
Status apply_rope_and_cache(const RopeArgs& args, const PagedKvWriteArgs& kv);

}  // namespace mmserve::kernels
