// The subcommands: embed, tokenize, inspect, demo-model. They compose the layers (frontends for bytes ->
// tensors, engine for tensors -> embeddings) and print JSON; every failure is a message and exit code 1.
#include "cli/commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/clip_executor.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"
#include "frontends/text/clip_tokenizer.h"
#include "frontends/text/whisper_tokenizer.h"
#include "models/clip/clip_demo.h"
#include "models/registry.h"

namespace mmserve::cli {
namespace {

nlohmann::json rows_to_json(const std::vector<float>& values, int64_t rows, int64_t cols) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t r = 0; r < rows; ++r) {
    out.push_back(std::vector<float>(values.begin() + r * cols, values.begin() + (r + 1) * cols));
  }
  return out;
}

void print_json(const nlohmann::json& json) {
  // Invalid UTF-8 cannot reach here (inputs are validated), but never throw from dump().
  std::string text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

int fail(const std::string& message) {
  std::fprintf(stderr, "mmserve: error: %s\n", message.c_str());
  return 1;
}

int run_embed(const EmbedArgs& args) {
  if (args.images.empty() && args.texts.empty()) return fail("nothing to embed: give at least one --image or --text");
  auto family = models::detect_family(args.model_dir);
  if (!family.ok()) return fail(family.status().message());
  if (Status servable = models::check_servable(*family); !servable.ok()) {
    return fail(args.model_dir + ": " + servable.message());
  }
  if (*family != models::Family::kClip) {
    return fail(args.model_dir + ": embed needs a CLIP model; this is a " + models::family_name(*family) +
                " model (speech to text: mmserve transcribe)");
  }

  engine::ExecutorOptions options;
  options.threads = args.threads;
  options.batch_size_max = args.batch;
  auto executor = engine::ClipExecutor::create(args.model_dir, options);
  if (!executor.ok()) return fail(executor.status().message());
  engine::ClipExecutor& exec = **executor;
  const int64_t dim = exec.embedding_dim();
  nlohmann::json out = nlohmann::json::object();

  std::vector<float> image_embeds, text_embeds;
  if (!args.images.empty()) {
    auto config = image::load_clip_preprocess_config(args.model_dir);
    if (!config.ok()) return fail(config.status().message());
    if (config->crop_height != exec.image_size() || config->crop_width != exec.image_size()) {
      return fail("preprocessor_config.json crops to " + std::to_string(config->crop_width) + "x" +
                  std::to_string(config->crop_height) + " but the model takes " + std::to_string(exec.image_size()) +
                  "x" + std::to_string(exec.image_size()) + " images");
    }
    const int64_t per_image = 3 * exec.image_size() * exec.image_size();
    std::vector<float> pixels(args.images.size() * per_image);
    image::DecodeOptions decode_options;
    decode_options.max_pixels = args.max_pixels;
    for (size_t i = 0; i < args.images.size(); ++i) {
      auto decoded = image::decode_rgb_file(args.images[i], decode_options);
      if (!decoded.ok()) return fail(decoded.status().message());
      image::RgbImage cropped = image::resize_and_crop(*decoded, *config);
      image::to_pixel_values(cropped, *config, pixels.data() + i * per_image);
    }
    auto embeds = exec.embed_images(pixels, static_cast<int64_t>(args.images.size()));
    if (!embeds.ok()) return fail(embeds.status().message());
    image_embeds = std::move(*embeds);
    out["image_embeds"] = rows_to_json(image_embeds, static_cast<int64_t>(args.images.size()), dim);
  }
  if (!args.texts.empty()) {
    auto tokenizer = text::ClipTokenizer::from_model_dir(args.model_dir);
    if (!tokenizer.ok()) return fail(tokenizer.status().message());
    text::EncodeOptions encode_options;
    encode_options.max_length = static_cast<int>(exec.config().text.max_position_embeddings);
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& t : args.texts) {
      auto encoded = (*tokenizer)->encode(t, encode_options);
      if (!encoded.ok()) return fail("--text '" + t + "': " + encoded.status().message());
      ids.push_back(std::move(*encoded));
    }
    auto embeds = exec.embed_texts(ids);
    if (!embeds.ok()) return fail(embeds.status().message());
    text_embeds = std::move(*embeds);
    out["text_embeds"] = rows_to_json(text_embeds, static_cast<int64_t>(args.texts.size()), dim);
  }
  if (!args.images.empty() && !args.texts.empty()) {
    const int64_t images = static_cast<int64_t>(args.images.size()), texts = static_cast<int64_t>(args.texts.size());
    out["logits_per_image"] =
        rows_to_json(exec.logits_per_image(image_embeds, images, text_embeds, texts), images, texts);
  }
  print_json(out);
  return 0;
}

