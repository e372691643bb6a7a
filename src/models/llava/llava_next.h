// LLaVA-NeXT's any-resolution geometry (HF `LlavaNextForConditionalGeneration`, issue 15): which grid an image is
// tiled into, how many placeholder tokens it takes, and how the tiles' features are laid out for the decoder.
//
// An image of height x width is fitted into the pinpoint (from config.json's image_grid_pinpoints, {height, width},
// multiples of the tower's image size S) that keeps the most of it (select_best_resolution); the processor
// (frontends/image/anyres.h) resizes it to fit keeping the aspect, pads it centred to the pinpoint and cuts S x S
// tiles, row by row, after the whole image squashed to S x S (the "base"). Every tile goes through the CLIP tower and
// the projector as a LLaVA image does (P = (S / patch)^2 rows each, CLS dropped). Then, as HF's pack_image_features:
//   the grid tiles' patch rows are laid out as one (rows * p) x (cols * p) patch grid (p = S / patch),
//   unpadded back to the image's aspect (unpad_image: equal bands cut from both ends of the padded axis),
//   image_newline appended at the end of every remaining row,
//   and put after the base tile's P rows.
// llava_next_feature_order gives that layout as indices into the tiles' rows, so the CPU and the GPU paths pack the
// same way; the count equals HF LlavaNextProcessor's _get_number_of_features (tests against it).
// Only vision_feature_select_strategy "default" (HF's view of the tiles needs exactly P rows per tile).
// Tests: tests/unit/models/llava_next_test.cpp (HF's counts for 30 sizes), tests/conformance/llava_next_hf_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace mmserve::models {

struct LlavaConfig;

using Pinpoints = std::vector<std::array<int64_t, 2>>;  // {height, width}

// HF's select_best_resolution: the pinpoint whose fit of the image keeps the most pixels (min(downscaled area,
// original area)), ties broken by the least wasted area; {height, width}. `pinpoints` must be non-empty.
std::array<int64_t, 2> select_best_resolution(int64_t height, int64_t width, const Pinpoints& pinpoints);

struct AnyresLayout {
  std::array<int64_t, 2> best = {0, 0};  // the pinpoint, {height, width} in pixels
  int64_t grid_rows = 0, grid_cols = 0;   // tiles of the pinpoint
  int64_t tiles = 0;                      // 1 (the base) + grid_rows * grid_cols
  int64_t patch_rows = 0, patch_cols = 0; // the unpadded patch grid
  int64_t row_begin = 0, col_begin = 0;   // where it starts in the padded (grid * p) patch grid
  int64_t tokens = 0;                     // P (base) + patch_rows * (patch_cols + 1)
};
// The layout of an image of height x width under `c` (a LLaVA-NeXT config).
AnyresLayout llava_next_layout(const LlavaConfig& c, int64_t height, int64_t width);

// Placeholder tokens the image takes: tokens_per_image() for LLaVA, the layout's tokens for LLaVA-NeXT.
int64_t llava_image_tokens(const LlavaConfig& c, int64_t height, int64_t width);
// Tiles the image is cut into (1 for LLaVA).
int64_t llava_image_tiles(const LlavaConfig& c, int64_t height, int64_t width);

// The decoder's rows for the image in order: an index into the tiles' projected rows ([tiles * P], tile t's rows at
// t * P), or -1 for image_newline. Its size is llava_image_tokens.
std::vector<int32_t> llava_next_feature_order(const LlavaConfig& c, int64_t height, int64_t width);

// out[r] = tile_rows[order[r]] or `newline` for -1 (rows of `width` floats).
void gather_feature_rows(const std::vector<int32_t>& order, const float* tile_rows, const float* newline, int64_t width,
                         float* out);

}  // namespace mmserve::models
