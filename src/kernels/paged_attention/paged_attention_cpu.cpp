// Paged attention and the paged KV write on the CPU: the twins of paged_attention_cuda (contract in
// paged_attention.h), and the attention of the CPU decoders (models/llama), which run small models.
//
// One task per (sequence, head): the sequence's visible K and V rows are gathered through its block table into
// f32 panels once, then each of its new tokens gets its scores, a softmax over its visible keys and the weighted
// sum of V. Plain loops, f32 throughout. The data are checked before anything is read (table entries inside the
// pool, lengths that fit the table), so a bad table is an error, not a read out of bounds. FP8 pools are
// dequantised into the panels (code * scale, kernels/fp8's decode) and quantised by the write through
// fp8_quantize, so the twin is the contract's formula itself.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/cpu_elements.h"
#include "kernels/common/parallel.h"
#include "kernels/fp8/fp8.h"
#include "kernels/paged_attention/paged_attention.h"

namespace mmserve::kernels {

using cpu::is_float_dtype;
using cpu::load_float;
using cpu::store_float;

const char* paged_kv_storage_name(PagedKvStorage storage) {
  switch (storage) {
    case PagedKvStorage::kFp8E4M3: return "fp8_e4m3";
    case PagedKvStorage::kFp8E5M2: return "fp8_e5m2";
    default: return "same";
  }
}

int64_t paged_kv_element_bytes(PagedKvStorage storage, DType dtype) {
  return storage == PagedKvStorage::kSame ? static_cast<int64_t>(dtype_size(dtype)) : 1;
}

namespace {

bool is_fp8(PagedKvStorage s) { return s != PagedKvStorage::kSame; }
Fp8Format fp8_format_of(PagedKvStorage s) {
  return s == PagedKvStorage::kFp8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}

// The storage checks both calls share (`what` names the call).
Status validate_storage(const char* what, PagedKvStorage storage, DType dtype, const float* k_scale,
                        const float* v_scale) {
  if (storage != PagedKvStorage::kSame && storage != PagedKvStorage::kFp8E4M3 && storage != PagedKvStorage::kFp8E5M2) {
    return invalid_argument(std::string(what) + ": unknown kv_storage");
  }
  if (!is_fp8(storage)) return ok_status();
  if (dtype != DType::kF16 && dtype != DType::kBF16) {
    return invalid_argument(std::string(what) + ": an " + paged_kv_storage_name(storage) +
                            " pool needs f16 or bf16 activations, got " + dtype_name(dtype));
  }
  if (k_scale == nullptr || v_scale == nullptr) {
    return invalid_argument(std::string(what) + ": an " + paged_kv_storage_name(storage) +
                            " pool needs k_scale and v_scale");
  }
  return ok_status();
}

// The twin reads the scales on the host: a scale that is not positive and finite is the caller's error.
Status check_scales(const char* what, PagedKvStorage storage, const float* k_scale, const float* v_scale) {
  if (!is_fp8(storage)) return ok_status();
  for (const float s : {*k_scale, *v_scale}) {
    if (!(s > 0.0f) || !std::isfinite(s)) {
      return invalid_argument(std::string(what) + ": k_scale and v_scale must be positive and finite, got " +
                              std::to_string(s));
    }
  }
  return ok_status();
}

}  // namespace

Status paged_attention_validate(const PagedAttentionArgs& a) {
  if (!is_float_dtype(a.dtype)) {
    return invalid_argument(std::string("paged_attention: dtype must be f32, f16 or bf16, got ") +
                            dtype_name(a.dtype));
  }
  RETURN_IF_ERROR(validate_storage("paged_attention", a.kv_storage, a.dtype, a.k_scale, a.v_scale));
  if (a.num_seqs < 0 || a.num_tokens < 0) return invalid_argument("paged_attention: negative num_seqs or num_tokens");
  if (a.num_seqs == 0 || a.num_tokens == 0) return ok_status();
  if (a.heads <= 0 || a.kv_heads <= 0 || a.head_dim <= 0 || a.block_size <= 0 || a.num_blocks <= 0) {
    return invalid_argument("paged_attention: heads, kv_heads, head_dim, block_size and num_blocks must be positive");
  }
  if (a.heads % a.kv_heads != 0) {
    return invalid_argument("paged_attention: heads (" + std::to_string(a.heads) + ") must be a multiple of kv_heads (" +
                            std::to_string(a.kv_heads) + ")");
  }
  if (a.window < 0) return invalid_argument("paged_attention: window must be >= 0");
  const int64_t hidden = a.heads * a.head_dim;
  if (a.q_ld < hidden || a.out_ld < hidden) {
    return invalid_argument("paged_attention: q_ld and out_ld must be >= heads * head_dim (" + std::to_string(hidden) +
                            ")");
  }
  if (a.q == nullptr || a.out == nullptr || a.k_cache == nullptr || a.v_cache == nullptr ||
      a.block_tables == nullptr || a.seq_lens == nullptr || a.query_start == nullptr) {
    return invalid_argument("paged_attention: a pointer is null");
  }
  if (a.block_table_ld <= 0) return invalid_argument("paged_attention: block_table_ld must be positive");
  if (a.max_seq_len <= 0 || a.max_query_len <= 0) {
    return invalid_argument("paged_attention: max_seq_len and max_query_len must be positive");
  }
  if (a.max_seq_len > a.block_table_ld * a.block_size) {
    return invalid_argument("paged_attention: max_seq_len (" + std::to_string(a.max_seq_len) +
                            ") exceeds what a block table row holds (" +
                            std::to_string(a.block_table_ld * a.block_size) + ")");
  }
  if (!std::isfinite(a.scale)) return invalid_argument("paged_attention: scale is not finite");
  return ok_status();
}

Status paged_kv_write_validate(const PagedKvWriteArgs& a) {
  if (!is_float_dtype(a.dtype)) {
    return invalid_argument(std::string("paged_kv_write: dtype must be f32, f16 or bf16, got ") + dtype_name(a.dtype));
  }
  RETURN_IF_ERROR(validate_storage("paged_kv_write", a.kv_storage, a.dtype, a.k_scale, a.v_scale));
  if (a.num_tokens < 0 || a.width < 0) return invalid_argument("paged_kv_write: negative num_tokens or width");
  if (a.num_tokens == 0 || a.width == 0) return ok_status();
  if (a.src_ld < a.width) return invalid_argument("paged_kv_write: src_ld must be >= width");
  if (a.num_slots <= 0) return invalid_argument("paged_kv_write: num_slots must be positive");
  if (a.k == nullptr || a.v == nullptr || a.k_cache == nullptr || a.v_cache == nullptr || a.slot_mapping == nullptr) {
    return invalid_argument("paged_kv_write: a pointer is null");
  }
  return ok_status();
}

namespace {

// The data checks only the host can make (the GPU kernels trust the scheduler's tables).
Status check_tables(const PagedAttentionArgs& a) {
  if (a.query_start[0] != 0) return invalid_argument("paged_attention: query_start[0] must be 0");
  for (int64_t b = 0; b < a.num_seqs; ++b) {
    const int64_t q_len = a.query_start[b + 1] - a.query_start[b], length = a.seq_lens[b];
    if (q_len < 0 || q_len > a.max_query_len) {
      return invalid_argument("paged_attention: sequence " + std::to_string(b) + " has " + std::to_string(q_len) +
                              " new tokens (0.." + std::to_string(a.max_query_len) + ")");
    }
    if (length < q_len || length > a.max_seq_len) {
      return invalid_argument("paged_attention: sequence " + std::to_string(b) + " has length " +
                              std::to_string(length) + " (" + std::to_string(q_len) + ".." +
                              std::to_string(a.max_seq_len) + ")");
    }
    if (q_len == 0) continue;
    for (int64_t i = 0; i * a.block_size < length; ++i) {
      const int32_t block = a.block_tables[b * a.block_table_ld + i];
      if (block < 0 || block >= a.num_blocks) {
        return invalid_argument("paged_attention: sequence " + std::to_string(b) + " names block " +
                                std::to_string(block) + " outside the pool of " + std::to_string(a.num_blocks));
      }
    }
  }
  if (a.query_start[a.num_seqs] != a.num_tokens) {
    return invalid_argument("paged_attention: query_start[num_seqs] must equal num_tokens");
  }
  return ok_status();
}

}  // namespace

Status paged_attention_cpu(const PagedAttentionArgs& a) {
  RETURN_IF_ERROR(paged_attention_validate(a));
  if (a.num_seqs == 0 || a.num_tokens == 0) return ok_status();
  RETURN_IF_ERROR(check_tables(a));
  RETURN_IF_ERROR(check_scales("paged_attention", a.kv_storage, a.k_scale, a.v_scale));
  // One pool element as f32: the stored value, or code * scale.
  const bool fp8 = is_fp8(a.kv_storage);
  const Fp8Format format = fp8_format_of(a.kv_storage);
  const float k_mul = fp8 ? *a.k_scale : 1.0f, v_mul = fp8 ? *a.v_scale : 1.0f;
  auto load_kv = [&](const void* cache, int64_t index, float mul) {
    return fp8 ? fp8_decode(static_cast<const uint8_t*>(cache)[index], format) * mul
               : load_float(cache, a.dtype, index);
  };
  const int64_t d_head = a.head_dim, width = a.kv_heads * a.head_dim, group = a.heads / a.kv_heads;
  const int64_t work = a.num_tokens * a.heads * a.max_seq_len * d_head;

#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(parallel_threads(work))
  for (int64_t b = 0; b < a.num_seqs; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t first_row = a.query_start[b], q_len = a.query_start[b + 1] - first_row, length = a.seq_lens[b];
      if (q_len == 0) continue;
      const int64_t g = h / group;
      // Every key the last new token sees (it sees the most), gathered from the blocks.
      std::vector<float> k_panel(static_cast<size_t>(length * d_head)), v_panel(k_panel.size());
      for (int64_t j = 0; j < length; ++j) {
        const int64_t block = a.block_tables[b * a.block_table_ld + j / a.block_size];
        const int64_t row = (block * a.block_size + j % a.block_size) * width + g * d_head;
        for (int64_t d = 0; d < d_head; ++d) {
          k_panel[j * d_head + d] = load_kv(a.k_cache, row + d, k_mul);
          v_panel[j * d_head + d] = load_kv(a.v_cache, row + d, v_mul);
        }
      }
      std::vector<float> q_row(static_cast<size_t>(d_head)), scores(static_cast<size_t>(length)),
          acc(static_cast<size_t>(d_head));
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t row = first_row + i, position = length - q_len + i;
        const int64_t visible = position + 1;  // keys [first, visible)
        const int64_t first = a.window > 0 ? std::max<int64_t>(visible - a.window, 0) : 0;
        for (int64_t d = 0; d < d_head; ++d) q_row[d] = load_float(a.q, a.dtype, row * a.q_ld + h * d_head + d);
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
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = first; j < visible; ++j) {
          const float w = scores[j] / sum;
          for (int64_t d = 0; d < d_head; ++d) acc[d] += w * v_panel[j * d_head + d];
        }
        for (int64_t d = 0; d < d_head; ++d) store_float(a.out, a.dtype, row * a.out_ld + h * d_head + d, acc[d]);
      }
    }
  }
  return ok_status();
}

