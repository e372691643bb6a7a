// Tests of patch_embed() against a direct convolution (the 7-loop definition of Conv2d with
// stride == kernel == patch) in double, under the flash-attention rule.
//
// Cases: image sizes that are not multiples of the patch (3x37x50, patch 8: the trailing rows and columns
// must be ignored), with and without bias, a 1x1 patch, and the CLIP 224/32 geometry; plus the scratch size.
#include "kernels/patch_embed/patch_embed.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::expect_within_naive_error;
using test_util::random_floats;

struct PatchCase {
  int64_t batch = 0, channels = 0, height = 0, width = 0, patch = 0, dim = 0;
  bool bias = true;
};

void check_patch_embed(const PatchCase& c, uint32_t seed) {
  SCOPED_TRACE(std::to_string(c.batch) + "x" + std::to_string(c.channels) + "x" + std::to_string(c.height) + "x" +
               std::to_string(c.width) + " patch " + std::to_string(c.patch) + " dim " + std::to_string(c.dim));
  const int64_t gh = c.height / c.patch, gw = c.width / c.patch, np = gh * gw;
  std::vector<float> pixels = random_floats(c.batch * c.channels * c.height * c.width, seed);
  std::vector<float> weight = random_floats(c.dim * c.channels * c.patch * c.patch, seed + 1, -0.1f, 0.1f);
  std::vector<float> bias = random_floats(c.dim, seed + 2);

  // out[b, py * gw + px, o] = bias[o] + sum_{c, ky, kx} w[o, c, ky, kx] * pixels[b, c, py*p + ky, px*p + kx]
  std::vector<double> reference(c.batch * np * c.dim);
  std::vector<float> naive(reference.size());
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t py = 0; py < gh; ++py) {
      for (int64_t px = 0; px < gw; ++px) {
        for (int64_t o = 0; o < c.dim; ++o) {
          double acc = c.bias ? bias[o] : 0.0;
          float acc_f = c.bias ? bias[o] : 0.0f;
          for (int64_t ch = 0; ch < c.channels; ++ch) {
            for (int64_t ky = 0; ky < c.patch; ++ky) {
              for (int64_t kx = 0; kx < c.patch; ++kx) {
                const float w = weight[((o * c.channels + ch) * c.patch + ky) * c.patch + kx];
                const float p =
                    pixels[((b * c.channels + ch) * c.height + py * c.patch + ky) * c.width + px * c.patch + kx];
                acc += static_cast<double>(w) * p;
                acc_f += w * p;
              }
            }
          }
          reference[(b * np + py * gw + px) * c.dim + o] = acc;
          naive[(b * np + py * gw + px) * c.dim + o] = acc_f;
        }
      }
    }
  }

  std::vector<float> scratch(patch_embed_scratch_floats(c.batch, c.channels, c.height, c.width, c.patch));
  std::vector<float> ours(reference.size(), -1.0f);
  const Tensor pt(pixels.data(), DType::kF32, {c.batch, c.channels, c.height, c.width});
  const Tensor wt(weight.data(), DType::kF32, {c.dim, c.channels, c.patch, c.patch});
  const Tensor bt(bias.data(), DType::kF32, {c.dim});
  Tensor out(ours.data(), DType::kF32, {c.batch, np, c.dim});
  patch_embed(pt, wt, c.bias ? &bt : nullptr, c.patch, out, scratch.data());
  expect_within_naive_error(ours, naive, reference, 1e-6, "patch_embed");
}

TEST(PatchEmbedTest, ScratchSizeIsTheIm2colMatrix) {
  EXPECT_EQ(patch_embed_scratch_floats(2, 3, 37, 50, 8), 2 * (4 * 6) * (3 * 8 * 8));
  EXPECT_EQ(patch_embed_scratch_floats(16, 3, 224, 224, 32), 16 * 49 * 3072);
  EXPECT_EQ(patch_embed_scratch_floats(1, 3, 7, 7, 8), 0);
}

TEST(PatchEmbedTest, NonMultipleSizesIgnoreTrailingPixels) {
  check_patch_embed({2, 3, 37, 50, 8, 17}, 1);
}

TEST(PatchEmbedTest, WithoutBias) {
  check_patch_embed({3, 3, 37, 50, 8, 5, /*bias=*/false}, 11);
}

TEST(PatchEmbedTest, OnePixelPatches) {
  check_patch_embed({1, 2, 5, 3, 1, 4}, 21);
}

TEST(PatchEmbedTest, ClipVitB32Geometry) {
  check_patch_embed({1, 3, 224, 224, 32, 64, false}, 31);
}

TEST(PatchEmbedTest, ImageSmallerThanOnePatchIsANoOp) {
  std::vector<float> pixels(size_t{3} * size_t{7} * 7, 1.0f), weight(size_t{4} * size_t{3} * size_t{8} * 8, 1.0f);
  const Tensor pt(pixels.data(), DType::kF32, {1, 3, 7, 7});
  const Tensor wt(weight.data(), DType::kF32, {4, 3, 8, 8});
  Tensor out(nullptr, DType::kF32, {1, 0, 4});
  patch_embed(pt, wt, nullptr, 8, out, nullptr);
}

}  // namespace
}  // namespace mmserve::kernels
