// swiglu on the CPU (see swiglu.h): the branch-free sigmoid of common/cpu_math.h so the loop vectorises.
#include "core/status.h"
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

}  // namespace mmserve::kernels
