// rms_norm on the CPU (see rms_norm.h): one pass for the sum of squares, one for the scaling, rows over OpenMP.
#include <cmath>

#include "core/status.h"
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

}  // namespace mmserve::kernels
