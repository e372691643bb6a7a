// RequestPreprocessor (see request_preprocessor.h): the frontends composed per request, as cli's run_embed
// composes them per command line. Tests: tests/unit/serving/inference_server_test.cpp.
#include "serving/request_preprocessor.h"

#include <cmath>
#include <span>

#include "frontends/image/image.h"

namespace mmserve::serving {

int64_t count_code_points(const std::string& utf8) {
  int64_t n = 0;
  for (unsigned char c : utf8) n += (c & 0xC0) != 0x80;
  return n;
}

RequestPreprocessor::RequestPreprocessor(std::unique_ptr<text::ClipTokenizer> tokenizer,
                                         image::ClipPreprocessConfig image_config, PreprocessorOptions options)
    : tokenizer_(std::move(tokenizer)), image_config_(image_config), options_(options) {
  MMSERVE_CHECK(tokenizer_ != nullptr, "RequestPreprocessor needs a tokenizer");
}

StatusOr<std::vector<int32_t>> RequestPreprocessor::tokenize(const std::string& text) const {
  text::EncodeOptions encode;
  encode.max_length = options_.max_text_tokens;
  return tokenizer_->encode(text, encode);
}

Status RequestPreprocessor::add_image(InputItem& input, size_t index, PendingRequest& request) const {
  const int64_t s = options_.image_size, per_image = 3 * s * s;
  const std::string what = "input " + std::to_string(index);
  if (input.kind == InputKind::kPixelValues) {
    if (static_cast<int64_t>(input.pixel_values.size()) != per_image) {
      return invalid_argument(what + " (pixel_values): expected [3, " + std::to_string(s) + ", " + std::to_string(s) +
                              "] = " + std::to_string(per_image) + " floats, got " +
                              std::to_string(input.pixel_values.size()));
    }
    for (float v : input.pixel_values) {
      if (!std::isfinite(v)) return invalid_argument(what + " (pixel_values): contains a NaN or infinity");
    }
    request.pixels.insert(request.pixels.end(), input.pixel_values.begin(), input.pixel_values.end());
    std::vector<float>().swap(input.pixel_values);
    return ok_status();
  }
  image::DecodeOptions decode;
  decode.max_pixels = options_.max_image_pixels;
  const auto* bytes = reinterpret_cast<const uint8_t*>(input.image_bytes.data());
  auto decoded = image::decode_rgb(std::span<const uint8_t>(bytes, input.image_bytes.size()), decode);
  if (!decoded.ok()) {
    const Status& st = decoded.status();
    if (st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kTooLarge) {
      return too_large(what + " (image): " + st.message());
    }
    return invalid_argument(what + " (image): " + st.message());
  }
  std::string().swap(input.image_bytes);
  image::RgbImage cropped = image::resize_and_crop(*decoded, image_config_);
  if (cropped.width != s || cropped.height != s) {
    // Only reachable with do_center_crop off: the resized image must already be S x S.
    return invalid_argument(what + " (image): preprocessed to " + std::to_string(cropped.width) + "x" +
                            std::to_string(cropped.height) + " but the model takes " + std::to_string(s) + "x" +
                            std::to_string(s));
  }
  const size_t offset = request.pixels.size();
  request.pixels.resize(offset + static_cast<size_t>(per_image));
  image::to_pixel_values(cropped, image_config_, request.pixels.data() + offset);
  return ok_status();
}

Status RequestPreprocessor::run(std::vector<InputItem>& inputs, PendingRequest& request) const {
  request.input_is_image.clear();
  request.text_ids.clear();
  request.pixels.clear();
  request.images = request.tokens = 0;
  int64_t text_chars = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputItem& input = inputs[i];
    if (input.kind == InputKind::kAudioBytes) {
      return invalid_argument("input " + std::to_string(i) +
                              " is audio, but this is a CLIP model (texts and images only); transcription needs a "
                              "Whisper model");
    }
    request.input_is_image.push_back(input.is_image());
    if (input.is_image()) {
      RETURN_IF_ERROR(add_image(input, i, request));
      ++request.images;
      continue;
    }
    auto ids = tokenize(input.text);
    if (!ids.ok()) return invalid_argument("input " + std::to_string(i) + " (text): " + ids.status().message());
    text_chars += count_code_points(input.text);
    request.tokens += static_cast<int64_t>(ids->size());
    request.text_ids.push_back(std::move(*ids));
  }
  request.items[kTextTower] = static_cast<int64_t>(request.text_ids.size());
  request.items[kImageTower] = request.images;
  request.score = qos_score(static_cast<double>(request.images * options_.image_tokens), 0.0,
                            static_cast<double>(text_chars), options_.qos);
  return ok_status();
}

}  // namespace mmserve::serving
