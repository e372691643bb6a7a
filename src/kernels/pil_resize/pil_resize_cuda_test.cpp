// pil_resize_cuda against its CPU twin, byte for byte: the CLIP geometry (shortest edge 224, centre crop 224,
// and a crop larger than the resized image so it pads) and SAM's (longest edge 1024, padded bottom/right) over
// a grid of sizes (identity, up- and downscaling, 1xN and Nx1 strips, odd sizes), every pass combination, in
// batches of 1, 7, 64 and 130 (two launches) mixing sizes; every output byte must be written (the output starts
// as 0xab) and nothing past it. Broken batches are kInvalidArgument before any launch. Skipped, with the
// reason, where no GPU is visible.
#include "kernels/pil_resize/pil_resize_cuda.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kernels/pil_resize/pil_resize.h"
#include "kernels/pil_resize/pil_resize_test_util.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using pil_resize_test::HostBatch;

constexpr int kGuard = 64;  // bytes after the output that must stay untouched

void expect_equal_to_cpu(const HostBatch& hb, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<uint8_t> scratch(static_cast<size_t>(hb.scratch_bytes));
  std::vector<uint8_t> want(hb.out_bytes());
  const Status cpu = pil_resize_cpu(hb.batch(hb.src.data(), hb.tables.data(), scratch.data(), want.data()));
  ASSERT_TRUE(cpu.ok()) << cpu.to_string();

  const DeviceVector<uint8_t> d_src(hb.src);
  const DeviceVector<int32_t> d_tables(hb.tables);
  DeviceVector<uint8_t> d_scratch(static_cast<size_t>(hb.scratch_bytes));
  DeviceVector<uint8_t> d_out(hb.out_bytes() + kGuard);
  ASSERT_CUDA_OK(cudaMemset(d_out.get(), 0xab, hb.out_bytes() + kGuard));
  const Status st = pil_resize_cuda(hb.batch(d_src.get(), d_tables.get(), d_scratch.get(), d_out.get()), nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = d_out.download();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i;
  for (size_t i = want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0xab) << "written past the end";
}

pil_resize_test::TableFn table_for(double support_base) {
  return [support_base](int in, int out, int start, int count) {
    return pil_resize_test::pil_like_table(in, out, start, count, support_base,
                                           static_cast<uint32_t>(in * 131 + out * 7 + start));
  };
}

// Source sizes of the grid: identity (224x224, 1024x768 for SAM), strips, odd sizes, up- and downscaling.
const std::pair<int, int> kSizes[] = {{224, 224},   {1, 1},     {1, 300},   {300, 1},   {640, 480}, {480, 640},
                                      {223, 225},   {225, 223}, {17, 333},  {999, 101}, {100, 50},  {1024, 768},
                                      {1500, 1000}, {37, 2000}, {224, 300}, {13, 7}};

void add_clip(HostBatch& hb, int w, int h, uint32_t seed, int edge, double support) {
  const auto [rw, rh] = pil_resize_test::shortest_edge_resized(w, h, edge);
  hb.add(pil_resize_test::random_pixels(w, h, seed), w, h,
         pil_resize_test::center_crop_placement(rw, rh, hb.out_w, hb.out_h), table_for(support));
}

void add_sam(HostBatch& hb, int w, int h, uint32_t seed) {
  const auto [rw, rh] = pil_resize_test::longest_edge_resized(w, h, hb.out_w);
  if (rw < 1 || rh < 1) return;  // SAM refuses these (an empty resize)
  hb.add(pil_resize_test::random_pixels(w, h, seed), w, h, pil_resize_test::pad_placement(rw, rh), table_for(1.0));
}

TEST(PilResizeCuda, ClipGeometryEqualsCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (double support : {1.0, 2.0}) {
    for (const auto& [w, h] : kSizes) {
      HostBatch hb(224, 224);
      add_clip(hb, w, h, seed++, 224, support);
      expect_equal_to_cpu(hb, "clip " + std::to_string(w) + "x" + std::to_string(h));
      HostBatch padded(240, 160);  // shortest edge 200: pads along x, crops along y
      add_clip(padded, w, h, seed++, 200, support);
      expect_equal_to_cpu(padded, "clip padded " + std::to_string(w) + "x" + std::to_string(h));
    }
  }
}

TEST(PilResizeCuda, SamGeometryEqualsCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (const auto& [w, h] : kSizes) {
    HostBatch hb(1024, 1024);
    add_sam(hb, w, h, seed++);
    if (!hb.images.empty()) expect_equal_to_cpu(hb, "sam " + std::to_string(w) + "x" + std::to_string(h));
  }
}

TEST(PilResizeCuda, EveryPassCombinationEqualsCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  // Resized sizes chosen so that each pass runs alone, both, or none; windows cropped and padded.
  HostBatch hb(48, 40);
  const int sizes[][4] = {{40, 30, 40, 30}, {40, 30, 64, 30}, {40, 30, 40, 80}, {40, 30, 23, 17},
                          {1, 37, 1, 20},   {37, 1, 60, 1},   {500, 3, 48, 40}, {3, 500, 48, 40}};
  uint32_t seed = 7;
  for (const auto& s : sizes) {
    hb.add(pil_resize_test::random_pixels(s[0], s[1], seed), s[0], s[1],
           pil_resize_test::center_crop_placement(s[2], s[3], 48, 40), table_for(seed % 2 ? 1.0 : 2.0));
    ++seed;
  }
  hb.add(pil_resize_test::random_pixels(13, 9, seed), 13, 9, pil_resize_test::Placement{30, 20, 3, 20, 5, 2, 11, 7},
         table_for(1.0));
  hb.add(pil_resize_test::random_pixels(13, 9, seed), 13, 9, pil_resize_test::Placement{30, 20, 0, 0, 0, 0, 0, 0},
         table_for(1.0));
  expect_equal_to_cpu(hb, "pass combinations");
}

TEST(PilResizeCuda, MixedBatchesEqualCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  for (int n : {1, 7, 64, 130}) {
    HostBatch clip(224, 224);
    for (int i = 0; i < n; ++i) {
      const auto& [w, h] = kSizes[static_cast<size_t>(i) % std::size(kSizes)];
      add_clip(clip, w, h, static_cast<uint32_t>(1000 + i), 224, i % 2 ? 1.0 : 2.0);
    }
    expect_equal_to_cpu(clip, "clip batch " + std::to_string(n));
  }
  for (int n : {1, 7}) {
    HostBatch sam(1024, 1024);
    for (int i = 0; i < n; ++i) {
      const auto& [w, h] = kSizes[static_cast<size_t>(i * 5 + 3) % std::size(kSizes)];
      add_sam(sam, w, h, static_cast<uint32_t>(2000 + i));
    }
    expect_equal_to_cpu(sam, "sam batch " + std::to_string(n));
  }
}

TEST(PilResizeCuda, BrokenBatchesAreInvalidArgument) {
  MMSERVE_REQUIRE_GPU();
  HostBatch hb(16, 16);
  add_clip(hb, 20, 10, 1, 16, 2.0);
  const DeviceVector<uint8_t> src(hb.src);
  const DeviceVector<int32_t> tables(hb.tables);
  DeviceVector<uint8_t> scratch(static_cast<size_t>(hb.scratch_bytes)), out(hb.out_bytes());
  const PilResizeBatch good = hb.batch(src.get(), tables.get(), scratch.get(), out.get());
  EXPECT_TRUE(pil_resize_cuda(good, nullptr).ok());
  PilResizeBatch b = good;
  b.out_height = 70000;  // beyond a grid's y
  EXPECT_EQ(pil_resize_cuda(b, nullptr).code(), StatusCode::kInvalidArgument);
  b = good;
  b.scratch_bytes -= 1;
  EXPECT_EQ(pil_resize_cuda(b, nullptr).code(), StatusCode::kInvalidArgument);
  b = good;
  b.src = nullptr;
  EXPECT_EQ(pil_resize_cuda(b, nullptr).code(), StatusCode::kInvalidArgument);
  b = good;
  b.n = 0;
  EXPECT_TRUE(pil_resize_cuda(b, nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mmserve::kernels
