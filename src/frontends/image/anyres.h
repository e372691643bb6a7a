// LLaVA-NeXT's any-resolution preprocessing, bit-exact with transformers 5's LlavaNextImageProcessorPil: the image
// resized to fit a target resolution (the pinpoint models/llava/llava_next.h selects) keeping its aspect
// (get_patch_output_size: the limiting side exact, the other ceil'ed), zero-padded centred to it (levels 0, before
// rescale and normalise, as np.pad on the uint8 image), cut into tile x tile crops row by row, after the whole image
// squashed to tile x tile; every tile then rescaled and normalised as CLIP's pipeline does (its resize and centre crop
// are identities at the tile size). PIL's filter: resize_pil.
// Tests: tests/unit/frontends/image/anyres_test.cpp (HF's pixels in tests/fixtures/llava/llava-next-*).
#pragma once

#include <array>
#include <vector>

#include "core/status.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"

namespace mmserve::image {

// HF's get_patch_output_size: {height, width} of the image resized to fit `target` ({height, width}).
std::array<int, 2> anyres_fit_size(int height, int width, const std::array<int, 2>& target);

// The tiles' levels: [1 + (target h / tile) * (target w / tile)] RGB images of tile x tile, the base first.
std::vector<RgbImage> anyres_tiles(const RgbImage& image, const ClipPreprocessConfig& config,
                                   const std::array<int, 2>& target);

// The model's input: every tile's pixels, CHW float32 one after the other ([tiles, 3, tile, tile]). The tile size is
// config.crop_height, which must equal shortest_edge and crop_width, and divide the target (kInvalidArgument else).
StatusOr<std::vector<float>> anyres_pixel_values(const RgbImage& image, const ClipPreprocessConfig& config,
                                                 const std::array<int, 2>& target);

}  // namespace mmserve::image
