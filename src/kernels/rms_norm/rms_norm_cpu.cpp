// rms_norm on the CPU (see rms_norm.h): one pass for the sum of squares, one for the scaling, rows over OpenMP.
// The dtype-generic twin converts a segment to f32, applies the same f32 formula and rounds once at the end.
#include <cmath>
#include <vector>

#include "core/status.h"
#include "kernels/common/cpu_elements.h"
#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"
#include "kernels/rms_norm/rms_norm.h"

namespace mmserve::kernels {

MMSERVE_CPU_CLONES
void rms_norm(const float* x, int64_t x_ld, const float* weight, int64_t rows, int64_t cols, float eps, float* y,
              int64_t y_ld) {
  MMSERVE_CHECK(rows >= 0 && cols > 0 && x_ld >= cols && y_ld >= cols, "rms_norm: bad shape");
  MMSERVE_CHECK(rows == 0 || (x != nullptr && weight != nullptr && y != nullptr), "rms_norm: null pointer");
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * x_ld;
    float* out = y + r * y_ld;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += in[c] * in[c];
    // HF: hidden * torch.rsqrt(variance + eps), then weight * hidden.
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(cols) + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) out[c] = weight[c] * (in[c] * inv);
  }
}

Status validate_rms_norm(const RmsNormArgs& a) {
  if (!cpu::is_float_dtype(a.x_dtype) || !cpu::is_float_dtype(a.y_dtype)) {
    return unimplemented("rms_norm: x and y must be f32, f16 or bf16");
  }
  if (a.rows < 0 || a.cols <= 0 || a.segments <= 0) {
    return invalid_argument("rms_norm: need rows >= 0, cols > 0, segments > 0");
  }
  if (a.x_ld < a.segments * a.cols || a.y_ld < a.segments * a.cols) {
    return invalid_argument("rms_norm: x_ld and y_ld must be >= segments * cols");
  }
  if (!(a.eps >= 0.0f) || !std::isfinite(a.eps)) return invalid_argument("rms_norm: eps must be finite and >= 0");
  if (a.rows == 0) return ok_status();
  if (a.x == nullptr || a.weight == nullptr || a.y == nullptr) return invalid_argument("rms_norm: null pointer");
  if (a.y == a.x && (a.x_dtype != a.y_dtype || a.x_ld != a.y_ld)) {
    return invalid_argument("rms_norm: y may alias x only with the same dtype and stride");
  }
  return ok_status();
}

Status rms_norm(const RmsNormArgs& a) {
  RETURN_IF_ERROR(validate_rms_norm(a));
  std::vector<float> w(static_cast<size_t>(a.cols));
  for (int64_t c = 0; c < a.cols; ++c) w[c] = cpu::load_float(a.weight, a.y_dtype, c);
#pragma omp parallel for schedule(static) num_threads(parallel_threads(a.rows * a.segments * a.cols))
  for (int64_t r = 0; r < a.rows; ++r) {
    std::vector<float> v(static_cast<size_t>(a.cols));
    for (int64_t s = 0; s < a.segments; ++s) {
      const int64_t x_at = r * a.x_ld + s * a.cols, y_at = r * a.y_ld + s * a.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < a.cols; ++c) {
        v[c] = cpu::load_float(a.x, a.x_dtype, x_at + c);
        sum += v[c] * v[c];
      }
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(a.cols) + a.eps);
      for (int64_t c = 0; c < a.cols; ++c) cpu::store_float(a.y, a.y_dtype, y_at + c, w[c] * (v[c] * inv));
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
