// The subcommands: embed, tokenize, inspect, demo-model. embed runs CLIP's own input preparation and executor
// (the server's code, cli/local_run.h) and prints JSON; every failure is a message and exit code 1.
#include "cli/commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/local_run.h"
#include "engine/clip_executor.h"
#include "engine/clip_inputs.h"
#include "engine/families.h"
#include "frontends/text/clip_tokenizer.h"
#include "frontends/text/hf_tokenizer.h"
#include "frontends/text/whisper_tokenizer.h"
#include "models/clip/clip_demo.h"
#include "models/llama/llama2c.h"
#include "models/registry.h"
#include "models/sam/sam_demo.h"

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
  if (*family != models::Family::kClip) {
    return fail(args.model_dir + ": embed needs a CLIP model; this is a " + models::family_name(*family) + " model" +
                (*family == models::Family::kWhisper ? " (speech to text: mmserve transcribe)" : ""));
  }
  auto options = executor_options(args.device, args.dtype, args.threads, args.batch);
  if (!options.ok()) return fail(options.status().message());
  // The inputs first: a missing file fails before the model loads. Images, then texts (the output's order).
  std::vector<engine::InputItem> inputs;
  for (const std::string& path : args.images) {
    auto bytes = read_input_file(path);
    if (!bytes.ok()) return fail(bytes.status().message());
    engine::InputItem item;
    item.kind = engine::InputKind::kImageBytes;
    item.image_bytes = std::move(*bytes);
    inputs.push_back(std::move(item));
  }
  for (const std::string& text : args.texts) {
    engine::InputItem item;
    item.text = text;
    inputs.push_back(std::move(item));
  }
  auto executor = engine::ClipExecutor::create(args.model_dir, *options);
  if (!executor.ok()) return fail(executor.status().message());
  engine::PreparerOptions prepare;
  prepare.max_image_pixels = args.max_pixels;
  auto preparer = engine::ClipInputs::create(args.model_dir, **executor, prepare);
  if (!preparer.ok()) return fail(preparer.status().message());
  engine::ClipParams params;
  if (!args.adapter_dir.empty()) {
    params.adapter = "adapter";
    const Status loaded = (*executor)->load_adapter(params.adapter, args.adapter_dir);
    if (!loaded.ok()) return fail("--adapter " + args.adapter_dir + ": " + loaded.message());
  }
  auto output = run_local(**executor, **preparer, std::move(inputs), &params);
  if (!output.ok()) {
    // Name the file or text an input error is about (the preparer numbers the inputs in this order).
    std::string message = output.status().message();
    const size_t n = args.images.size() + args.texts.size();
    for (size_t i = 0; i < n; ++i) {
      const std::string tag = "input " + std::to_string(i) + " ";
      if (message.rfind(tag, 0) == 0) {
        message = (i < args.images.size() ? args.images[i] : "--text '" + args.texts[i - args.images.size()] + "'") +
                  message.substr(tag.size() - 1);
      }
    }
    return fail(message);
  }
  const auto* clip = engine::output_as<engine::ClipOutput>(*output);
  if (clip == nullptr) return fail("internal error: the CLIP executor returned no embeddings");
  const int64_t dim = clip->dim, images = static_cast<int64_t>(args.images.size());
  const int64_t texts = static_cast<int64_t>(args.texts.size());
  nlohmann::json out = nlohmann::json::object();
  std::vector<float> image_rows, text_rows;
  for (int64_t i = 0; i < images + texts; ++i) {
    std::vector<float>& rows = i < images ? image_rows : text_rows;
    rows.insert(rows.end(), clip->embeddings[static_cast<size_t>(i)].begin(),
                clip->embeddings[static_cast<size_t>(i)].end());
  }
  if (images > 0) out["image_embeds"] = rows_to_json(image_rows, images, dim);
  if (texts > 0) out["text_embeds"] = rows_to_json(text_rows, texts, dim);
  if (images > 0 && texts > 0) out["logits_per_image"] = rows_to_json(clip->logits_per_image, images, texts);
  print_json(out);
  return 0;
}

StatusOr<engine::ExecutorOptions> executor_options(const std::string& device, const std::string& dtype, int threads,
                                                   int batch) {
  engine::ExecutorOptions options;
  ASSIGN_OR_RETURN(options.device, parse_device(device));
  options.threads = threads;
  options.batch_size_max = batch;
  if (dtype != "auto") {
    const char* name = dtype == "f32" ? "F32" : dtype == "f16" ? "F16" : dtype == "bf16" ? "BF16" : nullptr;
    if (name == nullptr) return invalid_argument("--dtype '" + dtype + "' is not one of auto, f32, f16, bf16");
    options.dtype = *dtype_from_safetensors(name);
  }
  return options;
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

int run_tokenize_hf(const TokenizeArgs& args) {
  // The decoders' tokenizer.json, as transformers 5's AutoTokenizer (no truncation: decoders have none by default).
  auto tokenizer = text::HfTokenizer::from_model_dir(args.model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  nlohmann::json ids = nlohmann::json::array();
  for (const std::string& t : args.texts) {
    auto encoded = (*tokenizer)->encode(t, !args.no_special);
    if (!encoded.ok()) return fail("--text '" + t + "': " + encoded.status().message());
    ids.push_back(*encoded);
  }
  print_json({{"input_ids", ids}});
  return 0;
}

int run_tokenize(const TokenizeArgs& args) {
  // A directory without a config.json (a bare tokenizer) is read as CLIP's, as before.
  auto family = models::detect_family(args.model_dir);
  if (family.ok() && *family == models::Family::kWhisper) return run_tokenize_whisper(args);
  if (family.ok() && *family == models::Family::kLlama) return run_tokenize_hf(args);
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
  const Status servable = family.ok() ? engine::check_servable(*family) : family.status();
  if (family.ok()) out["family"] = models::family_name(*family);
  out["supported"] = servable.ok();
  if (!servable.ok()) out["unsupported_reason"] = servable.message();
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int run_demo_model(const std::string& output_dir, bool overwrite, const std::string& architecture) {
  if (architecture == "sam") {
    Status status = models::write_demo_sam(output_dir, overwrite);
    if (!status.ok()) return fail(status.message());
    std::fprintf(stderr, "wrote the demo SAM (random weights) to %s\n", output_dir.c_str());
    return 0;
  }
  models::DemoModelOptions options;
  options.overwrite = overwrite;
  options.architecture = architecture;
  Status status = models::write_demo_clip(output_dir, options);
  if (!status.ok()) return fail(status.message());
  std::fprintf(stderr, "wrote the demo CLIP (random weights, real tokenizer) to %s\n", output_dir.c_str());
  return 0;
}

int run_convert_llama2c(const std::string& checkpoint, const std::string& tokenizer, const std::string& output_dir) {
  Status status = models::convert_llama2c(checkpoint, tokenizer, output_dir);
  if (!status.ok()) return fail(status.message());
  std::fprintf(stderr, "wrote an HF Llama directory to %s\n", output_dir.c_str());
  return 0;
}

}  // namespace mmserve::cli
