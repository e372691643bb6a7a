// resize_pil (PIL's Image.resize, BICUBIC/BILINEAR) on cases worked out by hand from Resample.c, plus
// properties that follow from PIL's algorithm: identity is a copy, constants stay constant (the 22-bit
// coefficients sum to 2^22 within rounding), the horizontal pass runs first on an 8-bit intermediate, and a
// window of the output equals the same window of the full output (what resize_and_crop relies on).
#include "frontends/image/resample.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "frontends/image/preprocess.h"

namespace mmserve::image {
namespace {

constexpr int kBilinear = 2;
constexpr int kBicubic = 3;

// (Three push_backs rather than insert({...}): GCC 12 warns falsely on the latter.)
void push_rgb(std::vector<uint8_t>& out, uint8_t r, uint8_t g, uint8_t b) {
  out.push_back(r);
  out.push_back(g);
  out.push_back(b);
}

RgbImage gray_row(const std::vector<uint8_t>& values, bool vertical = false) {
  RgbImage image;
  image.width = vertical ? 1 : static_cast<int>(values.size());
  image.height = vertical ? static_cast<int>(values.size()) : 1;
  for (uint8_t v : values) push_rgb(image.pixels, v, v, v);
  return image;
}

std::vector<uint8_t> red_channel(const RgbImage& image) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < image.pixels.size(); i += 3) out.push_back(image.pixels[i]);
  return out;
}

RgbImage random_image(int width, int height, unsigned seed) {
  std::mt19937 rng(seed);
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (uint8_t& v : image.pixels) v = static_cast<uint8_t>(rng());
  return image;
}

// Bicubic 4 -> 2: scale = 2, filterscale = 2, support = 2 * 2 = 4. Output 0: center = 1.0, xmin =
// max(0, (int)(1 - 4 + 0.5)) = 0, xmax = min(4, (int)(5.5)) = 4; taps at (x - 1 + 0.5) / 2 = -0.25, 0.25,
// 0.75, 1.25 -> bicubic(a = -0.5) weights 111/128, 111/128, 29/128, -9/128, sum 121/64, normalised
// 111/242, 111/242, 29/242, -9/242 -> fixed point (x 2^22, +-0.5, truncated) 1923834, 1923834, 502623,
// -155987. For [10, 50, 200, 255]: 2^21 + 10*1923834 + 50*1923834 + 200*502623 - 255*155987 = 178275107,
// >> 22 = 42. Output 1 is the mirror image: 2^21 - 10*155987 + 50*502623 + 455*1923834 = 901012902 -> 214.
TEST(ResizePil, BicubicDownscaleByHand) {
  EXPECT_EQ(red_channel(resize_pil(gray_row({10, 50, 200, 255}), 2, 1, kBicubic)), (std::vector<uint8_t>{42, 214}));
  EXPECT_EQ(red_channel(resize_pil(gray_row({10, 50, 200, 255}, true), 1, 2, kBicubic)),
            (std::vector<uint8_t>{42, 214}));
}

// Bilinear 2 -> 4: scale 0.5, support 1. Centers 0.25, 0.75, 1.25, 1.75. Output 1: taps x = 0, 1 at
// offsets -0.25, 0.75 -> weights 0.75, 0.25 -> 3145728, 1048576: (2^21 + 255 * 1048576) >> 22 = 64.
// Output 2: weights 0.25, 0.75 -> (2^21 + 255 * 3145728) >> 22 = 191. Outputs 0 and 3 have one tap each.
TEST(ResizePil, BilinearUpscaleByHand) {
  EXPECT_EQ(red_channel(resize_pil(gray_row({0, 255}), 4, 1, kBilinear)), (std::vector<uint8_t>{0, 64, 191, 255}));
}

// Bicubic 3 -> 5 (upscaling keeps support 2). Output 1: center 0.9, taps x = 0..2 at -0.4, 0.6, 1.6 ->
// 0.696, 0.424, -0.048, sum 1.072 -> 2723168, 1658941, -187805: (2^21 + 100*1658941 - 255*187805) >> 22 =
// 120100977 >> 22 = 28. Output 0 undershoots below zero and is clipped to 0.
TEST(ResizePil, BicubicUpscaleByHand) {
  EXPECT_EQ(red_channel(resize_pil(gray_row({0, 100, 255}), 5, 1, kBicubic)),
            (std::vector<uint8_t>{0, 28, 100, 205, 255}));
}

