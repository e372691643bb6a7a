// The GPU image path's arithmetic against the image frontend's: kernels/pil_resize's CPU twin (the CUDA kernel's
// byte-for-byte reference, pil_resize_cuda_test.cpp) fed the frontend's own tables (detail::pil_resample_coeffs)
// gives exactly the frontend's 8-bit levels:
//  - CLIP: resize_and_crop + to_pixel_levels, bilinear and bicubic, shortest edge 224 + crop 224 (identity,
//    upscaling, downscaling, 1xN and Nx1 strips, odd sizes), shortest edge 192 + crop 224x160 (the resized image
//    smaller than the crop along one axis: zero padding), and no resize + crop 224 (small images padded);
//  - SAM: resize_pil to sam_resized_size (longest edge 1024) padded with zeros to 1024x1024, and those levels
//    through the pixel-value table are preprocess_sam's model input (0.0 in the padding).
// Each configuration runs as one mixed batch (every size in one call).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "frontends/image/preprocess.h"
#include "frontends/image/resample.h"
#include "frontends/image/sam_preprocess.h"
#include "kernels/pil_resize/pil_resize.h"
#include "kernels/pil_resize/pil_resize_test_util.h"

namespace mmserve::image {
namespace {

using kernels::pil_resize_test::HostBatch;

kernels::pil_resize_test::TableFn frontend_tables(int resample) {
  return [resample](int in, int out, int start, int count) {
    const detail::ResampleCoeffs c = detail::pil_resample_coeffs(in, out, resample, detail::Span1d{start, count});
    return kernels::pil_resize_test::AxisTable{c.ksize, c.xmin, c.count, c.k};
  };
}

RgbImage random_image(int width, int height, uint32_t seed) {
  return RgbImage{width, height, kernels::pil_resize_test::random_pixels(width, height, seed)};
}

// The twin's output for a whole batch.
std::vector<uint8_t> run_twin(const HostBatch& hb) {
  std::vector<uint8_t> scratch(static_cast<size_t>(hb.scratch_bytes)), out(hb.out_bytes(), 0xab);
  const Status st = kernels::pil_resize_cpu(hb.batch(hb.src.data(), hb.tables.data(), scratch.data(), out.data()));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

const std::pair<int, int> kClipSizes[] = {
    {224, 224}, {1, 1}, {1, 300},    {300, 1},  {640, 480}, {480, 640}, {223, 225}, {225, 223}, {17, 333},  {999, 101},
    {100, 50},  {2, 3}, {1000, 999}, {1, 5000}, {5000, 2},  {224, 300}, {50, 224},  {7, 13},    {191, 192}, {193, 160}};

void expect_clip_levels(const ClipPreprocessConfig& config, const std::string& what) {
  SCOPED_TRACE(what);
  HostBatch hb(config.crop_width, config.crop_height);
  std::vector<RgbImage> images;
  uint32_t seed = 11;
  for (const auto& [w, h] : kClipSizes) {
    images.push_back(random_image(w, h, seed++));
    const std::array<int, 2> resized =
        config.do_resize ? shortest_edge_size(w, h, config.shortest_edge) : std::array<int, 2>{w, h};
    hb.add(
        images.back().pixels, w, h,
        kernels::pil_resize_test::center_crop_placement(resized[0], resized[1], config.crop_width, config.crop_height),
        frontend_tables(config.resample));
  }
  const std::vector<uint8_t> got = run_twin(hb);
  const size_t image_bytes = static_cast<size_t>(3) * config.crop_width * config.crop_height;
  for (size_t i = 0; i < images.size(); ++i) {
    const RgbImage cropped = resize_and_crop(images[i], config);
    ASSERT_EQ(cropped.width, config.crop_width);
    ASSERT_EQ(cropped.height, config.crop_height);
    std::vector<uint8_t> want(image_bytes);
    to_pixel_levels(cropped, want.data());
    for (size_t b = 0; b < image_bytes; ++b) {
      ASSERT_EQ(got[i * image_bytes + b], want[b])
          << images[i].width << "x" << images[i].height << " byte " << b << " of " << image_bytes;
    }
  }
}

TEST(ResizeLevels, ClipShortestEdge224Crop224) {
  for (int resample : {2, 3}) {
    ClipPreprocessConfig config;
    config.resample = resample;
    expect_clip_levels(config, "resample " + std::to_string(resample));
  }
}

TEST(ResizeLevels, ClipCropLargerThanTheResizedImagePads) {
  for (int resample : {2, 3}) {
    ClipPreprocessConfig config;
    config.resample = resample;
    config.shortest_edge = 192;
    config.crop_width = 224;
    config.crop_height = 160;
    expect_clip_levels(config, "shortest 192 crop 224x160, resample " + std::to_string(resample));
  }
}

TEST(ResizeLevels, ClipWithoutResizeCropsAndPads) {
  ClipPreprocessConfig config;
  config.do_resize = false;
  expect_clip_levels(config, "no resize");
}

TEST(ResizeLevels, SamLongestEdge1024PaddedEqualsResizeAndPreprocess) {
  const std::pair<int, int> sizes[] = {{1500, 1000}, {1000, 1500}, {1024, 768},  {1, 1},       {1, 500},
                                       {2000, 3},    {640, 480},   {1023, 1025}, {2049, 1537}, {100, 50}};
  for (int resample : {2, 3}) {
    SCOPED_TRACE("resample " + std::to_string(resample));
    SamPreprocessConfig config;
    config.resample = resample;
    HostBatch hb(config.pad_width, config.pad_height);
    std::vector<RgbImage> images;
    uint32_t seed = 3;
    for (const auto& [w, h] : sizes) {
      images.push_back(random_image(w, h, seed++));
      const std::array<int, 2> resized = sam_resized_size(w, h, config.longest_edge);
      hb.add(images.back().pixels, w, h, kernels::pil_resize_test::pad_placement(resized[0], resized[1]),
             frontend_tables(resample));
    }
    const std::vector<uint8_t> got = run_twin(hb);
    ClipPreprocessConfig values;  // SAM's rescale and normalise are CLIP's arithmetic (sam_preprocess.cpp)
    values.rescale_factor = config.rescale_factor;
    values.image_mean = config.image_mean;
    values.image_std = config.image_std;
    const PixelValueTable table = pixel_value_table(values);
    const size_t pw = static_cast<size_t>(config.pad_width), ph = static_cast<size_t>(config.pad_height);
    for (size_t i = 0; i < images.size(); ++i) {
      const std::array<int, 2> size = sam_resized_size(images[i].width, images[i].height, config.longest_edge);
      const RgbImage resized = resize_pil(images[i], size[0], size[1], resample);
      const StatusOr<SamImageInput> input = preprocess_sam(images[i], config);
      ASSERT_TRUE(input.ok()) << input.status().to_string();
      const uint8_t* levels = got.data() + i * 3 * pw * ph;
      for (size_t c = 0; c < 3; ++c) {
        for (size_t y = 0; y < ph; ++y) {
          for (size_t x = 0; x < pw; ++x) {
            const bool inside = x < static_cast<size_t>(resized.width) && y < static_cast<size_t>(resized.height);
            const uint8_t want = inside ? resized.pixels[(y * resized.width + x) * 3 + c] : 0;
            const size_t at = (c * ph + y) * pw + x;
            ASSERT_EQ(levels[at], want) << images[i].width << "x" << images[i].height << " c" << c << " (" << x << ", "
                                        << y << ")";
            ASSERT_EQ(inside ? table[c * 256 + levels[at]] : 0.0f, input->pixels[at]);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::image
