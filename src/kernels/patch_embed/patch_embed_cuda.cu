// ViT patch embedding on the GPU (patch_embed_cuda.h): the im2col gather before the GEMM, and the
// class-token + position assembly after it.
//
// im2col: one block per patch (output row), grid-stride over rows; the block's threads walk the row's
// channels * p * p columns in packs of kVec, so consecutive threads write consecutive output (fully
// coalesced) and, within one image row of the patch (p pixels, contiguous in both arrays), read consecutive
// pixels; for p = 32 each such run is one whole 128-byte line. kVec is the largest of 4, 2, 1 that divides
// both p and size and suits the alignment of both pointers (checked at run time), so a pack never crosses
// a patch row: p = 32 or 16 moves 16-byte float4 reads, p = 14 8-byte ones.
// assemble: one warp per output row, 8 rows to a block, packs of 4 (16-byte f32 reads and writes) when
// hidden and the pointers allow, else scalar. Both are exact: a conversion, or one f32 addition.
// No allocation, sync or host reads: graph-capturable.
// Tests: patch_embed_cuda_test.cpp; bench: patch_embed_cuda_bench.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_status.h"
#include "kernels/patch_embed/patch_embed_cuda.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kIm2colThreadsMax = 256;
constexpr int64_t kIm2colBlocksMax = 65536;
constexpr int kAssembleRowsPerBlock = 8;
constexpr int kAssembleThreads = kWarp * kAssembleRowsPerBlock;

struct Im2colShape {
  int64_t rows;  // batch * patches_per_image
  int channels, size, patch;
  int grid_w;             // size / patch
  int patches_per_image;  // grid_w^2
  int patch_len;          // channels * patch * patch
};

// Row r = (b, py, px) of `patches`, column k = (c, ky, kx) <- pixels[b, c, py * p + ky, px * p + kx].
template <typename T, int kVec>
__global__ void __launch_bounds__(kIm2colThreadsMax) im2col_kernel(const float* pixels, Im2colShape s, T* patches) {
  const int area = s.patch * s.patch;
  const int64_t image_floats = static_cast<int64_t>(s.channels) * s.size * s.size;
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const int64_t b = r / s.patches_per_image;
    const int in_image = static_cast<int>(r - b * s.patches_per_image);
    const int py = in_image / s.grid_w, px = in_image - py * s.grid_w;
    const float* image = pixels + b * image_floats;
    T* out = patches + r * s.patch_len;
    for (int k = static_cast<int>(threadIdx.x) * kVec; k < s.patch_len; k += static_cast<int>(blockDim.x) * kVec) {
      const int c = k / area;
      const int in_channel = k - c * area;
      const int ky = in_channel / s.patch, kx = in_channel - ky * s.patch;
      const int64_t pixel = (static_cast<int64_t>(c) * s.size + py * s.patch + ky) * s.size + px * s.patch + kx;
      const Pack<float, kVec> in = *reinterpret_cast<const Pack<float, kVec>*>(image + pixel);
      Pack<T, kVec> converted;
#pragma unroll
      for (int i = 0; i < kVec; ++i) converted.v[i] = from_f32<T>(in.v[i]);
      *reinterpret_cast<Pack<T, kVec>*>(out + k) = converted;
    }
  }
}

// out[:] = f32(src[:]) + f32(position[:]) over one row of `hidden`, by the 32 lanes of a warp.
template <int kVec, typename S, typename T>
__device__ __forceinline__ void add_row(const S* src, const T* position, int64_t hidden, float* out) {
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * kVec; j < hidden; j += kWarp * kVec) {
    const Pack<S, kVec> a = *reinterpret_cast<const Pack<S, kVec>*>(src + j);
    const Pack<T, kVec> b = *reinterpret_cast<const Pack<T, kVec>*>(position + j);
    Pack<float, kVec> sum;
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum.v[i] = to_f32(a.v[i]) + to_f32(b.v[i]);
    *reinterpret_cast<Pack<float, kVec>*>(out + j) = sum;
  }
}

// blockDim = (32, kAssembleRowsPerBlock): threadIdx.y picks the output row.
template <typename T, int kVec>
__global__ void __launch_bounds__(kAssembleThreads)
    assemble_kernel(const float* patch_out, const T* class_embedding, const T* positions, int64_t rows, int64_t patches,
                    int64_t hidden, float* x) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kAssembleRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int64_t b = row / (patches + 1), token = row - b * (patches + 1);
  const T* position = positions + token * hidden;
  float* out = x + row * hidden;
  if (token == 0) {
    add_row<kVec>(class_embedding, position, hidden, out);
  } else {
    add_row<kVec>(patch_out + (b * patches + token - 1) * hidden, position, hidden, out);
  }
}

