// expand_pixel_levels_cuda against its CPU twin: bit-equal (a lookup) over odd planes (scalar path), planes of
// multiples of 4 (vector path), offset pointers (scalar path again), 1 and 3 channels, n up to 64; broken shapes
// are kInvalidArgument before any launch. Skipped, with the reason, where no GPU is visible.
#include "kernels/pixel_levels/pixel_levels_cuda.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/pixel_levels/pixel_levels.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;

void check(int64_t n, int64_t channels, int64_t plane, int64_t shift, uint32_t seed) {
  SCOPED_TRACE("n=" + std::to_string(n) + " channels=" + std::to_string(channels) + " plane=" +
               std::to_string(plane) + " shift=" + std::to_string(shift));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> table(static_cast<size_t>(channels * 256));
  for (float& v : table) v = dist(rng);
  const size_t count = static_cast<size_t>(n * channels * plane);
  std::vector<uint8_t> levels(count + shift);
  for (uint8_t& l : levels) l = static_cast<uint8_t>(rng());
  std::vector<float> want(count);
  expand_pixel_levels(levels.data() + shift, n, channels, plane, table.data(), want.data());

  const DeviceVector<uint8_t> d_levels(levels);
  const DeviceVector<float> d_table(table);
  DeviceVector<float> d_out(count + shift);
  ASSERT_CUDA_OK(cudaMemset(d_out.get(), 0xff, (count + shift) * sizeof(float)));  // NaNs: every value must be written
  const Status st = expand_pixel_levels_cuda(d_levels.get() + shift, n, channels, plane, d_table.get(),
                                             d_out.get() + shift, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = d_out.download();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i + shift], want[i]) << "at " << i;
}

TEST(PixelLevelsCuda, EqualsCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int64_t channels : {1, 3}) {
    for (int64_t plane : {1, 3, 4, 17, 224 * 224, 1024 * 1024 + 1}) {
      for (int64_t shift : {0, 1}) check(plane > 100000 ? 2 : 5, channels, plane, shift, seed++);
    }
  }
  check(64, 3, 224 * 224, 0, seed++);  // a server batch of ViT-B/32 images
  check(0, 3, 50, 0, seed++);
}

TEST(PixelLevelsCuda, BrokenShapesAreInvalidArgument) {
  MMSERVE_REQUIRE_GPU();
  const DeviceVector<uint8_t> levels(16);
  const DeviceVector<float> table(256 * 3);
  DeviceVector<float> out(16);
  EXPECT_EQ(expand_pixel_levels_cuda(levels.get(), -1, 3, 4, table.get(), out.get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(expand_pixel_levels_cuda(levels.get(), 1, 0, 4, table.get(), out.get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(expand_pixel_levels_cuda(levels.get(), 1, 9, 4, table.get(), out.get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(expand_pixel_levels_cuda(nullptr, 1, 3, 4, table.get(), out.get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(expand_pixel_levels_cuda(levels.get(), 1, 3, 4, table.get(), out.get(), nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mmserve::kernels
