// The two Whisper-specific element-wise steps of whisper_cuda.cpp that no shared kernel does (see the
// declarations at the end of whisper_cuda.h): the decoder's token + learned-position embedding with each
// row's position read from device memory (so a captured decoder step serves every position), and the
// encoder's gelu(conv2) + sinusoidal positions on the f32 residual stream. Both are one pass over [rows, d];
// their CPU twins are the loops of whisper.cpp, and whisper_cuda_test.cpp checks the whole forward against
// HF's goldens.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "models/whisper/whisper_cuda.h"

namespace mmserve::models::whisper_cuda_kernels {
namespace {

using kernels::to_f32;

template <typename T>
__global__ void decoder_embedding_kernel(const int32_t* ids, const int32_t* positions, int64_t n, const T* table,
                                         const T* position_table, int64_t vocab, int64_t max_positions, int64_t d,
                                         float* x) {
  const int64_t r = blockIdx.x;
  int32_t id = ids[r];
  if (id < 0 || id >= vocab) id = 0;  // the host validated the ids; never read memory we do not own
  int64_t p = static_cast<int64_t>(positions[r / n]) + r % n;
  if (p < 0 || p >= max_positions) p = 0;
  const T* tok = table + static_cast<int64_t>(id) * d;
  const T* pos = position_table + p * d;
  float* out = x + r * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[i] = to_f32(tok[i]) + to_f32(pos[i]);
}

template <typename T>
__global__ void encoder_gelu_positions_kernel(float* x, const T* positions, int64_t frames, int64_t d) {
  const int64_t r = blockIdx.x;
  const T* pos = positions + (r % frames) * d;
  float* row = x + r * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = row[i];
    row[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) + to_f32(pos[i]);  // torch's erf gelu
  }
}

int threads_for(int64_t d) {
  return d >= 256 ? 256 : (d >= 128 ? 128 : 64);
}

}  // namespace

Status decoder_embedding(const int32_t* ids, const int32_t* positions, int64_t batch, int64_t n, const void* table,
                         const void* position_table, DType dtype, int64_t vocab, int64_t max_positions, int64_t d,
                         float* x, cudaStream_t stream) {
  const int64_t rows = batch * n;
  if (rows <= 0) return ok_status();
  const dim3 grid(static_cast<unsigned>(rows)), block(threads_for(d));
  switch (dtype) {
    case DType::kF32:
      decoder_embedding_kernel<<<grid, block, 0, stream>>>(ids, positions, n, static_cast<const float*>(table),
                                                           static_cast<const float*>(position_table), vocab,
                                                           max_positions, d, x);
      break;
    case DType::kF16:
      decoder_embedding_kernel<<<grid, block, 0, stream>>>(ids, positions, n, static_cast<const __half*>(table),
                                                           static_cast<const __half*>(position_table), vocab,
                                                           max_positions, d, x);
      break;
    case DType::kBF16:
      decoder_embedding_kernel<<<grid, block, 0, stream>>>(ids, positions, n, static_cast<const __nv_bfloat16*>(table),
                                                           static_cast<const __nv_bfloat16*>(position_table), vocab,
                                                           max_positions, d, x);
      break;
    default: return unimplemented(std::string("decoder embedding in ") + dtype_name(dtype));
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status encoder_gelu_positions(float* x, const void* positions, DType dtype, int64_t batch, int64_t frames, int64_t d,
                              cudaStream_t stream) {
  const int64_t rows = batch * frames;
  if (rows <= 0) return ok_status();
  const dim3 grid(static_cast<unsigned>(rows)), block(threads_for(d));
  switch (dtype) {
    case DType::kF32:
      encoder_gelu_positions_kernel<<<grid, block, 0, stream>>>(x, static_cast<const float*>(positions), frames, d);
      break;
    case DType::kF16:
      encoder_gelu_positions_kernel<<<grid, block, 0, stream>>>(x, static_cast<const __half*>(positions), frames, d);
      break;
    case DType::kBF16:
      encoder_gelu_positions_kernel<<<grid, block, 0, stream>>>(x, static_cast<const __nv_bfloat16*>(positions), frames,
                                                                d);
      break;
    default: return unimplemented(std::string("encoder positions in ") + dtype_name(dtype));
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace mmserve::models::whisper_cuda_kernels
