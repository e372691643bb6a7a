// Patch embedding on CPU: im2col into the caller's scratch, then linear() (one sgemm + bias epilogue).
//
// Row r = (b, py, px) of the im2col matrix holds the patch's pixels in (channel, ky, kx) order, which is
// exactly PyTorch's Conv2d weight [dim, c, p, p] flattened to [dim, c*p*p], so the GEMM is
// scratch [b*np, c*p*p] @ weight^T. Copies are p floats long and read each image row front to back;
// (batch, patch row) pairs run in parallel. Trailing pixels that do not fill a patch are never read.
// Tests: patch_embed_test.cpp (vs a direct 7-loop convolution in double, sizes that are not multiples of
// the patch, with and without bias); bench: patch_embed_bench.cpp (CLIP ViT-B/32, batch 16).
#include <algorithm>

#include "kernels/common/parallel.h"
#include "kernels/gemm/gemm.h"
#include "kernels/patch_embed/patch_embed.h"

namespace mmserve::kernels {

int64_t patch_embed_scratch_floats(int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t patch) {
  MMSERVE_CHECK(patch > 0, "patch_embed: patch must be positive");
  return batch * (height / patch) * (width / patch) * channels * patch * patch;
}

void patch_embed(const Tensor& pixels, const Tensor& weight, const Tensor* bias, int64_t patch, Tensor& out,
                 float* scratch) {
  MMSERVE_CHECK(pixels.dtype() == DType::kF32 && weight.dtype() == DType::kF32 && out.dtype() == DType::kF32,
                "patch_embed: f32 only");
  MMSERVE_CHECK(pixels.dims() == 4 && pixels.is_contiguous(), "patch_embed: pixels must be NCHW contiguous");
  MMSERVE_CHECK(patch > 0, "patch_embed: patch must be positive");
  const int64_t batch = pixels.size(0), channels = pixels.size(1), height = pixels.size(2), width = pixels.size(3);
  MMSERVE_CHECK(weight.dims() == 4 && weight.is_contiguous() && weight.size(1) == channels && weight.size(2) == patch &&
                    weight.size(3) == patch,
                "patch_embed: weight is " + weight.shape_string());
  const int64_t dim = weight.size(0);
  const int64_t grid_h = height / patch, grid_w = width / patch, num_patches = grid_h * grid_w;
  const int64_t patch_len = channels * patch * patch;
  MMSERVE_CHECK(out.dims() == 3 && out.is_contiguous() && out.size(0) == batch && out.size(1) == num_patches &&
                    out.size(2) == dim,
                "patch_embed: out is " + out.shape_string());
  if (batch * num_patches == 0 || dim == 0) return;
  MMSERVE_CHECK(scratch != nullptr, "patch_embed: no scratch");

  const float* src = pixels.data_as<float>();
#pragma omp parallel for collapse(2) schedule(static) num_threads(parallel_threads(batch* num_patches* patch_len))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t py = 0; py < grid_h; ++py) {
      float* patch_rows = scratch + (b * num_patches + py * grid_w) * patch_len;
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t ky = 0; ky < patch; ++ky) {
          const float* image_row = src + ((b * channels + c) * height + py * patch + ky) * width;
          float* dst = patch_rows + (c * patch + ky) * patch;
          for (int64_t px = 0; px < grid_w; ++px) {
            std::copy(image_row + px * patch, image_row + (px + 1) * patch, dst + px * patch_len);
          }
        }
      }
    }
  }

  const Tensor columns(scratch, DType::kF32, {batch * num_patches, patch_len});
  const Tensor weight_matrix = weight.reshape({dim, patch_len});
  Tensor out_matrix = out.reshape({batch * num_patches, dim});
  linear(columns, weight_matrix, bias, out_matrix);
}

}  // namespace mmserve::kernels
