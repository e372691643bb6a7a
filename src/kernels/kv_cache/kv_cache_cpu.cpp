// KV-cache maintenance on CPU: the twins of kv_cache_cuda (contracts in kv_cache.h), plain loops, plus the
// FP8 E4M3 conversions both sides share semantics with.
//
// The FP8 codes are fp8/fp8.h's (f32_to_fp8_e4m3 and fp8_e4m3_to_f32 in kv_cache.h name them).
// Tests: kv_cache_test.cpp; kv_cache_cuda_test.cpp checks it against CUDA's own conversion and the GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/cpu_elements.h"
#include "kernels/kv_cache/kv_cache.h"

namespace mmserve::kernels {
namespace {

using cpu::is_float_dtype;
using cpu::load_float;


}  // namespace

Status kv_cache_append_validate(const KvCacheAppendArgs& a) {
  if (!is_float_dtype(a.dtype)) return invalid_argument("kv_cache_append: dtype must be f32, f16 or bf16");
  if (a.batch < 0 || a.n < 0 || a.capacity < 0 || a.width < 0) {
    return invalid_argument("kv_cache_append: negative batch, n, capacity or width");
  }
  if (a.batch == 0 || a.n == 0 || a.width == 0) return ok_status();
  if (a.src_ld < a.width) return invalid_argument("kv_cache_append: src_ld must be >= width");
  if (a.k == nullptr || a.k_cache == nullptr) return invalid_argument("kv_cache_append: k or k_cache is null");
  if ((a.v == nullptr) != (a.v_cache == nullptr)) {
    return invalid_argument("kv_cache_append: v and v_cache must both be set or both be null");
  }
  if (a.positions == nullptr) return invalid_argument("kv_cache_append: positions is null");
  return ok_status();
}

Status kv_cache_append_cpu(const KvCacheAppendArgs& a) {
  RETURN_IF_ERROR(kv_cache_append_validate(a));
  if (a.batch == 0 || a.n == 0 || a.width == 0) return ok_status();
  const size_t elem = dtype_size(a.dtype);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t i = 0; i < a.n; ++i) {
      const int64_t pos = static_cast<int64_t>(a.positions[b]) + i;
      if (pos < 0 || pos >= a.capacity) continue;
      const size_t src = static_cast<size_t>((b * a.n + i) * a.src_ld) * elem;
      const size_t dst = static_cast<size_t>((b * a.capacity + pos) * a.width) * elem;
      std::memcpy(static_cast<uint8_t*>(a.k_cache) + dst, static_cast<const uint8_t*>(a.k) + src, a.width * elem);
      if (a.v != nullptr) {
        std::memcpy(static_cast<uint8_t*>(a.v_cache) + dst, static_cast<const uint8_t*>(a.v) + src, a.width * elem);
      }
    }
  }
  return ok_status();
}

size_t kv_cache_gather_scratch_bytes(const KvCacheGatherArgs& a) {
  if (a.src != a.dst || a.batch <= 0 || a.rows <= 0 || a.width <= 0) return 0;
  return static_cast<size_t>(a.batch * a.rows * a.width) * a.element_bytes;
}

Status kv_cache_gather_validate(const KvCacheGatherArgs& a) {
  if (a.element_bytes != 1 && a.element_bytes != 2 && a.element_bytes != 4) {
    return invalid_argument("kv_cache_gather: element_bytes must be 1, 2 or 4");
  }
  if (a.batch < 0 || a.batch_src < 0 || a.capacity < 0 || a.rows < 0 || a.width < 0) {
    return invalid_argument("kv_cache_gather: negative batch, batch_src, capacity, rows or width");
  }
  if (a.rows > a.capacity) return invalid_argument("kv_cache_gather: rows must be <= capacity");
  if (a.batch == 0 || a.rows == 0 || a.width == 0) return ok_status();
  if (a.src == nullptr || a.dst == nullptr || a.src_index == nullptr) {
    return invalid_argument("kv_cache_gather: src, dst or src_index is null");
  }
  if (a.src == a.dst) {
    if (a.batch > a.batch_src) return invalid_argument("kv_cache_gather: in place needs batch <= batch_src");
    if (a.scratch == nullptr || a.scratch_bytes < kv_cache_gather_scratch_bytes(a)) {
      return invalid_argument("kv_cache_gather: in place needs scratch of " +
                              std::to_string(kv_cache_gather_scratch_bytes(a)) + " bytes");
    }
  }
  return ok_status();
}

