// LLaVA-NeXT's geometry (see llava_next.h): HF's select_best_resolution, unpad_image and pack_image_features
// (modeling_llava_next.py), as index arithmetic. Python's float64 arithmetic is kept where it decides an integer.
#include "models/llava/llava_next.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "models/llava/llava.h"

namespace mmserve::models {
namespace {

// int(round(x, 7)) for x >= 0: the rounding only absorbs float noise below 1e-7 before the truncation.
int64_t int_round7(double x) { return static_cast<int64_t>(std::nearbyint(x * 1e7) / 1e7); }

}  // namespace

std::array<int64_t, 2> select_best_resolution(int64_t height, int64_t width, const Pinpoints& pinpoints) {
  std::array<int64_t, 2> best = pinpoints.front();
  int64_t max_effective = 0;
  int64_t min_wasted = std::numeric_limits<int64_t>::max();
  for (const auto& [h, w] : pinpoints) {
    const double scale = std::min(static_cast<double>(w) / static_cast<double>(width),
                                  static_cast<double>(h) / static_cast<double>(height));
    const int64_t dw = static_cast<int64_t>(static_cast<double>(width) * scale);
    const int64_t dh = static_cast<int64_t>(static_cast<double>(height) * scale);
    const int64_t effective = std::min(dw * dh, width * height);
    const int64_t wasted = h * w - effective;
    if (effective > max_effective || (effective == max_effective && wasted < min_wasted)) {
      max_effective = effective;
      min_wasted = wasted;
      best = {h, w};
    }
  }
  return best;
}

AnyresLayout llava_next_layout(const LlavaConfig& c, int64_t height, int64_t width) {
  const int64_t s = c.vision.image_size, p = s / c.vision.patch_size;
  AnyresLayout l;
  l.best = select_best_resolution(height, width, c.grid_pinpoints);
  l.grid_rows = l.best[0] / s;
  l.grid_cols = l.best[1] / s;
  l.tiles = 1 + l.grid_rows * l.grid_cols;
  // unpad_image on the (grid_rows * p) x (grid_cols * p) patch grid.
  const int64_t ch = l.grid_rows * p, cw = l.grid_cols * p;
  l.patch_rows = ch;
  l.patch_cols = cw;
  const double original_aspect = static_cast<double>(width) / static_cast<double>(height);
  const double current_aspect = static_cast<double>(cw) / static_cast<double>(ch);
  if (original_aspect > current_aspect) {
    const int64_t new_height = int_round7(static_cast<double>(height) * (static_cast<double>(cw) / width));
    l.row_begin = (ch - new_height) / 2;
    l.patch_rows = ch - 2 * l.row_begin;
  } else {
    const int64_t new_width = int_round7(static_cast<double>(width) * (static_cast<double>(ch) / height));
    l.col_begin = (cw - new_width) / 2;
    l.patch_cols = cw - 2 * l.col_begin;
  }
  l.tokens = p * p + l.patch_rows * (l.patch_cols + 1);
  return l;
}

int64_t llava_image_tokens(const LlavaConfig& c, int64_t height, int64_t width) {
  return c.is_next() ? llava_next_layout(c, height, width).tokens : c.tokens_per_image();
}

int64_t llava_image_tiles(const LlavaConfig& c, int64_t height, int64_t width) {
  return c.is_next() ? llava_next_layout(c, height, width).tiles : 1;
}

std::vector<int32_t> llava_next_feature_order(const LlavaConfig& c, int64_t height, int64_t width) {
  const AnyresLayout l = llava_next_layout(c, height, width);
  const int64_t p = c.vision.image_size / c.vision.patch_size, per_tile = p * p;
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(l.tokens));
  for (int64_t r = 0; r < per_tile; ++r) order.push_back(static_cast<int32_t>(r));  // the base tile
  for (int64_t y = l.row_begin; y < l.row_begin + l.patch_rows; ++y) {
    for (int64_t x = l.col_begin; x < l.col_begin + l.patch_cols; ++x) {
      const int64_t tile = 1 + (y / p) * l.grid_cols + x / p;  // grid tiles row by row, after the base
      order.push_back(static_cast<int32_t>(tile * per_tile + (y % p) * p + x % p));
    }
    order.push_back(-1);  // image_newline closes every row
  }
  return order;
}

void gather_feature_rows(const std::vector<int32_t>& order, const float* tile_rows, const float* newline, int64_t width,
                         float* out) {
  for (size_t r = 0; r < order.size(); ++r) {
    const float* src = order[r] < 0 ? newline : tile_rows + static_cast<int64_t>(order[r]) * width;
    std::memcpy(out + static_cast<int64_t>(r) * width, src, static_cast<size_t>(width) * sizeof(float));
  }
}

}  // namespace mmserve::models
