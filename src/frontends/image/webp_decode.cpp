// WebP decoding with libwebp, reproducing PIL's WebPImagePlugin + _webp.c + convert("RGB").
//
// PIL decodes every WebP through WebPAnimDecoder with default options: MODE_RGBA output (non-premultiplied),
// libwebp's default decoder options (fancy upsampling for lossy, no dithering), the frame written straight
// into a zeroed canvas; the mode is "RGBX" without alpha and "RGBA" with it, and convert("RGB") then drops
// the fourth byte. For a still image (lossy VP8, lossless VP8L, or VP8X with ALPH) that is exactly the RGB
// that WebPDecode with MODE_RGB and default options produces, which is what we call: alpha dropped, never
// composited. Animated WebP is refused with kUnimplemented (PIL would return the first frame composited on
// the canvas; serving clients send stills).
// libwebp reports errors as status codes only: nothing here can longjmp or throw.
// Tests: tests/unit/frontends/image/image_decode_test.cpp.
#include <webp/decode.h>

#include <cstdint>
#include <string>

#include "frontends/image/codecs.h"

namespace mmserve::image::detail {
namespace {

Status webp_status(VP8StatusCode code, const char* stage) {
  const std::string where = std::string("WebP: ") + stage + ": ";
  switch (code) {
    case VP8_STATUS_OK: return ok_status();
    case VP8_STATUS_NOT_ENOUGH_DATA: return invalid_argument(where + "truncated data");
    case VP8_STATUS_BITSTREAM_ERROR: return invalid_argument(where + "corrupt bitstream");
    case VP8_STATUS_INVALID_PARAM: return invalid_argument(where + "invalid parameter");
    case VP8_STATUS_UNSUPPORTED_FEATURE: return unimplemented(where + "unsupported feature");
    case VP8_STATUS_OUT_OF_MEMORY: return resource_exhausted(where + "out of memory");
    case VP8_STATUS_SUSPENDED: return invalid_argument(where + "decoder suspended (truncated data)");
    case VP8_STATUS_USER_ABORT: return invalid_argument(where + "aborted");
  }
  return invalid_argument(where + "unknown error " + std::to_string(static_cast<int>(code)));
}

}  // namespace

StatusOr<RgbImage> decode_webp(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return internal_error("WebP: libwebp version mismatch");
  RETURN_IF_ERROR(webp_status(WebPGetFeatures(bytes.data(), bytes.size(), &config.input), "header"));
  if (config.input.has_animation) {
    return unimplemented("WebP: animated images are not supported (send a still image)");
  }
  RETURN_IF_ERROR(check_dimensions("WebP", config.input.width, config.input.height, options));

  RgbImage image;
  image.width = config.input.width;
  image.height = config.input.height;
  image.pixels.resize(static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3);
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = image.width * 3;
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode code = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);  // no-op for external memory, kept for symmetry with the API contract
  RETURN_IF_ERROR(webp_status(code, "decode"));
  return image;
}

}  // namespace mmserve::image::detail
