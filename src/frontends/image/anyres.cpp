// LLaVA-NeXT's any-resolution preprocessing (see anyres.h), as LlavaNextImageProcessorPil's get_image_patches and
// _preprocess compute it.
#include "frontends/image/anyres.h"

#include <cmath>
#include <cstring>

#include "frontends/image/resample.h"

namespace mmserve::image {

std::array<int, 2> anyres_fit_size(int height, int width, const std::array<int, 2>& target) {
  const double scale_w = static_cast<double>(target[1]) / width;
  const double scale_h = static_cast<double>(target[0]) / height;
  if (scale_w < scale_h) {
    return {std::min(static_cast<int>(std::ceil(height * scale_w)), target[0]), target[1]};
  }
  return {target[0], std::min(static_cast<int>(std::ceil(width * scale_h)), target[1])};
}

std::vector<RgbImage> anyres_tiles(const RgbImage& image, const ClipPreprocessConfig& config,
                                   const std::array<int, 2>& target) {
  const int tile = config.crop_height;
  const std::array<int, 2> fit = anyres_fit_size(image.height, image.width, target);
  const RgbImage resized = resize_pil(image, fit[1], fit[0], config.resample);
  // divmod(target - new, 2): the odd pixel goes to the bottom / right.
  const int top = (target[0] - fit[0]) / 2, left = (target[1] - fit[1]) / 2;
  std::vector<RgbImage> tiles;
  tiles.push_back(resize_pil(image, config.shortest_edge, config.shortest_edge, config.resample));
  for (int ty = 0; ty < target[0] / tile; ++ty) {
    for (int tx = 0; tx < target[1] / tile; ++tx) {
      RgbImage t;
      t.width = t.height = tile;
      t.pixels.assign(static_cast<size_t>(tile) * tile * 3, 0);  // the padding: level 0
      for (int y = 0; y < tile; ++y) {
        const int sy = ty * tile + y - top;
        if (sy < 0 || sy >= resized.height) continue;
        for (int x = 0; x < tile; ++x) {
          const int sx = tx * tile + x - left;
          if (sx < 0 || sx >= resized.width) continue;
          std::memcpy(&t.pixels[(static_cast<size_t>(y) * tile + x) * 3],
                      &resized.pixels[(static_cast<size_t>(sy) * resized.width + sx) * 3], 3);
        }
      }
      tiles.push_back(std::move(t));
    }
  }
  return tiles;
}

StatusOr<std::vector<float>> anyres_pixel_values(const RgbImage& image, const ClipPreprocessConfig& config,
                                                 const std::array<int, 2>& target) {
  const int tile = config.crop_height;
  if (!config.do_resize || config.crop_width != tile || config.shortest_edge != tile) {
    return invalid_argument("any-resolution tiling needs do_resize and size.shortest_edge = crop_size (got " +
                            std::to_string(config.shortest_edge) + " and " + std::to_string(config.crop_width) + "x" +
                            std::to_string(config.crop_height) + ")");
  }
  if (target[0] <= 0 || target[1] <= 0 || target[0] % tile != 0 || target[1] % tile != 0) {
    return invalid_argument("the target resolution " + std::to_string(target[0]) + "x" + std::to_string(target[1]) +
                            " is not a multiple of the tile size " + std::to_string(tile));
  }
  if (image.width <= 0 || image.height <= 0) return invalid_argument("the image is empty");
  const std::vector<RgbImage> tiles = anyres_tiles(image, config, target);
  const size_t per_tile = static_cast<size_t>(3) * tile * tile;
  std::vector<float> out(per_tile * tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) to_pixel_values(tiles[i], config, out.data() + i * per_tile);
  return out;
}

}  // namespace mmserve::image
