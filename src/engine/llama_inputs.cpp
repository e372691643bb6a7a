// LlamaInputs (see llama_executor.h): a request's prompt (text, ids or chat messages) and, for a LLaVA, its images
// into a LlamaInput: the images decoded and preprocessed, the placeholders expanded as HF's LlavaProcessor does.
#include <algorithm>

#include "core/json_config.h"

#include "engine/embedding_cache.h"
#include "engine/llama_executor.h"
#include "engine/request_image.h"
#include "frontends/image/anyres.h"
#include "models/llava/llava_next.h"

namespace mmserve::engine {

namespace {

// LLaVA-NeXT: the processor tiles at the tower's size, and its pinpoints (preprocessor_config.json, what HF's
// processor counts placeholders with) are the model's (config.json, what its packing uses).
Status check_anyres_processor(const std::string& model_dir, const models::LlavaConfig& c,
                              const image::ClipPreprocessConfig& config) {
  const std::string path = model_dir + "/preprocessor_config.json";
  const int64_t s = c.vision.image_size;
  if (config.shortest_edge != s || config.crop_height != s || config.crop_width != s || !config.do_resize) {
    return invalid_argument(path + ": LLaVA-NeXT tiles need size.shortest_edge and crop_size equal to the vision "
                            "tower's image size " + std::to_string(s));
  }
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(path));
  if (json.contains("image_grid_pinpoints")) {
    models::Pinpoints pinpoints;
    for (const nlohmann::json& pair : json["image_grid_pinpoints"]) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer()) {
        return invalid_argument(path + ": image_grid_pinpoints must hold [height, width] integer pairs");
      }
      pinpoints.push_back({pair[0].get<int64_t>(), pair[1].get<int64_t>()});
    }
    if (pinpoints != c.grid_pinpoints) {
      return invalid_argument(path + ": image_grid_pinpoints differ from config.json's (the processor would count "
                              "other placeholders than the model packs)");
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<InputPreparer>> LlamaInputs::create_for_server(const std::string& model_dir,
                                                                        const Executor& first,
                                                                        const PreparerOptions& options) {
  const auto* executor = dynamic_cast<const LlamaExecutor*>(&first);
  if (executor == nullptr) return internal_error("LlamaInputs needs a LlamaExecutor");
  std::unique_ptr<LlamaInputs> inputs(new LlamaInputs());
  inputs->executor_ = executor;
  inputs->options_ = options;
  if (const models::LlavaConfig* llava = executor->llava()) {
    ASSIGN_OR_RETURN(inputs->image_config_, image::load_clip_preprocess_config(model_dir));
    const int64_t s = llava->vision.image_size;
    if (inputs->image_config_->do_center_crop &&
        (inputs->image_config_->crop_width != s || inputs->image_config_->crop_height != s)) {
      return invalid_argument(model_dir + "/preprocessor_config.json: crop_size " +
                              std::to_string(inputs->image_config_->crop_width) + "x" +
                              std::to_string(inputs->image_config_->crop_height) + " but the vision tower takes " +
                              std::to_string(s) + "x" + std::to_string(s));
    }
    if (llava->is_next()) RETURN_IF_ERROR(check_anyres_processor(model_dir, *llava, *inputs->image_config_));
    const std::string* token = executor->tokenizer().id_to_token(static_cast<int32_t>(llava->image_token_index));
    if (token == nullptr) {
      return invalid_argument(model_dir + ": the tokenizer has no token for image_token_index " +
                              std::to_string(llava->image_token_index));
    }
    inputs->image_token_ = *token;
  }
  StatusOr<chat_template::LoadedChatTemplate> chat = chat_template::load_chat_template(model_dir);
  if (chat.ok()) {
    inputs->chat_ = std::move(*chat);
  } else {
    inputs->chat_error_ = chat.status().message();
  }
  return std::unique_ptr<InputPreparer>(std::move(inputs));
}

StatusOr<Prepared> LlamaInputs::prepare(std::vector<InputItem>& inputs, const RequestParams* params) const {
  const auto* p = dynamic_cast<const LlamaParams*>(params);
  const LlamaParams defaults;
  if (p == nullptr) p = &defaults;
  RETURN_IF_ERROR(validate_sampling(p->sampling));
  if (p->max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (p->logprobs < -1 || p->logprobs > 20) {
    return invalid_argument("logprobs must be in [0, 20], got " + std::to_string(p->logprobs));
  }
  if (p->min_tokens < 0 || p->min_tokens > p->max_tokens) {
    return invalid_argument("min_tokens must be in [0, max_tokens], got " + std::to_string(p->min_tokens));
  }
  auto input = std::make_unique<LlamaInput>();
  const text::HfTokenizer& tokenizer = executor_->tokenizer();
  RETURN_IF_ERROR(add_images(inputs, *input));
  const std::vector<int64_t>& counts = input->image_tokens;
  const int forms = (p->prompt_ids ? 1 : 0) + (p->messages ? 1 : 0) + (inputs.empty() ? 0 : 1);
  if (forms != 1) return invalid_argument("give exactly one prompt (text, token ids or messages)");
  if (p->prompt_ids) {
    ASSIGN_OR_RETURN(input->prompt, expand_ids(*p->prompt_ids, counts));
  } else if (p->messages) {
    if (!chat_) return invalid_argument("model '" + options_.model + "' has no chat template: " + chat_error_);
    chat_template::RenderOptions render;
    render.add_generation_prompt = true;
    render.bos_token = chat_->bos_token;
    render.eos_token = chat_->eos_token;
    ASSIGN_OR_RETURN(std::string text, chat_->chat_template.render(*p->messages, render));
    ASSIGN_OR_RETURN(text, expand_text(text, counts));
    // The template writes the special tokens (apply_chat_template(tokenize=True) adds none).
    ASSIGN_OR_RETURN(input->prompt, tokenizer.encode(text, /*add_special_tokens=*/false));
  } else {
    if (inputs.size() != 1 || inputs[0].kind != InputKind::kText) {
      return invalid_argument("a Llama-family model takes one text prompt");
    }
    ASSIGN_OR_RETURN(std::string text, expand_text(inputs[0].text, counts));
    ASSIGN_OR_RETURN(input->prompt, tokenizer.encode(text, /*add_special_tokens=*/true));
  }
  if (input->prompt.empty()) return invalid_argument("the prompt has no tokens");
  const int64_t vocab = executor_->config().vocab_size, max_length = executor_->max_model_len();
  for (int32_t id : input->prompt) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(vocab) + ")");
    }
  }
  if (static_cast<int64_t>(input->prompt.size()) >= max_length) {
    return invalid_argument("the prompt has " + std::to_string(input->prompt.size()) +
                            " tokens; this model's maximum context length is " + std::to_string(max_length));
  }
  input->sampling = p->sampling;
  input->max_tokens = p->max_tokens;
  input->min_tokens = p->min_tokens;
  input->stop = p->stop;
  input->ignore_eos = p->ignore_eos;
  input->logprobs = p->logprobs;
  input->on_delta = p->on_delta;
  input->trace_routing = p->trace_routing;
  const bool routed = p->adapter == "auto" || (p->adapter.empty() && executor_->routes_by_gate());
  if (routed) {  // the gate head routes it at admission
    if (!executor_->has_gate()) {
      return invalid_argument("adapter \"auto\" needs a gate head (options.gate) on model '" + options_.model + "'");
    }
    input->adapter_auto = true;
  } else if (!p->adapter.empty()) {
    ASSIGN_OR_RETURN(input->adapter, executor_->adapter(p->adapter));
  }
  Prepared prepared;
  prepared.tokens = static_cast<int64_t>(input->prompt.size());
  prepared.items = {1, 0};
  prepared.score = qos_score(0, 0, static_cast<double>(input->prompt.size()), options_.qos);
  prepared.retriable = !p->on_delta;
  prepared.input = std::move(input);
  return prepared;
}

