// CLIP preprocessing after decoding: HF's resize size rule, HF's centre crop, and the float32 pixel values,
// each exactly as transformers 5's CLIPImageProcessorPil (PilBackend + image_transforms.py) computes them.
//
//  - shortest_edge_size: get_resize_output_image_size(default_to_square=False): the short side becomes
//    shortest_edge, the long side int(shortest_edge * long / short) (Python true division, truncated).
//  - center_crop: image_transforms.center_crop (the numpy function the PIL backend calls): top =
//    (h - crop_h) // 2, left = (w - crop_w) // 2 (floor); when the image is smaller along an axis it is
//    zero-padded, placed at offset ceil((crop - size) / 2). (The torchvision backend differs only when
//    padding: it puts (crop - size) // 2 before, one pixel less on odd differences; its crop offsets
//    int((size - crop) / 2.0) equal the floor here because the difference is then non-negative.)
//  - to_pixel_values: rescale() computes image.astype(float64) * rescale_factor and casts the product to
//    float32; normalize() then does (x - mean) / std with mean and std cast to float32, in float32. With
//    do_rescale off, normalize() casts the uint8 levels to float32 first.
// resize_and_crop evaluates only the part of the resized image the crop keeps (see resample.h): the same
// values as resizing everything and cropping.
// Tests: tests/unit/frontends/image/preprocess_test.cpp; tests/conformance/clip_pixels_test.cpp.
#include "frontends/image/preprocess.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "frontends/image/resample.h"

namespace mmserve::image {
namespace {

// One axis of HF's centre crop: which source range is kept and where it lands in the crop.
struct CropAxis {
  int src_start;
  int count;
  int dst_start;
};

CropAxis crop_axis(int size, int crop) {
  if (crop <= size) return {(size - crop) / 2, crop, 0};  // Python's floor division; non-negative here
  return {0, size, (crop - size + 1) / 2};                // top_pad = ceil((new - orig) / 2)
}

// A crop_width x crop_height image of zeros with `window` pasted at (x.dst_start, y.dst_start).
RgbImage paste_into_zeros(const RgbImage& window, int crop_width, int crop_height, CropAxis x, CropAxis y) {
  RgbImage out;
  out.width = crop_width;
  out.height = crop_height;
  out.pixels.assign(static_cast<size_t>(crop_width) * crop_height * 3, 0);
  for (int row = 0; row < y.count; ++row) {
    std::memcpy(out.pixels.data() + (static_cast<size_t>(y.dst_start + row) * crop_width + x.dst_start) * 3,
                window.pixels.data() + static_cast<size_t>(row) * window.width * 3, static_cast<size_t>(x.count) * 3);
  }
  return out;
}

}  // namespace

std::array<int, 2> shortest_edge_size(int width, int height, int shortest_edge) {
  MMSERVE_CHECK(width > 0 && height > 0 && shortest_edge > 0, "shortest_edge_size needs positive sizes");
  const bool portrait = width <= height;
  const int64_t short_side = portrait ? width : height;
  const int64_t long_side = portrait ? height : width;
  // Python: int(size * long / short). The product is exact in double (both below 2^31), and IEEE division
  // of exact operands is correctly rounded, as Python's int / int is. Saturated where PIL would fail anyway.
  const double new_long = static_cast<double>(int64_t{shortest_edge} * long_side) / static_cast<double>(short_side);
  const int long_out = new_long >= static_cast<double>(INT_MAX) ? INT_MAX : static_cast<int>(new_long);
  return portrait ? std::array<int, 2>{shortest_edge, long_out} : std::array<int, 2>{long_out, shortest_edge};
}

RgbImage center_crop(const RgbImage& src, int crop_width, int crop_height) {
  MMSERVE_CHECK(crop_width > 0 && crop_height > 0, "center_crop needs a positive size");
  const CropAxis x = crop_axis(src.width, crop_width);
  const CropAxis y = crop_axis(src.height, crop_height);
  RgbImage window;
  window.width = x.count;
  window.height = y.count;
  window.pixels.resize(static_cast<size_t>(x.count) * y.count * 3);
  for (int row = 0; row < y.count; ++row) {
    std::memcpy(window.pixels.data() + static_cast<size_t>(row) * x.count * 3,
                src.pixels.data() + (static_cast<size_t>(y.src_start + row) * src.width + x.src_start) * 3,
                static_cast<size_t>(x.count) * 3);
  }
  if (x.dst_start == 0 && y.dst_start == 0 && x.count == crop_width && y.count == crop_height) return window;
  return paste_into_zeros(window, crop_width, crop_height, x, y);
}

RgbImage resize_and_crop(const RgbImage& src, const ClipPreprocessConfig& config) {
  int width = src.width;
  int height = src.height;
  if (config.do_resize) {
    const std::array<int, 2> size = shortest_edge_size(src.width, src.height, config.shortest_edge);
    width = size[0];
    height = size[1];
  }
  if (!config.do_center_crop) {
    return config.do_resize ? resize_pil(src, width, height, config.resample) : src;
  }
  if (!config.do_resize) return center_crop(src, config.crop_width, config.crop_height);
  const CropAxis x = crop_axis(width, config.crop_width);
  const CropAxis y = crop_axis(height, config.crop_height);
  RgbImage window;
  if (width == src.width && height == src.height) {
    window = center_crop(src, x.count, y.count);  // identity resize (a copy in PIL): just the kept window
  } else {
    window = detail::resize_window(src, width, height, config.resample, detail::Span1d{x.src_start, x.count},
                                   detail::Span1d{y.src_start, y.count});
  }
  if (x.dst_start == 0 && y.dst_start == 0 && x.count == config.crop_width && y.count == config.crop_height) {
    return window;
  }
  return paste_into_zeros(window, config.crop_width, config.crop_height, x, y);
}

PixelValueTable pixel_value_table(const ClipPreprocessConfig& config) {
  // The value of every level, per channel, computed once exactly as numpy would per pixel.
  PixelValueTable table;
  for (int c = 0; c < 3; ++c) {
    const float mean = config.image_mean[c];
    const float std = config.image_std[c];
    for (int level = 0; level < 256; ++level) {
      float v = config.do_rescale ? static_cast<float>(static_cast<double>(level) * config.rescale_factor)
                                  : static_cast<float>(level);
      if (config.do_normalize) v = (v - mean) / std;
      table[static_cast<size_t>(c * 256 + level)] = v;
    }
  }
  return table;
}

void to_pixel_levels(const RgbImage& cropped, uint8_t* out) {
  const size_t plane = static_cast<size_t>(cropped.width) * cropped.height;
  const uint8_t* p = cropped.pixels.data();
  for (size_t i = 0; i < plane; ++i, p += 3) {
    out[i] = p[0];
    out[plane + i] = p[1];
    out[2 * plane + i] = p[2];
  }
}

void to_pixel_values(const RgbImage& cropped, const ClipPreprocessConfig& config, float* out) {
  const PixelValueTable table = pixel_value_table(config);
  const size_t plane = static_cast<size_t>(cropped.width) * cropped.height;
  const uint8_t* p = cropped.pixels.data();
  for (size_t i = 0; i < plane; ++i, p += 3) {
    out[i] = table[p[0]];
    out[plane + i] = table[256 + p[1]];
    out[2 * plane + i] = table[512 + p[2]];
  }
}

}  // namespace mmserve::image
