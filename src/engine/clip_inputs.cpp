// ClipInputs (see clip_inputs.h): the frontends composed per request, for the server and `mmserve embed`.
// Tests: tests/unit/serving/inference_server_test.cpp, tests/e2e/cli_test.cpp.
#include "engine/clip_inputs.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "engine/request_image.h"
#include "frontends/image/image.h"
#include "frontends/image/png_device.h"
#include "kernels/pixel_levels/pixel_levels.h"

namespace mmserve::engine {
namespace {

std::shared_ptr<const std::vector<float>> level_table_of(const image::ClipPreprocessConfig& config) {
  const image::PixelValueTable table = image::pixel_value_table(config);
  return std::make_shared<const std::vector<float>>(table.begin(), table.end());
}

}  // namespace

ClipInputs::ClipInputs(std::unique_ptr<text::ClipTokenizer> tokenizer, image::ClipPreprocessConfig image_config,
                       ClipInputOptions options, std::unique_ptr<PngDecodeStage> stage)
    : tokenizer_(std::move(tokenizer)),
      image_config_(image_config),
      level_table_(level_table_of(image_config)),
      options_(std::move(options)),
      stage_(std::move(stage)) {
  MMSERVE_CHECK(tokenizer_ != nullptr, "ClipInputs needs a tokenizer");
}

StatusOr<std::unique_ptr<ClipInputs>> ClipInputs::create(const std::string& model_dir, const ClipExecutor& executor,
                                                         const PreparerOptions& options) {
  ASSIGN_OR_RETURN(auto tokenizer, text::ClipTokenizer::from_model_dir(model_dir));
  ASSIGN_OR_RETURN(image::ClipPreprocessConfig image_config, image::load_clip_preprocess_config(model_dir));
  const int64_t s = executor.image_size();
  if (image_config.do_center_crop && (image_config.crop_height != s || image_config.crop_width != s)) {
    return invalid_argument("preprocessor_config.json crops to " + std::to_string(image_config.crop_width) + "x" +
                            std::to_string(image_config.crop_height) + " but the model takes " + std::to_string(s) +
                            "x" + std::to_string(s) + " images");
  }
  ClipInputOptions clip;
  clip.image_size = s;
  clip.image_tokens = executor.config().vision.num_patches();
  clip.max_text_tokens = static_cast<int>(executor.config().text.max_position_embeddings);
  clip.keep_pngs = executor.decodes_images_in_batch();
  clip.common = options;
  ASSIGN_OR_RETURN(std::unique_ptr<PngDecodeStage> stage, executor.make_decode_stage());
  return std::make_unique<ClipInputs>(std::move(tokenizer), image_config, clip, std::move(stage));
}

StatusOr<std::unique_ptr<InputPreparer>> ClipInputs::create_for_server(const std::string& model_dir,
                                                                       const Executor& first,
                                                                       const PreparerOptions& options) {
  const auto* clip = dynamic_cast<const ClipExecutor*>(&first);
  if (clip == nullptr) return internal_error("ClipInputs needs a ClipExecutor");
  ASSIGN_OR_RETURN(std::unique_ptr<ClipInputs> inputs, create(model_dir, *clip, options));
  return std::unique_ptr<InputPreparer>(std::move(inputs));
}

StatusOr<std::vector<int32_t>> ClipInputs::tokenize(const std::string& text) const {
  text::EncodeOptions encode;
  encode.max_length = options_.max_text_tokens;
  return tokenizer_->encode(text, encode);
}

Status ClipInputs::add_image(InputItem& input, size_t index, bool keep_png, ClipInput& request) const {
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
    if (!request.levels.empty()) {  // this request's earlier images become floats too: one kind per request
      const size_t offset = request.pixels.size();
      request.pixels.resize(offset + request.levels.size());
      kernels::expand_pixel_levels(request.levels.data(), static_cast<int64_t>(request.levels.size() / per_image), 3,
                                   s * s, level_table_->data(), request.pixels.data() + offset);
      std::vector<uint8_t>().swap(request.levels);
      request.level_table.reset();
    }
    request.pixels.insert(request.pixels.end(), input.pixel_values.begin(), input.pixel_values.end());
    std::vector<float>().swap(input.pixel_values);
    return ok_status();
  }
  if (keep_png) {
    std::optional<StatusOr<std::unique_ptr<CompressedPng>>> kept =
        keep_png_compressed(input.image_bytes, options_.common.max_image_pixels, what + " (image)");
    if (kept) {
      if (!kept->ok()) return kept->status();
      std::shared_ptr<const CompressedPng> png = std::move(**kept);
      std::shared_ptr<StagedImage> staged;
      if (stage_ != nullptr && (staged = stage_->submit(png)) == nullptr) {
        // Every slot of the stage is taken (a long queue), or the stage is busy: decoded here, as without the stage.
        ASSIGN_OR_RETURN(std::vector<uint8_t> levels, decode_png_levels_on_host(*png, image_config_));
        request.levels.insert(request.levels.end(), levels.begin(), levels.end());
        request.level_table = level_table_;
        return ok_status();
      }
      request.kept_pngs.push_back({request.images, std::move(png), std::move(staged)});
      request.level_table = level_table_;
      return ok_status();
    }
  }
  ASSIGN_OR_RETURN(image::RgbImage decoded,
                   decode_request_image(input.image_bytes, options_.common.max_image_pixels, what + " (image)"));
  std::string().swap(input.image_bytes);
  image::RgbImage cropped = image::resize_and_crop(decoded, image_config_);
  if (cropped.width != s || cropped.height != s) {
    // Only reachable with do_center_crop off: the resized image must already be S x S.
    return invalid_argument(what + " (image): preprocessed to " + std::to_string(cropped.width) + "x" +
                            std::to_string(cropped.height) + " but the model takes " + std::to_string(s) + "x" +
                            std::to_string(s));
  }
  if (!request.pixels.empty()) {  // the request already carries pixel_values: floats for all its images
    const size_t offset = request.pixels.size();
    request.pixels.resize(offset + static_cast<size_t>(per_image));
    image::to_pixel_values(cropped, image_config_, request.pixels.data() + offset);
    return ok_status();
  }
  const size_t offset = request.levels.size();
  request.levels.resize(offset + static_cast<size_t>(per_image));
  image::to_pixel_levels(cropped, request.levels.data() + offset);
  request.level_table = level_table_;
  return ok_status();
}