Status LlamaInputs::add_images(std::vector<InputItem>& inputs, LlamaInput& input) const {
  const int64_t count = std::count_if(inputs.begin(), inputs.end(), [](const InputItem& i) { return i.is_image(); });
  if (count > kMaxImagesPerRequest) {
    return invalid_argument("too many images: " + std::to_string(count) + " (at most " +
                            std::to_string(kMaxImagesPerRequest) + " per request)");
  }
  std::vector<InputItem> rest;
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputItem& item = inputs[i];
    if (!item.is_image()) {
      rest.push_back(std::move(item));
      continue;
    }
    const std::string what = "input " + std::to_string(i) + " (image)";
    if (!image_config_) return invalid_argument(what + ": model '" + options_.model + "' takes no images");
    const models::LlavaConfig& c = *executor_->llava();
    const int64_t s = c.vision.image_size;
    std::vector<float> pixels;
    std::array<int64_t, 2> size = {s, s};
    if (item.kind == InputKind::kPixelValues) {
      if (c.is_next()) {
        return invalid_argument(what + ": a LLaVA-NeXT model takes the image itself (its tiling needs its size), "
                                "not pixel_values");
      }
      if (item.pixel_values.size() != static_cast<size_t>(3 * s * s)) {
        return invalid_argument(what + ": pixel_values must be [3, " + std::to_string(s) + ", " + std::to_string(s) +
                                "]");
      }
      pixels = std::move(item.pixel_values);
    } else {
      ASSIGN_OR_RETURN(image::RgbImage decoded, decode_request_image(item.image_bytes, options_.max_image_pixels, what));
      size = {decoded.height, decoded.width};
      if (c.is_next()) {
        const std::array<int64_t, 2> best = models::select_best_resolution(size[0], size[1], c.grid_pinpoints);
        ASSIGN_OR_RETURN(pixels, image::anyres_pixel_values(decoded, *image_config_,
                                                            {static_cast<int>(best[0]), static_cast<int>(best[1])}));
      } else {
        const image::RgbImage cropped = image::resize_and_crop(decoded, *image_config_);
        if (cropped.width != s || cropped.height != s) {
          return invalid_argument(what + ": preprocessed to " + std::to_string(cropped.width) + "x" +
                                  std::to_string(cropped.height) + " but the vision tower takes " + std::to_string(s) +
                                  "x" + std::to_string(s));
        }
        pixels.resize(static_cast<size_t>(3 * s * s));
        image::to_pixel_values(cropped, *image_config_, pixels.data());
      }
    }
    input.image_sizes.push_back(size);
    input.image_tokens.push_back(models::llava_image_tokens(c, size[0], size[1]));
    // The pixels and the size (LLaVA-NeXT's packing depends on it) name the features.
    std::string key(reinterpret_cast<const char*>(pixels.data()), pixels.size() * sizeof(float));
    key += std::to_string(size[0]) + "x" + std::to_string(size[1]);
    input.image_hashes.push_back(content_hash(key));
    input.images.push_back(std::move(pixels));
  }
  inputs = std::move(rest);
  return ok_status();
}

