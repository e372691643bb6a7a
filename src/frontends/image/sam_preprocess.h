// SAM (HF `SamModel`) image preprocessing and prompt coordinates, as transformers 5's SamImageProcessorPil and
// SamProcessor compute them.
//
// Preprocessing: the longest side is resized to `longest_edge` with PIL's filter (resize_pil, bit-exact with
// PIL), the other to int(side * longest_edge / longest + 0.5) (HF's _get_preprocess_shape: rounded, unlike
// CLIP's truncation); rescale (float64 product cast to float32) and normalise (float32) exactly as the CLIP
// pipeline does; then zero padding at the bottom and right up to pad_size, AFTER normalising (so the padding is
// 0.0, not the normalised black). Prompt points and boxes are given in original pixel coordinates and scaled to
// the resized frame in float64 (boxes first pass through float32, as HF's processor casts them). Mask
// post-processing is kernels/mask_resize (below).
// Tests: tests/unit/frontends/image/sam_preprocess_test.cpp (against tests/fixtures/sam/*/golden.*, made by
// tools/reference/make_sam_fixtures.py).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "frontends/image/image.h"

namespace mmserve::image {

struct SamPreprocessConfig {
  int longest_edge = 1024;  // "size": {"longest_edge": N} (or an int)
  int pad_height = 1024;    // "pad_size": {"height": H, "width": W} (or an int)
  int pad_width = 1024;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  bool do_pad = true;
  double rescale_factor = 1.0 / 255.0;
  std::array<float, 3> image_mean = {0.485f, 0.456f, 0.406f};  // IMAGENET_DEFAULT_MEAN
  std::array<float, 3> image_std = {0.229f, 0.224f, 0.225f};   // IMAGENET_DEFAULT_STD
  int resample = 2;  // PIL's BILINEAR; bilinear (2) and bicubic (3) are supported
};

// Reads preprocessor_config.json in `model_dir` (SamImageProcessorPil's class attributes as defaults), or when
// absent the "image_processor" object of processor_config.json (transformers 5's SamProcessor writes only
// that). Errors name the file and the key: kNotFound (no file), kInvalidArgument (wrong type or value; a "size" without
// "longest_edge", which HF's SAM processor also rejects), kUnimplemented (do_center_crop, other PIL filters).
StatusOr<SamPreprocessConfig> load_sam_preprocess_config(const std::string& model_dir);

// HF's _get_preprocess_shape: scale = longest_edge / max(h, w); each side int(side * scale + 0.5) (float64).
// Returns {width, height}.
std::array<int, 2> sam_resized_size(int width, int height, int longest_edge);

// The model's input for one image, and the geometry post-processing needs.
struct SamImageInput {
  std::vector<float> pixels;  // [3, pad_height, pad_width], CHW float32
  int pad_height = 0;         // = config pad size (the resized size when do_pad is off)
  int pad_width = 0;
  int original_height = 0;
  int original_width = 0;
  int reshaped_height = 0;  // the size after resizing (before padding)
  int reshaped_width = 0;
};

// Resize, rescale, normalise, pad. kInvalidArgument for an empty image or one larger than pad_size after
// resizing (HF: "Padding dimensions are negative").
StatusOr<SamImageInput> preprocess_sam(const RgbImage& image, const SamPreprocessConfig& config);

// SamProcessor._normalize_coordinates for a point (x, y) in original pixels: {x * (rw / ow), y * (rh / oh)} in
// float64, rw x rh being the resized size (HF computes it from longest_edge; equal whenever do_resize is on).
std::array<double, 2> normalize_sam_point(double x, double y, const SamImageInput& geom);
// The same for a box {x0, y0, x1, y1}: HF first casts box coordinates to float32, then scales both corners.
std::array<double, 4> normalize_sam_box(const std::array<double, 4>& box, const SamImageInput& geom);

// post_process_masks (masks upscaled, cropped to reshaped_*, resized to original_*, binarised) is
// kernels/mask_resize.h's op, shaped by this geometry (engine/sam_executor.cpp).

}  // namespace mmserve::image