namespace {

// Whisper: HF's WhisperTokenizer ids - the prefix tokens the directory configures (default <|startoftranscript|>
// <|notimestamps|>), the text with special-token text recognised, <|endoftext|>; no truncation.
int run_tokenize_whisper(const TokenizeArgs& args) {
  auto tokenizer = text::WhisperTokenizer::from_model_dir(args.model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  const text::WhisperTokenizer& t = **tokenizer;
  auto prefix = t.hf_prefix_tokens();
  if (!prefix.ok()) return fail(prefix.status().message());
  nlohmann::json ids = nlohmann::json::array();
  for (const std::string& text : args.texts) {
    auto encoded = t.encode(text, text::AllowSpecial::kAll);
    if (!encoded.ok()) return fail("--text '" + text + "': " + encoded.status().message());
    if (args.no_special) {
      ids.push_back(*encoded);
      continue;
    }
    std::vector<int32_t> row = *prefix;
    row.insert(row.end(), encoded->begin(), encoded->end());
    row.push_back(t.eot());
    ids.push_back(row);
  }
  print_json({{"input_ids", ids}});
  return 0;
}

}  // namespace

int run_tokenize(const TokenizeArgs& args) {
  // A directory without a config.json (a bare tokenizer) is read as CLIP's, as before.
  if (auto family = models::detect_family(args.model_dir); family.ok() && *family == models::Family::kWhisper) {
    return run_tokenize_whisper(args);
  }
  auto tokenizer = text::ClipTokenizer::from_model_dir(args.model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  text::EncodeOptions options;
  options.add_special_tokens = !args.no_special;
  options.max_length = args.no_truncation ? 0 : (*tokenizer)->model_max_length();
  nlohmann::json ids = nlohmann::json::array();
  for (const std::string& t : args.texts) {
    auto encoded = (*tokenizer)->encode(t, options);
    if (!encoded.ok()) return fail("--text '" + t + "': " + encoded.status().message());
    ids.push_back(*encoded);
  }
  print_json({{"input_ids", ids}});
  return 0;
}

int run_inspect(const std::string& model_dir) {
  auto summary = models::inspect_model_dir(model_dir);
  if (!summary.ok()) return fail(summary.status().message());
  nlohmann::json out = {{"architecture", summary->architecture},
                        {"model_type", summary->model_type},
                        {"parameters", summary->parameters},
                        {"parameters_by_dtype", summary->parameters_by_dtype},
                        {"tensors", summary->tensors},
                        {"shards", summary->shards},
                        {"bytes_on_disk", summary->bytes_on_disk},
                        {"bytes_in_memory_cpu_f32", summary->bytes_in_memory}};
  auto family = models::detect_family(model_dir);
  const Status servable = family.ok() ? models::check_servable(*family) : family.status();
  if (family.ok()) out["family"] = models::family_name(*family);
  out["supported"] = servable.ok();
  if (!servable.ok()) out["unsupported_reason"] = servable.message();
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int run_demo_model(const std::string& output_dir, bool overwrite, const std::string& architecture) {
  models::DemoModelOptions options;
  options.overwrite = overwrite;
  options.architecture = architecture;
  Status status = models::write_demo_clip(output_dir, options);
  if (!status.ok()) return fail(status.message());
  std::fprintf(stderr, "wrote the demo CLIP (random weights, real tokenizer) to %s\n", output_dir.c_str());
  return 0;
}

}  // namespace mmserve::cli