bool ClipInputs::decodes_media(const std::vector<InputItem>& inputs) const {
  if (!options_.keep_pngs) return InputPreparer::decodes_media(inputs);
  // pixel_values beside images make prepare() decode them here (see prepare).
  const bool floats = std::any_of(inputs.begin(), inputs.end(),
                                  [](const InputItem& in) { return in.kind == InputKind::kPixelValues; });
  // A busy stage (PngDecodeStage::Options::queue_images) sends images to the pool too, decoded there on the host.
  const bool stage_busy = stage_ != nullptr && stage_->busy();
  return std::any_of(inputs.begin(), inputs.end(), [floats, stage_busy](const InputItem& in) {
    return in.kind == InputKind::kAudioBytes ||
           (in.kind == InputKind::kImageBytes &&
            (floats || stage_busy || in.image_bytes.size() > kKeptPngStreamBytesMax ||
             !image::png_header_fits_device(std::span<const uint8_t>(
                 reinterpret_cast<const uint8_t*>(in.image_bytes.data()), in.image_bytes.size()))));
  });
}

StatusOr<Prepared> ClipInputs::prepare(std::vector<InputItem>& inputs, const RequestParams* params) const {
  if (inputs.empty()) return invalid_argument("a CLIP request needs at least one text or image");
  auto request = std::make_unique<ClipInput>();
  if (const auto* clip = dynamic_cast<const ClipParams*>(params)) request->adapter = clip->adapter;
  int64_t text_chars = 0;
  // A request with pixel_values tensors runs as floats, so its images are decoded here.
  const bool keep_pngs = options_.keep_pngs && std::none_of(inputs.begin(), inputs.end(), [](const InputItem& in) {
                           return in.kind == InputKind::kPixelValues;
                         });
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputItem& input = inputs[i];
    if (input.kind == InputKind::kAudioBytes) {
      return invalid_argument("input " + std::to_string(i) +
                              " is audio, but this is a CLIP model (texts and images only); transcription needs a "
                              "Whisper model");
    }
    if (input.kind == InputKind::kTensor) {
      return invalid_argument("input " + std::to_string(i) + " ('" + input.name +
                              "') is not a CLIP input (text, image or pixel_values)");
    }
    request->input_is_image.push_back(input.is_image());
    if (input.is_image()) {
      RETURN_IF_ERROR(add_image(input, i, keep_pngs, *request));
      ++request->images;
      continue;
    }
    auto ids = tokenize(input.text);
    if (!ids.ok()) return invalid_argument("input " + std::to_string(i) + " (text): " + ids.status().message());
    text_chars += count_code_points(input.text);
    request->tokens += static_cast<int64_t>(ids->size());
    request->text_ids.push_back(std::move(*ids));
  }
  Prepared out;
  out.items[kClipTextSlot] = static_cast<int64_t>(request->text_ids.size());
  out.items[kClipImageSlot] = request->images;
  out.score = qos_score(static_cast<double>(request->images * options_.image_tokens), 0.0,
                        static_cast<double>(text_chars), options_.common.qos);
  out.tokens = request->tokens;
  out.input = std::move(request);
  return out;
}

}  // namespace mmserve::engine
