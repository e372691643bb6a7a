// SwiGLU on the GPU (swiglu_cuda.h): element-wise, a 2-D grid (column packs x rows, rows looping past 65535).
// Each thread moves kVec consecutive elements per access: 8 when gate/up and y are both 16-bit, else 4, when
// cols, both strides and the three pointers allow it (checked on the host); otherwise kVec = 1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/swiglu/swiglu_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kGridRowsMax = 65535;

struct Params {
  const void* gate;
  const void* up;
  int64_t in_ld, rows, cols;
  void* y;
  int64_t y_ld;
};

template <typename Tin, typename Ty, int kVec>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(Params p) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (col >= p.cols) return;
  for (int64_t row = blockIdx.y; row < p.rows; row += gridDim.y) {
    const Pack<Tin, kVec> g = *reinterpret_cast<const Pack<Tin, kVec>*>(static_cast<const Tin*>(p.gate) + row * p.in_ld + col);
    const Pack<Tin, kVec> u = *reinterpret_cast<const Pack<Tin, kVec>*>(static_cast<const Tin*>(p.up) + row * p.in_ld + col);
    Pack<Ty, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float gv = to_f32(g.v[k]);
      out.v[k] = from_f32<Ty>(gv / (1.0f + expf(-gv)) * to_f32(u.v[k]));
    }
    *reinterpret_cast<Pack<Ty, kVec>*>(static_cast<Ty*>(p.y) + row * p.y_ld + col) = out;
  }
}

bool aligned_to(const void* pointer, size_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

template <typename Tin, typename Ty, int kVec>
void launch(const Params& p, cudaStream_t stream) {
  const int64_t packs = (p.cols + kVec - 1) / kVec;
  const dim3 grid(static_cast<unsigned>((packs + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min(p.rows, kGridRowsMax)));
  swiglu_kernel<Tin, Ty, kVec><<<grid, kThreads, 0, stream>>>(p);
}

template <typename Tin, typename Ty>
Status launch_typed(const Params& p, cudaStream_t stream) {
  constexpr int kWide = sizeof(Tin) == 2 && sizeof(Ty) == 2 ? 8 : 4;
  const bool vectorised = p.cols % kWide == 0 && p.in_ld % kWide == 0 && p.y_ld % kWide == 0 &&
                          aligned_to(p.gate, kWide * sizeof(Tin)) && aligned_to(p.up, kWide * sizeof(Tin)) &&
                          aligned_to(p.y, kWide * sizeof(Ty));
  if (vectorised) {
    launch<Tin, Ty, kWide>(p, stream);
  } else {
    launch<Tin, Ty, 1>(p, stream);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename Tin>
Status launch_for_y(const Params& p, DType y_dtype, cudaStream_t stream) {
  switch (y_dtype) {
    case DType::kF32: return launch_typed<Tin, float>(p, stream);
    case DType::kF16: return launch_typed<Tin, __half>(p, stream);
    default: return launch_typed<Tin, __nv_bfloat16>(p, stream);
  }
}

}  // namespace

Status swiglu_cuda(const SwigluArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(validate_swiglu(a));
  if (a.rows * a.cols == 0) return ok_status();
  const size_t in_size = dtype_size(a.in_dtype), y_size = dtype_size(a.y_dtype);
  if (!aligned_to(a.gate, in_size) || !aligned_to(a.up, in_size) || !aligned_to(a.y, y_size)) {
    return invalid_argument("swiglu_cuda: a pointer is not aligned to its element size");
  }
  if (a.cols > (int64_t{1} << 40)) return invalid_argument("swiglu_cuda: too many columns");
  const Params p{a.gate, a.up, a.in_ld, a.rows, a.cols, a.y, a.y_ld};
  switch (a.in_dtype) {
    case DType::kF32: return launch_for_y<float>(p, a.y_dtype, stream);
    case DType::kF16: return launch_for_y<__half>(p, a.y_dtype, stream);
    default: return launch_for_y<__nv_bfloat16>(p, a.y_dtype, stream);
  }
}

}  // namespace mmserve::kernels
