// SAM's layout and element-wise kernels on the GPU (sam_cuda*.cpp's), each the CUDA twin of a step of the CPU
// forward: window_partition / window_unpartition / im2col_3x3 (sam_vision.cpp), the transposed convolution's scatter
// (conv_transpose_2x2 in sam_mask_decoder.cpp), the dense prompt's 2x2 stride-2 convolutions (sam_prompt.cpp, there
// through patch_embed), the channels-first output, and the decoder's adds and ReLU. Layout kernels move raw 2- or
// 4-byte elements (`element_bytes`), so they serve every dtype. All capturable in a CUDA graph.
// Tests: through tests/conformance/sam_cuda_test.cpp (HF goldens), where every one of them runs (padded and unpadded
// windows, the dense mask path, both fixtures' odd channel counts).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::models {

// Token rows [batch * grid * grid, cols] -> padded windows [batch * side^2 * window^2, cols], side = ceil(grid /
// window), windows in (image, wy, wx) order and tokens (iy, ix) within each (HF's window_partition); rows outside
// the grid get `pad` (cols elements) or zeros when pad is null.
Status sam_window_partition_cuda(const void* src, int64_t batch, int64_t grid, int64_t window, int64_t cols,
                                 const void* pad, void* dst, int element_bytes, cudaStream_t stream);
// The inverse (HF's window_unpartition), dropping the padding.
Status sam_window_unpartition_cuda(const void* src, int64_t batch, int64_t grid, int64_t window, int64_t cols,
                                   void* dst, int element_bytes, cudaStream_t stream);
// 3x3 im2col with padding 1 over channels-last rows [batch * grid * grid, channels]: row (y, x) of the result holds
// the 9 neighbours' channel vectors in (ky, kx) order, zeros outside the grid.
Status sam_im2col_3x3_cuda(const void* src, int64_t batch, int64_t grid, int64_t channels, void* columns,
                           int element_bytes, cudaStream_t stream);
// f32 -> dtype (f32, f16, bf16), count elements.
Status sam_convert_cuda(const float* src, int64_t count, void* dst, DType dtype, cudaStream_t stream);
// [batch][rows][cols] -> [batch][cols][rows] (f32).
Status sam_transpose_cuda(const float* src, int64_t batch, int64_t rows, int64_t cols, float* dst, cudaStream_t stream);
// out[r, :] = a[r, :] + b[r % b_rows, :] over [rows, cols] f32 (b_rows 1: a broadcast row). out may alias a.
Status sam_add_cuda(const float* a, const float* b, int64_t rows, int64_t b_rows, int64_t cols, float* out,
                    cudaStream_t stream);
// x = max(x, 0), f32, in place.
Status sam_relu_cuda(float* x, int64_t count, cudaStream_t stream);
// ConvTranspose2d(kernel 2, stride 2)'s scatter: tmp [height * width, 4 * channels] with (dy, dx, c) columns (the
// GEMM of the input rows with the permuted weight) + bias [channels] -> out [(2 height) * (2 width), channels].
Status sam_conv_transpose_scatter_cuda(const float* tmp, const float* bias, int64_t height, int64_t width,
                                       int64_t channels, float* out, cudaStream_t stream);
// Conv2d(kernel 2, stride 2)'s gather over channels-last [height, width, channels] (f32): rows [(height / 2) *
// (width / 2), channels * 4] with (c, ky, kx) columns, the order of a Conv2d weight [out, c, 2, 2] flattened.
Status sam_space_to_depth_cuda(const float* src, int64_t height, int64_t width, int64_t channels, float* dst,
                               cudaStream_t stream);

}  // namespace mmserve::models
