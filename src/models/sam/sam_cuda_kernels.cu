// SAM's layout and element-wise kernels (see sam_cuda_kernels.h): one thread per output element (or per 2- or
// 4-byte word), grid-stride loops, 32-bit indices (every launcher checks its size).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "models/sam/sam_cuda_kernels.h"

namespace mmserve::models {
namespace {

using kernels::from_f32;

constexpr int kThreads = 256;

constexpr int64_t kIndexMax = 2147483647;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// 32-bit index arithmetic (the integer divisions dominate these kernels); the launchers check n < 2^31.
#define SAM_GRID_STRIDE(i, n) \
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

template <typename E>
__global__ void window_partition_kernel(const E* src, int batch, int grid, int window, int cols,
                                        const E* pad, E* dst) {
  const int side = (grid + window - 1) / window, per_image = side * side * window * window;
  SAM_GRID_STRIDE(i, batch * per_image * cols) {
    const int col = i % cols, row = i / cols;
    const int b = row / per_image, r = row % per_image;
    const int w = r / (window * window), t = r % (window * window);
    const int y = (w / side) * window + t / window, x = (w % side) * window + t % window;
    E v;
    if (y < grid && x < grid) {
      v = src[((b * grid + y) * grid + x) * cols + col];
    } else {
      v = pad != nullptr ? pad[col] : E(0);
    }
    dst[i] = v;
  }
}

template <typename E>
__global__ void window_unpartition_kernel(const E* src, int batch, int grid, int window, int cols,
                                          E* dst) {
  const int side = (grid + window - 1) / window, per_image = side * side * window * window;
  SAM_GRID_STRIDE(i, batch * grid * grid * cols) {
    const int col = i % cols, row = i / cols;
    const int b = row / (grid * grid), p = row % (grid * grid), y = p / grid, x = p % grid;
    const int w = (y / window) * side + x / window, t = (y % window) * window + x % window;
    dst[i] = src[(b * per_image + w * window * window + t) * cols + col];
  }
}

template <typename E>
__global__ void im2col_3x3_kernel(const E* src, int batch, int grid, int channels, E* columns) {
  SAM_GRID_STRIDE(i, batch * grid * grid * 9 * channels) {
    const int c = i % channels, k = (i / channels) % 9, row = i / (9 * channels);
    const int b = row / (grid * grid), p = row % (grid * grid);
    const int sy = p / grid + k / 3 - 1, sx = p % grid + k % 3 - 1;
    columns[i] = sy < 0 || sy >= grid || sx < 0 || sx >= grid ? E(0) : src[((b * grid + sy) * grid + sx) * channels + c];
  }
}

template <typename T>
__global__ void convert_kernel(const float* src, int count, T* dst) {
  SAM_GRID_STRIDE(i, count) dst[i] = from_f32<T>(src[i]);
}

__global__ void transpose_kernel(const float* src, int batch, int rows, int cols, float* dst) {
  SAM_GRID_STRIDE(i, batch * rows * cols) {
    const int r = i % rows, c = (i / rows) % cols, b = i / (rows * cols);
    dst[i] = src[(b * rows + r) * cols + c];
  }
}

__global__ void add_kernel(const float* a, const float* b, int rows, int b_rows, int cols, float* out) {
  SAM_GRID_STRIDE(i, rows * cols) {
    const int r = i / cols, c = i % cols;
    out[i] = a[i] + b[(r % b_rows) * cols + c];
  }
}

__global__ void relu_kernel(float* x, int count) {
  SAM_GRID_STRIDE(i, count) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void conv_transpose_scatter_kernel(const float* tmp, const float* bias, int height, int width,
                                              int channels, float* out) {
  SAM_GRID_STRIDE(i, 4 * height * width * channels) {
    const int c = i % channels, p = i / channels, oy = p / (2 * width), ox = p % (2 * width);
    const int d = (oy % 2) * 2 + ox % 2;
    out[i] = tmp[((oy / 2) * width + ox / 2) * 4 * channels + d * channels + c] + bias[c];
  }
}

__global__ void space_to_depth_kernel(const float* src, int height, int width, int channels, float* dst) {
  const int h2 = height / 2, w2 = width / 2;
  SAM_GRID_STRIDE(i, h2 * w2 * channels * 4) {
    const int col = i % (4 * channels), p = i / (4 * channels);
    const int c = col / 4, ky = (col / 2) % 2, kx = col % 2, y = p / w2, x = p % w2;
    dst[i] = src[((2 * y + ky) * width + 2 * x + kx) * channels + c];
  }
}

Status check_size(int64_t n) {
  return n <= kIndexMax ? ok_status() : unimplemented("SAM layout kernel: more than 2^31 elements");
}

template <typename Launch>
Status by_element(int element_bytes, Launch&& launch) {
  if (element_bytes == 2) {
    launch(uint16_t{});
  } else if (element_bytes == 4) {
    launch(uint32_t{});
  } else {
    return invalid_argument("SAM layout kernel: element_bytes must be 2 or 4");
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace

Status sam_window_partition_cuda(const void* src, int64_t batch, int64_t grid, int64_t window, int64_t cols,
                                 const void* pad, void* dst, int element_bytes, cudaStream_t stream) {
  const int64_t side = (grid + window - 1) / window, n = batch * side * side * window * window * cols;
  RETURN_IF_ERROR(check_size(n));
  return by_element(element_bytes, [&](auto e) {
    using E = decltype(e);
    window_partition_kernel<E><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const E*>(src), batch, grid, window, cols, static_cast<const E*>(pad), static_cast<E*>(dst));
  });
}

Status sam_window_unpartition_cuda(const void* src, int64_t batch, int64_t grid, int64_t window, int64_t cols,
                                   void* dst, int element_bytes, cudaStream_t stream) {
  const int64_t n = batch * grid * grid * cols, side = (grid + window - 1) / window;
  RETURN_IF_ERROR(check_size(batch * side * side * window * window * cols));  // the padded source's indices
  return by_element(element_bytes, [&](auto e) {
    using E = decltype(e);
    window_unpartition_kernel<E><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const E*>(src), batch, grid,
                                                                          window, cols, static_cast<E*>(dst));
  });
}

Status sam_im2col_3x3_cuda(const void* src, int64_t batch, int64_t grid, int64_t channels, void* columns,
                           int element_bytes, cudaStream_t stream) {
  const int64_t n = batch * grid * grid * 9 * channels;
  RETURN_IF_ERROR(check_size(n));
  return by_element(element_bytes, [&](auto e) {
    using E = decltype(e);
    im2col_3x3_kernel<E><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const E*>(src), batch, grid, channels,
                                                                  static_cast<E*>(columns));
  });
}

Status sam_convert_cuda(const float* src, int64_t count, void* dst, DType dtype, cudaStream_t stream) {
  RETURN_IF_ERROR(check_size(count));
  if (dtype == DType::kF32) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return ok_status();
  }
  if (dtype == DType::kF16) {
    convert_kernel<__half><<<blocks_for(count), kThreads, 0, stream>>>(src, count, static_cast<__half*>(dst));
  } else if (dtype == DType::kBF16) {
    convert_kernel<__nv_bfloat16><<<blocks_for(count), kThreads, 0, stream>>>(src, count,
                                                                              static_cast<__nv_bfloat16*>(dst));
  } else {
    return invalid_argument("sam_convert_cuda: f32, f16 or bf16");
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status sam_transpose_cuda(const float* src, int64_t batch, int64_t rows, int64_t cols, float* dst,
                          cudaStream_t stream) {
  RETURN_IF_ERROR(check_size(batch * rows * cols));
  transpose_kernel<<<blocks_for(batch * rows * cols), kThreads, 0, stream>>>(src, batch, rows, cols, dst);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status sam_add_cuda(const float* a, const float* b, int64_t rows, int64_t b_rows, int64_t cols, float* out,
                    cudaStream_t stream) {
  RETURN_IF_ERROR(check_size(rows * cols));
  add_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(a, b, rows, b_rows, cols, out);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status sam_relu_cuda(float* x, int64_t count, cudaStream_t stream) {
  RETURN_IF_ERROR(check_size(count));
  relu_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status sam_conv_transpose_scatter_cuda(const float* tmp, const float* bias, int64_t height, int64_t width,
                                       int64_t channels, float* out, cudaStream_t stream) {
  const int64_t n = 4 * height * width * channels;
  RETURN_IF_ERROR(check_size(n));
  conv_transpose_scatter_kernel<<<blocks_for(n), kThreads, 0, stream>>>(tmp, bias, height, width, channels, out);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status sam_space_to_depth_cuda(const float* src, int64_t height, int64_t width, int64_t channels, float* dst,
                               cudaStream_t stream) {
  const int64_t n = (height / 2) * (width / 2) * channels * 4;
  RETURN_IF_ERROR(check_size(n));
  space_to_depth_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, height, width, channels, dst);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace mmserve::models
