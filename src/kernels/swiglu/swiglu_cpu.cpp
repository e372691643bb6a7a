// swiglu on the CPU (see swiglu.h): the branch-free sigmoid of common/cpu_math.h so the loop vectorises; the
// dtype-generic twin is a plain reference loop (g / (1 + exp(-g)) * u in f32, one rounding to y_dtype).
#include <cmath>

#include "core/status.h"
#include "kernels/common/cpu_elements.h"
#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"
#include "kernels/swiglu/swiglu.h"

namespace mmserve::kernels {

MMSERVE_CPU_CLONES
void swiglu(const float* gate, const float* up, int64_t in_ld, int64_t rows, int64_t cols, float* y, int64_t y_ld) {
  MMSERVE_CHECK(rows >= 0 && cols >= 0 && in_ld >= cols && y_ld >= cols, "swiglu: bad shape");
  MMSERVE_CHECK(rows * cols == 0 || (gate != nullptr && up != nullptr && y != nullptr), "swiglu: null pointer");
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * in_ld;
    const float* u = up + r * in_ld;
    float* out = y + r * y_ld;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) out[c] = g[c] * cpu::sigmoid_f32(g[c]) * u[c];
  }
}

Status validate_swiglu(const SwigluArgs& a) {
  if (!cpu::is_float_dtype(a.in_dtype) || !cpu::is_float_dtype(a.y_dtype)) {
    return unimplemented("swiglu: gate, up and y must be f32, f16 or bf16");
  }
  if (a.rows < 0 || a.cols < 0 || a.in_ld < a.cols || a.y_ld < a.cols) return invalid_argument("swiglu: bad shape");
  if (a.rows * a.cols == 0) return ok_status();
  if (a.gate == nullptr || a.up == nullptr || a.y == nullptr) return invalid_argument("swiglu: null pointer");
  if (a.y == a.up) return invalid_argument("swiglu: y may not alias up");
  if (a.y == a.gate && (a.y_dtype != a.in_dtype || a.y_ld != a.in_ld)) {
    return invalid_argument("swiglu: y may alias gate only with the same dtype and stride");
  }
  return ok_status();
}

Status swiglu(const SwigluArgs& a) {
  RETURN_IF_ERROR(validate_swiglu(a));
#pragma omp parallel for schedule(static) num_threads(parallel_threads(a.rows * a.cols))
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < a.cols; ++c) {
      const float g = cpu::load_float(a.gate, a.in_dtype, r * a.in_ld + c);
      const float u = cpu::load_float(a.up, a.in_dtype, r * a.in_ld + c);
      cpu::store_float(a.y, a.y_dtype, r * a.y_ld + c, g / (1.0f + std::exp(-g)) * u);
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
