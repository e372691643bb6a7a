// `mmserve generate` and `mmserve chat-template` for the Llama family of decoders (issue 14 item 6).
//
// generate runs one request through the server's code (engine::LlamaInputs and LlamaExecutor, cli/local_run.h):
// the prompt is --prompt tokenised as HF's tokenizer(text) (the post-processor's special tokens), --prompt-ids
// used as given, or --messages rendered with the model's chat template (add_generation_prompt) and tokenised
// without special tokens (the template writes them), as apply_chat_template(tokenize=True) does. Tokens come from
// engine::TokenSampler (--temperature 0 is plain greedy); generation stops at max_new_tokens ("length"), an EOS id
// of config.json / generation_config.json unless --ignore-eos, or a --stop string found in the detokenised text
// ("stop"; the text ends before it). Prints {"prompt_ids", "ids", "text", "finish_reason"} (--output json) with
// `ids` the generated ids and `text` HF's decode(ids, skip_special_tokens=True) (cut at a stop string), or the text.
// A LLaVA takes images: --image files, one per "<image>" in --prompt (expanded as HF's LlavaProcessor does, so
// prompt_ids are the expanded ids), or image_url parts in --messages (data URLs or local paths; api/chat_images.h).
// --adapter DIR runs the request under a PEFT LoRA adapter (models/lora) over --model.
// chat-template: prints {"prompt": apply_chat_template(messages, tokenize=False, add_generation_prompt=...)}.
// Errors print "mmserve: error: ..." and exit 1. Tests: tests/e2e/cli_test.cpp (Generate*, ChatTemplate*).
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/chat_images.h"
#include "cli/commands.h"
#include "cli/local_run.h"
#include "engine/llama_executor.h"
#include "frontends/text/chat_template/chat_template.h"
#include "models/registry.h"

namespace mmserve::cli {
namespace {

Status check_llama(const std::string& model_dir, const char* command) {
  ASSIGN_OR_RETURN(models::Family family, models::detect_family(model_dir));
  if (family != models::Family::kLlama) {
    return invalid_argument(model_dir + ": " + command + " needs a decoder (Llama, Mistral, Qwen2, Qwen3, Mixtral, "
                            "LLaVA); this is a " + models::family_name(family) + " model");
  }
  return ok_status();
}

StatusOr<nlohmann::ordered_json> read_messages(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_input_file(path));
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return invalid_argument(path + ": not valid JSON");
  if (!messages.is_array()) return invalid_argument(path + ": expected a JSON array of messages");
  return messages;
}

StatusOr<std::string> render_chat(const std::string& model_dir, const std::string& messages_path,
                                  bool add_generation_prompt) {
  ASSIGN_OR_RETURN(nlohmann::ordered_json messages, read_messages(messages_path));
  ASSIGN_OR_RETURN(chat_template::LoadedChatTemplate t, chat_template::load_chat_template(model_dir));
  chat_template::RenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = t.bos_token;
  options.eos_token = t.eos_token;
  return t.chat_template.render(messages, options);
}

StatusOr<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(part, &used);
      if (used != part.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(part);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument("--prompt-ids '" + text + "': '" + part + "' is not a token id");
    }
  }
  if (ids.empty()) return invalid_argument("--prompt-ids is empty");
  return ids;
}