TEST(ResizePil, IdentityReturnsTheInput) {
  const RgbImage image = random_image(17, 9, 1);
  for (int filter : {kBilinear, kBicubic}) {
    const RgbImage out = resize_pil(image, 17, 9, filter);
    EXPECT_EQ(out.width, 17);
    EXPECT_EQ(out.height, 9);
    EXPECT_EQ(out.pixels, image.pixels);
  }
}

TEST(ResizePil, ConstantImagesStayConstant) {
  const struct {
    int in_w, in_h, out_w, out_h;
  } cases[] = {{37, 23, 224, 150}, {37, 23, 11, 7}, {1, 1, 5, 3},
               {300, 2, 3, 200},   {1000, 1, 3, 1}, {640, 427, 335, 224}};
  for (const auto& c : cases) {
    for (uint8_t level : {0, 1, 127, 254, 255}) {
      RgbImage image{c.in_w, c.in_h, {}};
      for (int i = 0; i < c.in_w * c.in_h; ++i) push_rgb(image.pixels, level, 255, 0);
      for (int filter : {kBilinear, kBicubic}) {
        const RgbImage out = resize_pil(image, c.out_w, c.out_h, filter);
        ASSERT_EQ(out.pixels.size(), static_cast<size_t>(c.out_w) * c.out_h * 3);
        for (size_t i = 0; i < out.pixels.size(); i += 3) {
          ASSERT_EQ(out.pixels[i], level) << c.in_w << "x" << c.in_h << " -> " << c.out_w << "x" << c.out_h;
          ASSERT_EQ(out.pixels[i + 1], 255);
          ASSERT_EQ(out.pixels[i + 2], 0);
        }
      }
    }
  }
}

// PIL resamples horizontally first (rounding to 8 bits), then vertically; a resize that changes only the
// width or only the height skips the other pass.
TEST(ResizePil, HorizontalPassRunsFirst) {
  const RgbImage image = random_image(31, 19, 2);
  for (int filter : {kBilinear, kBicubic}) {
    const RgbImage both = resize_pil(image, 12, 40, filter);
    const RgbImage two_step = resize_pil(resize_pil(image, 12, 19, filter), 12, 40, filter);
    EXPECT_EQ(both.pixels, two_step.pixels);
  }
}

TEST(ResizePil, RowsAreIndependentWhenOnlyTheWidthChanges) {
  RgbImage image{4, 2, {}};
  for (uint8_t v : {10, 50, 200, 255}) push_rgb(image.pixels, v, v, v);
  for (uint8_t v : {255, 200, 50, 10}) push_rgb(image.pixels, v, v, v);
  EXPECT_EQ(red_channel(resize_pil(image, 2, 2, kBicubic)), (std::vector<uint8_t>{42, 214, 214, 42}));
}

TEST(ResizeWindow, EqualsTheSameWindowOfTheFullResize) {
  const RgbImage image = random_image(53, 41, 3);
  const struct {
    int out_w, out_h;
    detail::Span1d cols, rows;
  } cases[] = {{24, 18, {0, 24}, {0, 18}},   {24, 18, {5, 10}, {3, 7}},    {120, 90, {17, 64}, {0, 90}},
               {53, 90, {10, 20}, {40, 50}}, {200, 41, {199, 1}, {0, 41}}, {7, 5, {6, 1}, {4, 1}}};
  for (const auto& c : cases) {
    for (int filter : {kBilinear, kBicubic}) {
      const RgbImage full = resize_pil(image, c.out_w, c.out_h, filter);
      const RgbImage window = detail::resize_window(image, c.out_w, c.out_h, filter, c.cols, c.rows);
      ASSERT_EQ(window.width, c.cols.count);
      ASSERT_EQ(window.height, c.rows.count);
      for (int y = 0; y < c.rows.count; ++y) {
        for (int x = 0; x < c.cols.count * 3; ++x) {
          ASSERT_EQ(window.pixels[(static_cast<size_t>(y) * c.cols.count) * 3 + x],
                    full.pixels[(static_cast<size_t>(c.rows.start + y) * c.out_w + c.cols.start) * 3 + x]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::image