Status paged_kv_write_cpu(const PagedKvWriteArgs& a) {
  RETURN_IF_ERROR(paged_kv_write_validate(a));
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    if (a.slot_mapping[t] >= a.num_slots) {
      return invalid_argument("paged_kv_write: slot " + std::to_string(a.slot_mapping[t]) + " outside the pool of " +
                              std::to_string(a.num_slots));
    }
  }
  RETURN_IF_ERROR(check_scales("paged_kv_write", a.kv_storage, a.k_scale, a.v_scale));
  if (is_fp8(a.kv_storage)) {
    // Each row through fp8_quantize: the codes the GPU's write makes (IEEE division, cvt.rn.satfinite).
    const Fp8Format format = fp8_format_of(a.kv_storage);
    std::vector<float> row(static_cast<size_t>(a.width));
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const int64_t slot = a.slot_mapping[t];
      if (slot < 0) continue;
      for (int pass = 0; pass < 2; ++pass) {
        const void* src = pass == 0 ? a.k : a.v;
        for (int64_t c = 0; c < a.width; ++c) row[c] = load_float(src, a.dtype, t * a.src_ld + c);
        uint8_t* dst = static_cast<uint8_t*>(pass == 0 ? a.k_cache : a.v_cache) + slot * a.width;
        fp8_quantize(row.data(), a.width, pass == 0 ? *a.k_scale : *a.v_scale, format, dst);
      }
    }
    return ok_status();
  }
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) continue;
    for (int64_t c = 0; c < a.width; ++c) {
      store_float(a.k_cache, a.dtype, slot * a.width + c, load_float(a.k, a.dtype, t * a.src_ld + c));
      store_float(a.v_cache, a.dtype, slot * a.width + c, load_float(a.v, a.dtype, t * a.src_ld + c));
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
