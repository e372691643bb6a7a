// decode_request_image (see request_image.h).
#include "engine/request_image.h"

#include <span>

namespace mmserve::engine {

StatusOr<image::RgbImage> decode_request_image(const std::string& bytes, int64_t max_pixels, const std::string& what) {
  image::DecodeOptions decode;
  decode.max_pixels = max_pixels;
  auto decoded =
      image::decode_rgb(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), decode);
  if (decoded.ok()) return decoded;
  const Status& st = decoded.status();
  if (st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kTooLarge) {
    return too_large(what + ": " + st.message());
  }
  return invalid_argument(what + ": " + st.message());
}

}  // namespace mmserve::engine
