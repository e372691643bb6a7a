// Patch embedding: a Conv2d with kernel == stride == patch (ViT's first layer, no bias in CLIP), computed
// as im2col + one GEMM.
//
// Contract: pixels [batch, channels, height, width] f32 NCHW contiguous; weight [dim, channels, patch, patch]
// f32 (PyTorch Conv2d layout, used as a [dim, channels*patch*patch] matrix); bias [dim] or nullptr;
// out [batch, (height/patch) * (width/patch), dim], patches in row-major (y, x) order, as HF's
// `flatten(2).transpose(1, 2)`. height and width need not be multiples of patch: as in PyTorch's conv, any
// trailing rows/columns that do not fill a patch are ignored. `scratch` holds
// patch_embed_scratch_floats() floats (the im2col matrix).
// Tests: patch_embed_test.cpp (vs a direct convolution loop); bench: patch_embed_bench.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmserve::kernels {

int64_t patch_embed_scratch_floats(int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t patch);
void patch_embed(const Tensor& pixels, const Tensor& weight, const Tensor* bias, int64_t patch, Tensor& out,
                 float* scratch);

}  // namespace mmserve::kernels
