// RoPE on the CPU (see rope.h). The frequencies follow transformers 5's modeling_rope_utils in float32; the
// rotation computes cos/sin per (row, frequency) once for all heads of the row.
#include <cmath>

#include "core/status.h"
#include "kernels/common/cpu_elements.h"
#include "kernels/common/parallel.h"
#include "kernels/rope/rope.h"

namespace mmserve::kernels {
namespace {

std::vector<float> default_inv_freq(int64_t head_dim, double base) {
  // 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)): float32 exponent, float32 power.
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  return inv;
}

}  // namespace

std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s, int64_t max_position_embeddings,
                                 int64_t seq_len) {
  MMSERVE_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_inv_freq: head_dim must be even");
  if (s.type == "linear") {
    std::vector<float> inv = default_inv_freq(head_dim, theta);
    for (float& f : inv) f /= static_cast<float>(s.factor);
    return inv;
  }
  if (s.type == "dynamic") {
    if (seq_len <= max_position_embeddings) return default_inv_freq(head_dim, theta);
    const double d = static_cast<double>(head_dim);
    const double base =
        theta * std::pow(s.factor * static_cast<double>(seq_len) / static_cast<double>(max_position_embeddings) -
                             (s.factor - 1.0),
                         d / (d - 2.0));
    return default_inv_freq(head_dim, base);
  }
  std::vector<float> inv = default_inv_freq(head_dim, theta);
  if (s.type != "llama3") return inv;
  // _compute_llama3_parameters, in float32 tensors with Python-float scalars.
  const float factor = static_cast<float>(s.factor), low = static_cast<float>(s.low_freq_factor),
              high = static_cast<float>(s.high_freq_factor);
  const float old_context = static_cast<float>(s.original_max_position_embeddings);
  const float low_wavelen = old_context / low, high_wavelen = old_context / high;
  constexpr float kTwoPi = 6.283185307179586f;
  for (float& f : inv) {
    const float wavelen = kTwoPi / f;
    float scaled = wavelen > low_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float smooth = (old_context / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

void apply_rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_dim, const int32_t* positions,
                const float* inv_freq) {
  MMSERVE_CHECK(rows >= 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0 && ld >= heads * head_dim,
                "apply_rope: bad shape");
  MMSERVE_CHECK(rows == 0 || (x != nullptr && positions != nullptr && inv_freq != nullptr), "apply_rope: null");
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows * heads * head_dim * 8))
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> cos_f(static_cast<size_t>(half)), sin_f(static_cast<size_t>(half));
    const float pos = static_cast<float>(positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float f = pos * inv_freq[i];
      cos_f[i] = std::cos(f);
      sin_f[i] = std::sin(f);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * ld + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * cos_f[i] - x2 * sin_f[i];
        v[i + half] = x2 * cos_f[i] + x1 * sin_f[i];
      }
    }
  }
}

Status validate_rope(const RopeArgs& a) {
  if (!cpu::is_float_dtype(a.dtype)) return unimplemented("apply_rope: x must be f32, f16 or bf16");
  if (a.rows < 0 || a.heads <= 0 || a.head_dim <= 0 || a.head_dim % 2 != 0 || a.ld < a.heads * a.head_dim) {
    return invalid_argument("apply_rope: need rows >= 0, heads > 0, even head_dim > 0, ld >= heads * head_dim");
  }
  if (a.rows > 0 && (a.x == nullptr || a.positions == nullptr || a.inv_freq == nullptr)) {
    return invalid_argument("apply_rope: null x, positions or inv_freq");
  }
  return ok_status();
}

Status apply_rope(const RopeArgs& a) {
  RETURN_IF_ERROR(validate_rope(a));
  const int64_t half = a.head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(parallel_threads(a.rows * a.heads * a.head_dim * 8))
  for (int64_t r = 0; r < a.rows; ++r) {
    std::vector<float> cos_f(static_cast<size_t>(half)), sin_f(static_cast<size_t>(half));
    const float pos = static_cast<float>(a.positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float f = pos * a.inv_freq[i];
      cos_f[i] = std::cos(f);
      sin_f[i] = std::sin(f);
    }
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t at = r * a.ld + h * a.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = cpu::load_float(a.x, a.dtype, at + i), x2 = cpu::load_float(a.x, a.dtype, at + i + half);
        cpu::store_float(a.x, a.dtype, at + i, x1 * cos_f[i] - x2 * sin_f[i]);
        cpu::store_float(a.x, a.dtype, at + i + half, x2 * cos_f[i] + x1 * sin_f[i]);
      }
    }
  }
  return ok_status();
}

Status apply_rope_and_cache(const RopeArgs& a, const PagedKvWriteArgs& kv) {
  if (kv.num_tokens != a.rows || kv.dtype != a.dtype) {
    return invalid_argument("apply_rope_and_cache: the cache write must cover the rotated rows, in their dtype");
  }
  RETURN_IF_ERROR(apply_rope(a));
  return paged_kv_write_cpu(kv);
}

}  // namespace mmserve::kernels