bool aligned_to(const void* pointer, size_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

bool is_compute_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

template <typename T>
Status launch_im2col(const float* pixels, const Im2colShape& s, void* patches, cudaStream_t stream) {
  T* out = static_cast<T*>(patches);
  int vec = 1;
  for (const int candidate : {4, 2}) {
    if (s.patch % candidate == 0 && s.size % candidate == 0 && aligned_to(pixels, candidate * sizeof(float)) &&
        aligned_to(patches, candidate * sizeof(T))) {
      vec = candidate;
      break;
    }
  }
  // One thread per pack up to 256 (p = 32: 768 packs, 3 trips). (Spreading them evenly over up to 512
  // threads measured 6% slower on the H200 at ViT-B/32 batch 256.)
  const int packs = s.patch_len / vec;  // vec divides patch, so patch_len
  const int threads = std::min(kIm2colThreadsMax, (packs + kWarp - 1) / kWarp * kWarp);
  const auto blocks = static_cast<unsigned>(std::min(s.rows, kIm2colBlocksMax));
  switch (vec) {
    case 4: im2col_kernel<T, 4><<<blocks, threads, 0, stream>>>(pixels, s, out); break;
    case 2: im2col_kernel<T, 2><<<blocks, threads, 0, stream>>>(pixels, s, out); break;
    default: im2col_kernel<T, 1><<<blocks, threads, 0, stream>>>(pixels, s, out); break;
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T>
Status launch_assemble(const float* patch_out, const void* class_embedding, const void* positions, int64_t batch,
                       int64_t patches, int64_t hidden, float* x, cudaStream_t stream) {
  constexpr int kVec = 4;
  const T* class_t = static_cast<const T*>(class_embedding);
  const T* positions_t = static_cast<const T*>(positions);
  const int64_t rows = batch * (patches + 1);
  const dim3 block(kWarp, kAssembleRowsPerBlock);
  const auto blocks = static_cast<unsigned>((rows + kAssembleRowsPerBlock - 1) / kAssembleRowsPerBlock);
  const bool vectorised = hidden % kVec == 0 && aligned_to(patch_out, 16) && aligned_to(x, 16) &&
                          aligned_to(class_embedding, kVec * sizeof(T)) && aligned_to(positions, kVec * sizeof(T));
  if (vectorised) {
    assemble_kernel<T, kVec><<<blocks, block, 0, stream>>>(patch_out, class_t, positions_t, rows, patches, hidden, x);
  } else {
    assemble_kernel<T, 1><<<blocks, block, 0, stream>>>(patch_out, class_t, positions_t, rows, patches, hidden, x);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace

Status im2col_patches_cuda(const float* pixels, int64_t batch, int64_t channels, int64_t size, int64_t patch,
                           void* patches, DType dtype, cudaStream_t stream) {
  if (!is_compute_dtype(dtype)) return unimplemented("im2col_patches_cuda: dtype must be f32, f16 or bf16");
  if (batch < 0 || channels <= 0 || size <= 0 || patch <= 0) {
    return invalid_argument("im2col_patches_cuda: need batch >= 0 and channels, size, patch > 0");
  }
  if (size % patch != 0) return invalid_argument("im2col_patches_cuda: size must be a multiple of patch");
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  const int64_t grid_w = size / patch;
  // Keeps every per-image quantity the kernel computes in int well within range (CLIP: 224, 3 * 32 * 32).
  if (batch > kIntMax || size > 65536 || channels > 65536 || channels * patch * patch > (int64_t{1} << 24) ||
      grid_w * grid_w > kIntMax) {
    return invalid_argument("im2col_patches_cuda: image too large");
  }
  if (batch == 0) return ok_status();
  if (pixels == nullptr || patches == nullptr) return invalid_argument("im2col_patches_cuda: null pixels or patches");
  if (!aligned_to(pixels, 4) || !aligned_to(patches, dtype_size(dtype))) {
    return invalid_argument("im2col_patches_cuda: a pointer is not aligned to its element size");
  }
  const Im2colShape s{batch * grid_w * grid_w,
                      static_cast<int>(channels),
                      static_cast<int>(size),
                      static_cast<int>(patch),
                      static_cast<int>(grid_w),
                      static_cast<int>(grid_w * grid_w),
                      static_cast<int>(channels * patch * patch)};
  switch (dtype) {
    case DType::kF32: return launch_im2col<float>(pixels, s, patches, stream);
    case DType::kF16: return launch_im2col<__half>(pixels, s, patches, stream);
    case DType::kBF16: return launch_im2col<__nv_bfloat16>(pixels, s, patches, stream);
    default: break;
  }
  return unimplemented("im2col_patches_cuda: dtype must be f32, f16 or bf16");
}

Status assemble_vision_embeddings_cuda(const float* patch_out, const void* class_embedding, const void* positions,
                                       DType dtype, int64_t batch, int64_t patches, int64_t hidden, float* x,
                                       cudaStream_t stream) {
  if (!is_compute_dtype(dtype)) {
    return unimplemented("assemble_vision_embeddings_cuda: dtype must be f32, f16 or bf16");
  }
  if (batch < 0 || patches < 0 || hidden <= 0) {
    return invalid_argument("assemble_vision_embeddings_cuda: need batch, patches >= 0 and hidden > 0");
  }
  if (batch == 0) return ok_status();
  if (batch > std::numeric_limits<int32_t>::max() / (patches + 1)) {
    return invalid_argument("assemble_vision_embeddings_cuda: batch * (patches + 1) too large");
  }
  if ((patches > 0 && patch_out == nullptr) || class_embedding == nullptr || positions == nullptr || x == nullptr) {
    return invalid_argument("assemble_vision_embeddings_cuda: null patch_out, class_embedding, positions or x");
  }
  const size_t size = dtype_size(dtype);
  if (!aligned_to(patch_out, 4) || !aligned_to(class_embedding, size) || !aligned_to(positions, size) ||
      !aligned_to(x, 4)) {
    return invalid_argument("assemble_vision_embeddings_cuda: a pointer is not aligned to its element size");
  }
  switch (dtype) {
    case DType::kF32:
      return launch_assemble<float>(patch_out, class_embedding, positions, batch, patches, hidden, x, stream);
    case DType::kF16:
      return launch_assemble<__half>(patch_out, class_embedding, positions, batch, patches, hidden, x, stream);
    case DType::kBF16:
      return launch_assemble<__nv_bfloat16>(patch_out, class_embedding, positions, batch, patches, hidden, x, stream);
    default: break;
  }
  return unimplemented("assemble_vision_embeddings_cuda: dtype must be f32, f16 or bf16");
}

}  // namespace mmserve::kernels
