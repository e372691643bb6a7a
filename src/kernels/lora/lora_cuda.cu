// LoRA deltas on the GPU (see lora_cuda.h): a shrink launch (one warp per row and rank index: a dot product of the
// row with A_s's row, 16-byte loads) and an expand launch (one thread per row and output column: B_s's row of k
// values against the row's k shrink values).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/lora/lora_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kShrinkWarps = 8;

template <typename T>
__device__ __forceinline__ float dot_row(const T* x, const T* w, int64_t in, int lane) {
  float acc = 0.0f;
  if constexpr (sizeof(T) == 2) {
    acc = dot16_lane(x, w, in, lane);
  } else {
    for (int64_t c = lane; c < in; c += 32) acc = fmaf(x[c], w[c], acc);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

// Warp w of CTA (j block, row) computes t[row][j] for j = blockIdx.x * kShrinkWarps + w.
template <typename T>
__global__ void __launch_bounds__(32 * kShrinkWarps) shrink_kernel(LoraCudaArgs p) {
  const int64_t row = blockIdx.y;
  const int slot = p.row_slot[row];
  if (slot < 0) return;
  const int rank = p.ranks[slot * p.param_stride];
  const int64_t j = int64_t{blockIdx.x} * kShrinkWarps + threadIdx.x / 32;
  if (j >= rank) return;
  const T* a = static_cast<const T*>(p.a) + slot * p.a_slot_stride + j * p.in;
  const T* x = static_cast<const T*>(p.x) + row * p.x_ld;
  const float v = dot_row(x, a, p.in, threadIdx.x % 32);
  if (threadIdx.x % 32 == 0) p.t[row * p.r_max + j] = v;
}

template <typename T, typename TY>
__global__ void expand_kernel(LoraCudaArgs p) {
  const int64_t row = blockIdx.y;
  const int slot = p.row_slot[row];
  if (slot < 0) return;
  const int rank = p.ranks[slot * p.param_stride];
  const int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (rank <= 0 || o >= p.out) return;
  const T* b = static_cast<const T*>(p.b) + slot * p.b_slot_stride + o * p.r_max;
  const float* t = p.t + row * p.r_max;
  float acc = 0.0f;
  for (int j = 0; j < rank; ++j) acc = fmaf(to_f32(b[j]), t[j], acc);
  TY* y = static_cast<TY*>(p.y) + row * p.y_ld + o;
  *y = from_f32<TY>(to_f32(*y) + acc * p.scales[slot * p.param_stride]);
}

template <typename T>
Status launch(const LoraCudaArgs& p, cudaStream_t stream) {
  const dim3 shrink_grid(static_cast<unsigned>((p.r_max + kShrinkWarps - 1) / kShrinkWarps),
                         static_cast<unsigned>(p.rows));
  shrink_kernel<T><<<shrink_grid, 32 * kShrinkWarps, 0, stream>>>(p);
  const dim3 expand_grid(static_cast<unsigned>((p.out + 127) / 128), static_cast<unsigned>(p.rows));
  if (p.y_dtype == DType::kF32) {
    expand_kernel<T, float><<<expand_grid, 128, 0, stream>>>(p);
  } else {
    expand_kernel<T, T><<<expand_grid, 128, 0, stream>>>(p);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace

Status lora_apply_cuda(const LoraCudaArgs& p, cudaStream_t stream) {
  const bool sixteen = p.dtype == DType::kBF16 || p.dtype == DType::kF16;
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  if (p.rows < 0 || p.rows > 65535 || p.in <= 0 || p.out <= 0 || p.r_max <= 0 || p.r_max > kLoraCudaMaxRank ||
      (p.y_dtype != DType::kF32 && p.y_dtype != p.dtype) ||
      (sixteen && (p.in % 8 != 0 || p.x_ld % 8 != 0 || p.a_slot_stride % 8 != 0 || misaligned(p.x) || misaligned(p.a)))) {
    return invalid_argument(
        "lora_apply_cuda: rows 0..65535, r_max 1..256, y in f32 or the input dtype; 16-bit inputs need in, x_ld and "
        "the slot stride multiples of 8 and 16-byte aligned x and A");
  }
  if (p.rows == 0) return ok_status();
  switch (p.dtype) {
    case DType::kBF16: return launch<__nv_bfloat16>(p, stream);
    case DType::kF16: return launch<__half>(p, stream);
    case DType::kF32: return launch<float>(p, stream);
    default: return unimplemented(std::string("lora_apply_cuda in ") + dtype_name(p.dtype));
  }
}

}  // namespace mmserve::kernels
