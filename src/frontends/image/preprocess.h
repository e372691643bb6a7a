// CLIP image preprocessing, bit-exact with PIL (HF's CLIPImageProcessorPil, original CLIP):
// resize the shortest edge with PIL's bicubic filter, centre crop, rescale, normalise, to NCHW float32.
//
// PIL's resampling is reproduced exactly: a separable filter (horizontal pass then vertical pass, the
// order PIL uses), the support widened by the scale factor when downsampling (antialiasing), coefficients
// normalised and converted to 22-bit fixed point, each pass rounding and clamping to 8 bits. The output
// size follows HF: the short side becomes `shortest_edge` and the long side is int(shortest_edge * long /
// short), truncated. The crop follows HF's PIL path (offsets and zero padding when the image is smaller
// than the crop). rescale_factor and image_mean/std come from preprocessor_config.json.
// Tests: tests/unit/frontends/image/ (resample_test.cpp, preprocess_test.cpp),
// tests/conformance/clip_pixels_test.cpp.
#pragma once

#include <array>
#include <string>

#include "core/json_config.h"
#include "core/status.h"
#include "frontends/image/image.h"

namespace mmserve::image {

struct ClipPreprocessConfig {
  int shortest_edge = 224;  // "size": {"shortest_edge": N} (or an int)
  int crop_height = 224;    // "crop_size": {"height": H, "width": W} (or an int)
  int crop_width = 224;
  bool do_resize = true;
  bool do_center_crop = true;
  bool do_rescale = true;
  bool do_normalize = true;
  double rescale_factor = 1.0 / 255.0;
  std::array<float, 3> image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  int resample = 3;  // PIL's BICUBIC; only bicubic (3) and bilinear (2) are supported
};

// preprocessor_config.json's image_mean / image_std: three numbers, or one for every channel (HF accepts both);
// absent keys leave `out`. `nonzero` refuses zeros (a std). Shared by every family's preprocessing config.
Status read_rgb_triplet(const JsonObject& root, const std::string& key, bool nonzero, std::array<float, 3>& out);

// Reads preprocessor_config.json in `model_dir` (errors name the file and key).
StatusOr<ClipPreprocessConfig> load_clip_preprocess_config(const std::string& model_dir);

// PIL's Image.resize((width, height), BICUBIC or BILINEAR) on an RGB image.
RgbImage resize_pil(const RgbImage& src, int width, int height, int resample);
// HF's output size for resize(shortest_edge): returns {width, height}.
std::array<int, 2> shortest_edge_size(int width, int height, int shortest_edge);
// Centre crop (with zero padding when smaller), as HF's PIL backend does.
RgbImage center_crop(const RgbImage& src, int crop_width, int crop_height);
// The uint8 image after resize and crop (what the conformance test compares level by level).
RgbImage resize_and_crop(const RgbImage& src, const ClipPreprocessConfig& config);
// The full pipeline: writes 3 * cropped.height * cropped.width floats (CHW) to `out` (the crop size when
// do_center_crop; the resized size otherwise).
void to_pixel_values(const RgbImage& cropped, const ClipPreprocessConfig& config, float* out);

// The same pipeline in two halves, for callers that move 8-bit levels (4x fewer bytes) and expand them where the
// model runs (kernels/pixel_levels, on the CPU or the GPU): every float to_pixel_values writes is
// table[channel * 256 + level] of the crop's level, so to_pixel_levels + this table give the same values bit for bit.
using PixelValueTable = std::array<float, 3 * 256>;
PixelValueTable pixel_value_table(const ClipPreprocessConfig& config);
// The crop's levels, CHW: 3 * cropped.height * cropped.width bytes.
void to_pixel_levels(const RgbImage& cropped, uint8_t* out);

}  // namespace mmserve::image
