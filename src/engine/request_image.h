// The preparers' image decode (CLIP, SAM, LLaVA: one rule for every family): frontends/image's decode_rgb under the
// request limits, its errors mapped to what the client sent: kTooLarge above max_image_pixels (or when decoding
// runs out of memory), kInvalidArgument for anything undecodable; messages prefixed with `what` ("input 2 (image)").
// Tests: through the preparers' tests (tests/unit/serving/inference_server_test.cpp, tests/e2e/cli_test.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "frontends/image/image.h"

namespace mmserve::engine {

StatusOr<image::RgbImage> decode_request_image(const std::string& bytes, int64_t max_pixels, const std::string& what);

}  // namespace mmserve::engine