StatusOr<nlohmann::json> generate(const GenerateArgs& args) {
  RETURN_IF_ERROR(check_llama(args.model_dir, "generate"));
  const int given = !args.prompt.empty() + !args.prompt_ids.empty() + !args.messages.empty();
  if (given != 1) return invalid_argument("give exactly one of --prompt, --prompt-ids and --messages");
  ASSIGN_OR_RETURN(engine::ExecutorOptions options, executor_options(args.device, args.dtype, args.threads, 1));
  // The server's code for one request: the family's preparer and executor (cli/local_run.h).
  // --adapter: loaded with the model, as a server's mmserve.yaml `adapters` (on a GPU the model gets its slots).
  nlohmann::json family = nlohmann::json::object();
  const bool routed = args.adapter == "auto";
  if (routed) {  // the gate head over the adapters it names
    if (args.gate.empty() || args.adapters.empty()) return invalid_argument("--adapter auto needs --gate and --adapters");
    family["gate"] = std::filesystem::absolute(args.gate).string();
    family["adapters"] = nlohmann::json::object();
    for (const std::string& dir : args.adapters) {
      const std::filesystem::path path = std::filesystem::absolute(dir);
      family["adapters"][path.filename().string()] = path.string();
    }
  } else if (!args.adapter.empty()) {
    if (!args.gate.empty() || !args.adapters.empty()) return invalid_argument("--gate and --adapters go with --adapter auto");
    if (!std::filesystem::is_directory(args.adapter)) {
      return invalid_argument("--adapter " + args.adapter + ": not a directory (or auto)");
    }
    family["adapters"] = {{"adapter", std::filesystem::absolute(args.adapter).string()}};
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Executor> executor,
                   engine::LlamaExecutor::create_for_server(args.model_dir, options, family));
  engine::PreparerOptions prepare;
  prepare.model = args.model_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::InputPreparer> preparer,
                   engine::LlamaInputs::create_for_server(args.model_dir, *executor, prepare));
  engine::LlamaParams params;
  params.sampling.temperature = args.temperature;
  params.sampling.top_p = args.top_p;
  params.sampling.top_k = args.top_k;
  if (args.seed >= 0) params.sampling.seed = static_cast<uint64_t>(args.seed);
  params.max_tokens = args.max_new_tokens;
  params.stop = args.stop;
  params.ignore_eos = args.ignore_eos;
  if (!args.adapter.empty()) params.adapter = routed ? "auto" : "adapter";
  std::vector<engine::InputItem> inputs;
  if (!args.prompt_ids.empty()) {
    ASSIGN_OR_RETURN(params.prompt_ids, parse_ids(args.prompt_ids));
  } else if (!args.messages.empty()) {
    if (!args.images.empty()) return invalid_argument("--image goes with --prompt; put images in --messages parts");
    ASSIGN_OR_RETURN(nlohmann::ordered_json messages, read_messages(args.messages));
    api::ChatImageOptions image_options;
    image_options.local_paths = true;
    ASSIGN_OR_RETURN(params.messages, api::take_chat_images(messages, image_options, inputs));
  } else {
    inputs.emplace_back();
    inputs.back().text = args.prompt;
  }
  for (const std::string& path : args.images) {
    engine::InputItem image;
    image.kind = engine::InputKind::kImageBytes;
    ASSIGN_OR_RETURN(image.image_bytes, read_input_file(path));
    inputs.push_back(std::move(image));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const engine::ModelOutput> output,
                   run_local(*executor, *preparer, std::move(inputs), &params));
  const auto* out = engine::output_as<engine::LlamaOutput>(output);
  if (out == nullptr) return internal_error("the executor returned another family's output");
  nlohmann::json result = {{"prompt_ids", out->prompt_ids}, {"ids", out->ids}, {"text", out->text},
                           {"finish_reason", out->finish_reason}};
  if (!out->routed_adapters.empty()) {  // --adapter auto: what the gate chose
    result["adapters"] = nlohmann::json::array();
    for (size_t i = 0; i < out->routed_adapters.size(); ++i) {
      result["adapters"].push_back({{"name", out->routed_adapters[i]}, {"weight", out->routed_weights[i]}});
    }
  }
  return result;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  StatusOr<nlohmann::json> out = generate(args);
  if (!out.ok()) return fail(out.status().message());
  if (args.output == "text") {
    std::printf("%s\n", (*out)["text"].get<std::string>().c_str());
  } else {
    std::printf("%s\n", out->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

int run_chat_template(const ChatTemplateArgs& args) {
  StatusOr<std::string> prompt = render_chat(args.model_dir, args.messages, !args.no_generation_prompt);
  if (!prompt.ok()) return fail(prompt.status().message());
  std::printf("%s\n",
              nlohmann::json{{"prompt", *prompt}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace mmserve::cli
