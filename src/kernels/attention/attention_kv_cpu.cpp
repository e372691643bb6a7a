// Attention over separate K/V on CPU: the twin of attention_kv_cuda (contract in attention_kv.h).
//
// One task per (batch, head): the head's visible K and V rows are converted (dequantised) to f32 panels
// once, then each query row gets its scores, a softmax over its own visible prefix and the weighted sum of
// V. Plain loops, f32 throughout (the reference the GPU is compared with, not a fast path: the CPU Whisper
// model uses kernels::attention). Keys past a row's visible prefix are never read.
// Tests: attention_kv_test.cpp (vs a naive double loop), attention_kv_cuda_test.cpp (GPU vs this).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/cpu_elements.h"
#include "kernels/attention/attention_kv.h"
#include "kernels/common/parallel.h"
#include "kernels/kv_cache/kv_cache.h"

namespace mmserve::kernels {
namespace {

using cpu::is_float_dtype;
using cpu::load_float;
using cpu::store_float;


// A K or V element as f32 before its scale (the stored value).
float load_kv(const void* base, const AttentionKvArgs& a, int64_t index) {
  switch (a.storage) {
    case KvStorage::kFp8E4M3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(base)[index]);
    case KvStorage::kInt8: return static_cast<float>(static_cast<const int8_t*>(base)[index]);
    default: return load_float(base, a.dtype, index);
  }
}

}  // namespace

Status attention_kv_validate(const AttentionKvArgs& a) {
  if (!is_float_dtype(a.dtype)) {
    return invalid_argument(std::string("attention_kv: dtype must be f32, f16 or bf16, got ") + dtype_name(a.dtype));
  }
  if (a.batch < 0 || a.q_len < 0 || a.kv_len < 0 || a.heads < 0 || a.head_dim < 0) {
    return invalid_argument("attention_kv: negative batch, q_len, kv_len, heads or head_dim");
  }
  if (a.batch == 0 || a.q_len == 0) return ok_status();
  if (a.heads == 0 || a.head_dim == 0) return invalid_argument("attention_kv: heads and head_dim must be positive");
  if (a.kv_heads < 0 || (a.kv_heads > 0 && a.heads % a.kv_heads != 0)) {
    return invalid_argument("attention_kv: heads (" + std::to_string(a.heads) + ") must be a multiple of kv_heads (" +
                            std::to_string(a.kv_heads) + ")");
  }
  if (a.window < 0 || (a.window > 0 && !a.causal)) {
    return invalid_argument("attention_kv: window must be >= 0, and a window needs causal");
  }
  const int64_t hidden = a.heads * a.head_dim;
  const int64_t kv_hidden = (a.kv_heads > 0 ? a.kv_heads : a.heads) * a.head_dim;
  if (a.q_ld < hidden || a.out_ld < hidden) {
    return invalid_argument("attention_kv: q_ld and out_ld must be >= heads * head_dim (" + std::to_string(hidden) +
                            ")");
  }
  if (a.q == nullptr || a.out == nullptr) return invalid_argument("attention_kv: q or out is null");
  if (!std::isfinite(a.scale)) return invalid_argument("attention_kv: scale is not finite");
  if (a.kv_len > 0) {
    if (a.kv_ld < kv_hidden) {
      return invalid_argument("attention_kv: kv_ld must be >= kv_heads * head_dim (" + std::to_string(kv_hidden) +
                              ")");
    }
    if (!a.kv_shared && a.kv_batch_stride < a.kv_len) {
      return invalid_argument("attention_kv: kv_batch_stride must be >= kv_len");
    }
    if (a.k == nullptr || a.v == nullptr) return invalid_argument("attention_kv: k or v is null");
    if (a.storage != KvStorage::kSame && (a.k_scale == nullptr || a.v_scale == nullptr)) {
      return invalid_argument("attention_kv: compressed K/V need k_scale and v_scale");
    }
  }
  return ok_status();
}

Status attention_kv_cpu(const AttentionKvArgs& a) {
  RETURN_IF_ERROR(attention_kv_validate(a));
  if (a.batch == 0 || a.q_len == 0) return ok_status();
  const int64_t d_head = a.head_dim;
  const int64_t work = a.batch * a.heads * a.q_len * std::max<int64_t>(a.kv_len, 1) * d_head;

#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(parallel_threads(work))
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t length = a.kv_len;
      if (a.kv_lengths != nullptr) length = std::clamp<int64_t>(a.kv_lengths[b], 0, a.kv_len);
      const int64_t group = a.kv_heads > 0 ? a.heads / a.kv_heads : 1;  // query heads per K/V head
      const int64_t kv_head = h / group, kv_heads = a.heads / group;
      const bool compressed = a.storage != KvStorage::kSame;
      const float k_scale = compressed ? a.k_scale[b * kv_heads + kv_head] : 1.0f;
      const float v_scale = compressed ? a.v_scale[b * kv_heads + kv_head] : 1.0f;
      // The panels hold every key some row can see: with the causal mask the last row sees the most.
      std::vector<float> k_panel(static_cast<size_t>(length * d_head)), v_panel(k_panel.size());
      for (int64_t j = 0; j < length; ++j) {
        const int64_t row = (b * attention_kv_batch_rows(a) + j) * a.kv_ld + kv_head * d_head;
        for (int64_t d = 0; d < d_head; ++d) {
          k_panel[j * d_head + d] = load_kv(a.k, a, row + d) * k_scale;
          v_panel[j * d_head + d] = load_kv(a.v, a, row + d) * v_scale;
        }
      }
      std::vector<float> q_row(static_cast<size_t>(d_head)), scores(static_cast<size_t>(length)),
          acc(static_cast<size_t>(d_head));
      for (int64_t i = 0; i < a.q_len; ++i) {
        const int64_t q_row_index = (b * a.q_len + i) * a.q_ld + h * d_head;
        const int64_t out_row_index = (b * a.q_len + i) * a.out_ld + h * d_head;
        int64_t visible = length, first = 0;  // keys [first, visible)
        if (a.causal) visible = std::clamp<int64_t>(length - a.q_len + i + 1, 0, length);
        if (a.window > 0) first = std::clamp<int64_t>(visible - a.window, 0, visible);
        std::fill(acc.begin(), acc.end(), 0.0f);
        if (visible > first) {
          for (int64_t d = 0; d < d_head; ++d) q_row[d] = load_float(a.q, a.dtype, q_row_index + d);
          float row_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = first; j < visible; ++j) {
            float dot = 0.0f;
            for (int64_t d = 0; d < d_head; ++d) dot += q_row[d] * k_panel[j * d_head + d];
            scores[j] = a.scale * dot;
            row_max = std::max(row_max, scores[j]);
          }
          float sum = 0.0f;
          for (int64_t j = first; j < visible; ++j) {
            scores[j] = std::exp(scores[j] - row_max);
            sum += scores[j];
          }
          for (int64_t j = first; j < visible; ++j) {
            const float w = scores[j] / sum;
            for (int64_t d = 0; d < d_head; ++d) acc[d] += w * v_panel[j * d_head + d];
          }
        }
        for (int64_t d = 0; d < d_head; ++d) store_float(a.out, a.dtype, out_row_index + d, acc[d]);
      }
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
