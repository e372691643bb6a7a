// im2col for a 1-D convolution on CPU: the twin of im2col_1d_cuda (contract in im2col_1d.h). Plain loops,
// parallel over output rows.
// Tests: im2col_1d_test.cpp, im2col_1d_cuda_test.cpp.
#include <string>

#include "kernels/common/cpu_elements.h"
#include "kernels/common/parallel.h"
#include "kernels/conv1d/im2col_1d.h"

namespace mmserve::kernels {
namespace {

using cpu::is_float_dtype;
using cpu::load_float;
using cpu::store_float;


}  // namespace

int64_t im2col_1d_out_frames(int64_t frames, int64_t kernel, int64_t stride, int64_t padding) {
  if (frames <= 0 || kernel <= 0 || stride <= 0 || padding < 0) return 0;
  const int64_t span = frames + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

Status im2col_1d_validate(const Im2col1dArgs& a) {
  if (!is_float_dtype(a.in_dtype) || !is_float_dtype(a.out_dtype)) {
    return invalid_argument("im2col_1d: in_dtype and out_dtype must be f32, f16 or bf16");
  }
  if (a.batch < 0 || a.channels < 0 || a.frames < 0)
    return invalid_argument("im2col_1d: negative batch, channels or frames");
  if (a.kernel <= 0 || a.stride <= 0 || a.padding < 0) {
    return invalid_argument("im2col_1d: kernel and stride must be positive, padding non-negative");
  }
  const int64_t out_frames = im2col_1d_out_frames(a.frames, a.kernel, a.stride, a.padding);
  if (a.batch == 0 || a.channels == 0 || out_frames == 0) return ok_status();
  if (a.out_ld < a.channels * a.kernel) return invalid_argument("im2col_1d: out_ld must be >= channels * kernel");
  if (a.channels_last && a.in_ld < a.channels) return invalid_argument("im2col_1d: in_ld must be >= channels");
  if (a.input == nullptr || a.out == nullptr) return invalid_argument("im2col_1d: input or out is null");
  return ok_status();
}

Status im2col_1d_cpu(const Im2col1dArgs& a) {
  RETURN_IF_ERROR(im2col_1d_validate(a));
  const int64_t out_frames = im2col_1d_out_frames(a.frames, a.kernel, a.stride, a.padding);
  if (a.batch == 0 || a.channels == 0 || out_frames == 0) return ok_status();
  const int64_t rows = a.batch * out_frames;
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows* a.channels* a.kernel))
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / out_frames, t = row % out_frames;
    for (int64_t c = 0; c < a.channels; ++c) {
      for (int64_t k = 0; k < a.kernel; ++k) {
        const int64_t f = t * a.stride + k - a.padding;
        float value = 0.0f;
        if (f >= 0 && f < a.frames) {
          const int64_t index =
              a.channels_last ? (b * a.frames + f) * a.in_ld + c : (b * a.channels + c) * a.frames + f;
          value = load_float(a.input, a.in_dtype, index);
        }
        store_float(a.out, a.out_dtype, row * a.out_ld + c * a.kernel + k, value);
      }
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