Status kv_cache_gather_cpu(const KvCacheGatherArgs& a) {
  RETURN_IF_ERROR(kv_cache_gather_validate(a));
  if (a.batch == 0 || a.rows == 0 || a.width == 0) return ok_status();
  for (int64_t i = 0; i < a.batch; ++i) {
    if (a.src_index[i] < 0 || a.src_index[i] >= a.batch_src) {
      return invalid_argument("kv_cache_gather: src_index[" + std::to_string(i) + "] = " +
                              std::to_string(a.src_index[i]) + " outside [0, " + std::to_string(a.batch_src) + ")");
    }
  }
  const size_t block = static_cast<size_t>(a.rows * a.width) * a.element_bytes;
  const size_t batch_bytes = static_cast<size_t>(a.capacity * a.width) * a.element_bytes;
  // In place: the rows are copied out first (a destination row may be the source of a later one).
  std::vector<uint8_t> staged(a.src == a.dst ? block * a.batch : 0);
  for (int64_t i = 0; i < a.batch; ++i) {
    const uint8_t* from = static_cast<const uint8_t*>(a.src) + a.src_index[i] * batch_bytes;
    uint8_t* to = a.src == a.dst ? staged.data() + i * block : static_cast<uint8_t*>(a.dst) + i * batch_bytes;
    std::memcpy(to, from, block);
  }
  if (a.src == a.dst) {
    for (int64_t i = 0; i < a.batch; ++i) {
      std::memcpy(static_cast<uint8_t*>(a.dst) + i * batch_bytes, staged.data() + i * block, block);
    }
  }
  return ok_status();
}

Status quantize_kv_validate(const QuantizeKvArgs& a) {
  if (!is_float_dtype(a.dtype)) return invalid_argument("quantize_kv: dtype must be f32, f16 or bf16");
  if (a.storage != KvStorage::kFp8E4M3 && a.storage != KvStorage::kInt8) {
    return invalid_argument("quantize_kv: storage must be kFp8E4M3 or kInt8");
  }
  if (a.batch < 0 || a.rows < 0 || a.heads < 0 || a.head_dim < 0) {
    return invalid_argument("quantize_kv: negative batch, rows, heads or head_dim");
  }
  if (a.batch == 0 || a.heads == 0) return ok_status();
  if (a.scale == nullptr) return invalid_argument("quantize_kv: scale is null");
  if (a.rows == 0 || a.head_dim == 0) return ok_status();
  const int64_t width = a.heads * a.head_dim;
  if (a.src_ld < width || a.dst_ld < width) return invalid_argument("quantize_kv: src_ld and dst_ld must be >= width");
  if (a.dst_batch_stride < a.rows) return invalid_argument("quantize_kv: dst_batch_stride must be >= rows");
  if (a.src == nullptr || a.dst == nullptr) return invalid_argument("quantize_kv: src or dst is null");
  return ok_status();
}

Status quantize_kv_cpu(const QuantizeKvArgs& a) {
  RETURN_IF_ERROR(quantize_kv_validate(a));
  if (a.batch == 0 || a.heads == 0) return ok_status();
  const float range = a.storage == KvStorage::kFp8E4M3 ? 448.0f : 127.0f;
  uint8_t* dst = static_cast<uint8_t*>(a.dst);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      float absmax = 0.0f;
      for (int64_t r = 0; r < a.rows; ++r) {
        for (int64_t d = 0; d < a.head_dim; ++d) {
          absmax =
              std::max(absmax, std::fabs(load_float(a.src, a.dtype, (b * a.rows + r) * a.src_ld + h * a.head_dim + d)));
        }
      }
      const float scale = absmax / range;
      a.scale[b * a.heads + h] = scale;
      for (int64_t r = 0; r < a.rows; ++r) {
        for (int64_t d = 0; d < a.head_dim; ++d) {
          const float x = load_float(a.src, a.dtype, (b * a.rows + r) * a.src_ld + h * a.head_dim + d);
          uint8_t& out = dst[(b * a.dst_batch_stride + r) * a.dst_ld + h * a.head_dim + d];
          if (scale == 0.0f) {
            out = 0;
          } else if (a.storage == KvStorage::kFp8E4M3) {
            out = f32_to_fp8_e4m3(x / scale);
          } else {
            const float q = std::clamp(std::nearbyint(x / scale), -127.0f, 127.0f);
            out = static_cast<uint8_t>(static_cast<int8_t>(q));
          }
        }
      }
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
