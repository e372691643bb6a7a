// Tests of mask_resize_threshold_cuda() against its CPU twin mask_resize_threshold(): the masks must be EQUAL
// byte for byte (both compute every output with the same float32 operations, see mask_resize.h), over odd
// shapes: upscaling and downscaling in both resizes, crops narrower than the pad size, a pad equal to the input
// (torch's copy case), a second resize to the crop's own size, 1-pixel sides, k = 1 and 3, and thresholds other
// than 0. Logits are random with a share of exact zeros and values next to the threshold (so a wrongly rounded
// intermediate shows). Also: broken shapes are kInvalidArgument before any launch. Skipped, with the reason,
// where no GPU is visible.
#include "kernels/mask_resize/mask_resize_cuda.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/mask_resize/mask_resize.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;

std::vector<float> test_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 11 == 0 ? 0.0f : i % 13 == 0 ? 1e-7f * dist(rng) : dist(rng);
  return v;
}

void check(const MaskResizeShape& s, float threshold, uint32_t seed) {
  SCOPED_TRACE("k=" + std::to_string(s.k) + " in=" + std::to_string(s.in_h) + "x" + std::to_string(s.in_w) +
               " pad=" + std::to_string(s.pad_h) + "x" + std::to_string(s.pad_w) + " crop=" + std::to_string(s.crop_h) +
               "x" + std::to_string(s.crop_w) + " out=" + std::to_string(s.out_h) + "x" + std::to_string(s.out_w) +
               " threshold=" + std::to_string(threshold));
  const std::vector<float> logits = test_logits(static_cast<size_t>(s.k) * s.in_h * s.in_w, seed);
  std::vector<uint8_t> want(static_cast<size_t>(s.k) * s.out_h * s.out_w);
  mask_resize_threshold(logits.data(), s, threshold, want.data());

  const DeviceVector<float> d_logits(logits);
  DeviceVector<uint8_t> d_out(want.size());
  ASSERT_NE(d_logits.get(), nullptr);
  ASSERT_NE(d_out.get(), nullptr);
  ASSERT_CUDA_OK(cudaMemset(d_out.get(), 7, want.size()));  // every byte must be written
  const Status status = mask_resize_threshold_cuda(d_logits.get(), s, threshold, d_out.get(), nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = d_out.download();
  size_t differ = 0, first = want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      ++differ;
      if (first == want.size()) first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << "first at " << first << " of " << want.size();
}

TEST(MaskResizeCuda, EqualsCpuTwinOverOddShapes) {
  MMSERVE_REQUIRE_GPU();
  // {k, in_h, in_w, pad_h, pad_w, crop_h, crop_w, out_h, out_w}
  const MaskResizeShape shapes[] = {
      {3, 256, 256, 1024, 1024, 683, 1024, 427, 640},   // a click on a 640 x 427 photo (SAM at 1024 px)
      {3, 256, 256, 1024, 1024, 1024, 768, 1600, 1200}, // portrait, second resize upscales
      {1, 16, 16, 64, 64, 64, 64, 64, 64},              // square, second resize the identity (copy case)
      {1, 16, 16, 16, 16, 9, 16, 37, 71},               // pad == input: the first resize is a copy
      {1, 7, 5, 29, 31, 13, 30, 3, 2},                  // odd everything, downscale
      {3, 1, 1, 8, 8, 1, 1, 5, 9},                      // 1-pixel sides
      {2, 32, 32, 128, 128, 128, 100, 1, 1},            // one output pixel
      {1, 256, 256, 1024, 1024, 17, 1024, 11, 700},     // a very wide image
  };
  uint32_t seed = 1;
  for (const MaskResizeShape& s : shapes) {
    check(s, 0.0f, seed++);
    check(s, 0.5f, seed++);
  }
}

TEST(MaskResizeCuda, BrokenShapesAreInvalidArgument) {
  MMSERVE_REQUIRE_GPU();
  const DeviceVector<float> logits(64);
  DeviceVector<uint8_t> out(64);
  const MaskResizeShape good{1, 4, 4, 8, 8, 8, 8, 8, 8};
  MaskResizeShape crop_too_big = good;
  crop_too_big.crop_w = 9;
  MaskResizeShape no_masks = good;
  no_masks.k = 0;
  MaskResizeShape negative = good;
  negative.out_h = -1;
  for (const MaskResizeShape& s : {crop_too_big, no_masks, negative}) {
    const Status status = mask_resize_threshold_cuda(logits.get(), s, 0.0f, out.get(), nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  }
  EXPECT_EQ(mask_resize_threshold_cuda(nullptr, good, 0.0f, out.get(), nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mask_resize_threshold_cuda(logits.get(), good, 0.0f, out.get(), nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mmserve::kernels
