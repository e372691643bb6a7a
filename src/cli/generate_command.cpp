// `mmserve generate` and `mmserve chat-template` for the Llama family of decoders (issue 14 item 6), on the CPU
// model (models/llama) until the decoder engine serves them.
//
// generate: the prompt is --prompt tokenised as HF's tokenizer(text) (the post-processor's special tokens),
// --prompt-ids used as given, or --messages rendered with the model's chat template (add_generation_prompt) and
// tokenised without special tokens (the template writes them), as apply_chat_template(tokenize=True) does. Tokens
// come from engine::TokenSampler (--temperature 0 is plain greedy); generation stops at max_new_tokens ("length"),
// an EOS id of config.json / generation_config.json unless --ignore-eos, or a --stop string found in the detokenised
// text ("stop"; the text ends before it). Prints {"prompt_ids", "ids", "text", "finish_reason"} (--output json) with
// `ids` the generated ids and `text` HF's decode(ids, skip_special_tokens=True) (cut at a stop string), or the text.
// chat-template: prints {"prompt": apply_chat_template(messages, tokenize=False, add_generation_prompt=...)}.
// Errors print "mmserve: error: ..." and exit 1. Tests: tests/e2e/cli_test.cpp (Generate*, ChatTemplate*).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/local_run.h"
#include "core/json_config.h"
#include "engine/token_sampler.h"
#include "frontends/text/chat_template/chat_template.h"
#include "frontends/text/hf_tokenizer.h"
#include "kernels/gemm/gemm.h"
#include "models/llama/llama.h"
#include "models/registry.h"

namespace mmserve::cli {
namespace {

Status check_llama(const std::string& model_dir, const char* command) {
  ASSIGN_OR_RETURN(models::Family family, models::detect_family(model_dir));
  if (family != models::Family::kLlama) {
    return invalid_argument(model_dir + ": " + command + " needs a Llama-family model (Llama, Mistral, Qwen2, Qwen3); "
                            "this is a " + models::family_name(family) + " model");
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

// The EOS ids: config.json's, generation_config.json's (which HF's generate uses), the tokenizer's.
std::vector<int32_t> eos_ids(const std::string& model_dir, const models::LlamaConfig& config,
                             const text::HfTokenizer& tokenizer) {
  std::vector<int32_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  auto generation = read_json_file(model_dir + "/generation_config.json");
  if (generation.ok() && generation->is_object() && generation->contains("eos_token_id")) {
    const nlohmann::json& e = (*generation)["eos_token_id"];
    if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
    if (e.is_array()) {
      for (const nlohmann::json& x : e) {
        if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
      }
    }
  }
  if (tokenizer.eos_id()) ids.push_back(*tokenizer.eos_id());
  return ids;
}

StatusOr<nlohmann::json> generate(const GenerateArgs& args) {
  RETURN_IF_ERROR(check_llama(args.model_dir, "generate"));
  if (args.device != "cpu") {
    return unimplemented("--device " + args.device + ": the Llama family runs on the CPU only so far (issue 14)");
  }
  if (args.dtype != "auto" && args.dtype != "f32") {
    return unimplemented("--dtype " + args.dtype + ": the CPU model computes in f32");
  }
  const int given = !args.prompt.empty() + !args.prompt_ids.empty() + !args.messages.empty();
  if (given != 1) return invalid_argument("give exactly one of --prompt, --prompt-ids and --messages");
  if (args.max_new_tokens < 1) return invalid_argument("--max-new-tokens must be at least 1");
  engine::SamplingParams sampling;
  sampling.temperature = args.temperature;
  sampling.top_p = args.top_p;
  sampling.top_k = args.top_k;
  if (args.seed >= 0) sampling.seed = static_cast<uint64_t>(args.seed);
  RETURN_IF_ERROR(engine::validate_sampling(sampling));
  ASSIGN_OR_RETURN(std::unique_ptr<text::HfTokenizer> tokenizer, text::HfTokenizer::from_model_dir(args.model_dir));
  std::vector<int32_t> prompt;
  if (!args.prompt_ids.empty()) {
    ASSIGN_OR_RETURN(prompt, parse_ids(args.prompt_ids));
  } else if (!args.prompt.empty()) {
    ASSIGN_OR_RETURN(prompt, tokenizer->encode(args.prompt, /*add_special_tokens=*/true));
  } else {
    ASSIGN_OR_RETURN(std::string rendered, render_chat(args.model_dir, args.messages, true));
    ASSIGN_OR_RETURN(prompt, tokenizer->encode(rendered, /*add_special_tokens=*/false));
  }
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  if (args.threads > 0) kernels::set_cpu_threads(args.threads);
  ASSIGN_OR_RETURN(std::unique_ptr<models::LlamaModel> model, models::LlamaModel::load(args.model_dir));
  const models::LlamaConfig& config = model->config();
  const int64_t length = static_cast<int64_t>(prompt.size());
  if (length >= model->max_length()) {
    return invalid_argument("the prompt has " + std::to_string(length) + " tokens; the model takes at most " +
                            std::to_string(model->max_length() - 1) + " before generating");
  }
  const int64_t budget = std::min<int64_t>(args.max_new_tokens, model->max_length() - length);
  ASSIGN_OR_RETURN(models::LlamaKvCache cache, model->new_cache(length + budget));
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  RETURN_IF_ERROR(model->forward(prompt.data(), length, cache, logits.data()));
  const std::vector<int32_t> eos = eos_ids(args.model_dir, config, *tokenizer);
  engine::TokenSampler sampler(sampling);
  text::IncrementalDetokenizer stream(*tokenizer, /*skip_special_tokens=*/true,
                                      text::IncrementalDetokenizer::Divergence::kResync);
  std::vector<int32_t> ids;
  std::string text;
  std::string finish = "length";
  while (static_cast<int64_t>(ids.size()) < budget) {
    const int32_t next = sampler.sample(logits, prompt, ids);
    ids.push_back(next);
    if (!args.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      finish = "stop";
      break;
    }
    ASSIGN_OR_RETURN(std::string piece, stream.step(next));
    text += piece;
    bool stopped = false;
    for (const std::string& stop : args.stop) {
      const size_t at = stop.empty() ? std::string::npos : text.find(stop);
      if (at != std::string::npos) {
        text.resize(at);
        stopped = true;
      }
    }
    if (stopped) {
      finish = "stop";
      break;
    }
    if (static_cast<int64_t>(ids.size()) == budget) break;
    RETURN_IF_ERROR(model->forward(&next, 1, cache, logits.data()));
  }
  if (finish == "length" || (finish == "stop" && !ids.empty() && std::find(eos.begin(), eos.end(), ids.back()) != eos.end())) {
    // No stop string cut the text: it is HF's decode of the generated ids.
    ASSIGN_OR_RETURN(text, tokenizer->decode(ids, /*skip_special_tokens=*/true));
  }
  return nlohmann::json{{"prompt_ids", prompt}, {"ids", ids}, {"text", text}, {"finish_reason", finish}};
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