std::string expand_image_placeholders(const std::string& text, const std::string& token,
                                      const std::vector<int64_t>& counts, int64_t& found) {
  std::string out;
  found = 0;
  size_t at = 0;
  for (size_t next; (next = text.find(token, at)) != std::string::npos; at = next + token.size()) {
    out.append(text, at, next - at);
    const int64_t copies = found < static_cast<int64_t>(counts.size()) ? counts[static_cast<size_t>(found)] : 1;
    for (int64_t k = 0; k < copies; ++k) out += token;
    ++found;
  }
  out.append(text, at, std::string::npos);
  return out;
}

StatusOr<std::string> LlamaInputs::expand_text(const std::string& text, const std::vector<int64_t>& counts) const {
  if (image_token_.empty()) return text;
  int64_t found = 0;
  std::string out = expand_image_placeholders(text, image_token_, counts, found);
  if (found != static_cast<int64_t>(counts.size())) {
    return invalid_argument("the prompt has " + std::to_string(found) + " image placeholder(s) " + image_token_ +
                            " but the request carries " + std::to_string(counts.size()) + " image(s)");
  }
  return out;
}

StatusOr<std::vector<int32_t>> LlamaInputs::expand_ids(const std::vector<int32_t>& ids,
                                                       const std::vector<int64_t>& counts) const {
  if (image_token_.empty()) return ids;
  const int32_t placeholder = static_cast<int32_t>(executor_->llava()->image_token_index);
  const int64_t images = static_cast<int64_t>(counts.size());
  int64_t expanded = 0;
  for (int64_t n : counts) expanded += n;
  const int64_t found = std::count(ids.begin(), ids.end(), placeholder);
  if (found == expanded) return ids;  // already expanded (as `mmserve generate` prints prompt_ids)
  if (found != images) {
    return invalid_argument("the prompt ids hold " + std::to_string(found) + " image placeholder id(s) " +
                            std::to_string(placeholder) + "; " + std::to_string(images) + " image(s) need " +
                            std::to_string(images) + " (one each) or " + std::to_string(expanded) + " (expanded)");
  }
  std::vector<int32_t> out;
  size_t image = 0;
  for (int32_t id : ids) {
    if (id == placeholder) {
      out.insert(out.end(), static_cast<size_t>(counts[image++]), placeholder);
    } else {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace mmserve::engine
