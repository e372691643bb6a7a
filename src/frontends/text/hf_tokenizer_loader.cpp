// HfTokenizer's loaders: tokenizer.json's components (normalizer, pre_tokenizer, model, added_tokens,
// post_processor, decoder) and tokenizer_config.json, with transformers 5's class rules.
//
// transformers 5 (5.17, checked on the GPU host: tools/reference/hf_tokenizer_goldens.py) builds the pipeline in
// the tokenizer class's __init__ for some classes instead of taking tokenizer.json's. The one implemented here is
// LlamaTokenizer / LlamaTokenizerFast (Llama 2, Mistral, Mixtral): no normalizer; Metaspace("▁", prepend_scheme,
// split=false) with prepend_scheme "never" when add_prefix_space is false, else "always" when legacy, else
// "first"; decoder Replace("▁", " "), ByteFallback, Fuse, then Strip(" ", 1, 0) when add_prefix_space; BPE with
// the file's vocabulary and merges, fuse_unk and byte_fallback on, no unk_token. The post-processor and added
// tokens stay the file's; add_bos_token / add_eos_token change nothing (HF ignored both in every variant tried).
// Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp, hf_tokenizer_real_test.cpp.
#include <algorithm>
#include <filesystem>
#include <utility>

#include "core/json_config.h"
#include "frontends/text/hf_tokenizer.h"
#include "frontends/text/hf_tokenizer_files.h"

namespace mmserve::text {

using nlohmann::json;

class HfTokenizerLoader {
 public:
  static StatusOr<std::unique_ptr<HfTokenizer>> load(const json& tokenizer, const json& config,
                                                     const std::string& label);

 private:
  static StatusOr<HfTokenizerConfig> parse_config(const json& config, const std::string& label);
  static Status apply_llama_class(const HfTokenizerConfig& config, const std::string& label, HfTokenizer& t,
                                  BpeConfig& bpe);
};

namespace {

// A token in tokenizer_config.json: "text", {"content": "text", ...} or null.
StatusOr<std::optional<std::string>> config_token(const json& config, const char* key, const std::string& label) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return std::optional<std::string>(content->get<std::string>());
  }
  return invalid_argument(label + ": \"" + key + "\" must be a string, an AddedToken object or null");
}

StatusOr<std::optional<bool>> config_bool(const json& config, const char* key, const std::string& label) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return invalid_argument(label + ": \"" + key + "\" must be a boolean");
  return std::optional<bool>(it->get<bool>());
}

const json& member(const json& j, const char* key) {
  static const json null_json;
  const auto it = j.find(key);
  return it == j.end() ? null_json : *it;
}

}  // namespace

StatusOr<HfTokenizerConfig> HfTokenizerLoader::parse_config(const json& config, const std::string& label) {
  HfTokenizerConfig c;
  if (config.is_null()) return c;
  if (!config.is_object()) return invalid_argument(label + ": expected a JSON object");
  if (const auto it = config.find("tokenizer_class"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) return invalid_argument(label + ": \"tokenizer_class\" must be a string");
    c.tokenizer_class = it->get<std::string>();
  }
  ASSIGN_OR_RETURN(c.bos_token, config_token(config, "bos_token", label));
  ASSIGN_OR_RETURN(c.eos_token, config_token(config, "eos_token", label));
  ASSIGN_OR_RETURN(c.pad_token, config_token(config, "pad_token", label));
  ASSIGN_OR_RETURN(c.unk_token, config_token(config, "unk_token", label));
  ASSIGN_OR_RETURN(c.add_bos_token, config_bool(config, "add_bos_token", label));
  ASSIGN_OR_RETURN(c.add_eos_token, config_bool(config, "add_eos_token", label));
  ASSIGN_OR_RETURN(c.legacy, config_bool(config, "legacy", label));
  ASSIGN_OR_RETURN(c.add_prefix_space, config_bool(config, "add_prefix_space", label));
  ASSIGN_OR_RETURN(const auto clean_up, config_bool(config, "clean_up_tokenization_spaces", label));
  c.clean_up_tokenization_spaces = clean_up.value_or(false);
  if (const auto it = config.find("model_max_length"); it != config.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0) {
      return invalid_argument(label + ": \"model_max_length\" must be a non-negative number");
    }
    // HF writes 1e30 for "no limit": anything past int64 is no limit.
    c.model_max_length = it->get<double>() >= 9.0e18 ? 0 : static_cast<int64_t>(it->get<double>());
  }
  return c;
}

Status HfTokenizerLoader::apply_llama_class(const HfTokenizerConfig& config, const std::string& label, HfTokenizer& t,
                                            BpeConfig& bpe) {
  const bool add_prefix_space = config.add_prefix_space.value_or(true);
  const char* scheme = !add_prefix_space ? "never" : config.legacy.value_or(false) ? "always" : "first";
  t.normalizer_ = Normalizer();
  ASSIGN_OR_RETURN(
      t.pre_tokenizer_,
      PreTokenizer::from_json(
          json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", false}},
          label + ": LlamaTokenizer pre_tokenizer"));
  std::vector<json> decoders = {
      json{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
      json{{"type", "ByteFallback"}},
      json{{"type", "Fuse"}},
  };
  if (add_prefix_space) decoders.push_back(json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  ASSIGN_OR_RETURN(t.decoder_, TokenDecoder::sequence(decoders, label + ": LlamaTokenizer decoder"));
  bpe.fuse_unk = true;
  bpe.byte_fallback = true;
  bpe.ignore_merges = false;
  bpe.unk_token.reset();
  bpe.continuing_subword_prefix.clear();
  bpe.end_of_word_suffix.clear();
  return ok_status();
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizerLoader::load(const json& j, const json& config_json,
                                                               const std::string& label) {
  if (!j.is_object()) return invalid_argument(label + ": expected a JSON object");
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  ASSIGN_OR_RETURN(t->config_, parse_config(config_json, label + " (tokenizer_config.json)"));
  t->transformers_ = !config_json.is_null();
  ASSIGN_OR_RETURN(t->normalizer_, Normalizer::from_json(member(j, "normalizer"), label + ": normalizer"));
  ASSIGN_OR_RETURN(t->pre_tokenizer_, PreTokenizer::from_json(member(j, "pre_tokenizer"), label + ": pre_tokenizer"));
  ASSIGN_OR_RETURN(t->post_processor_,
                   PostProcessor::from_json(member(j, "post_processor"), label + ": post_processor"));
  ASSIGN_OR_RETURN(t->decoder_, TokenDecoder::from_json(member(j, "decoder"), label + ": decoder"));
  if (!j.contains("model")) return invalid_argument(label + ": no \"model\"");
  ASSIGN_OR_RETURN(BpeConfig bpe, hf::parse_bpe_model(j["model"], label));
  const std::string& cls = t->config_.tokenizer_class;
  if (cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast") {
    RETURN_IF_ERROR(apply_llama_class(t->config_, label, *t, bpe));
  }
  auto model = BpeModel::create(std::move(bpe));
  if (!model.ok()) return model.status().with_context(label);
  t->model_ = std::move(model).value();

  ASSIGN_OR_RETURN(std::vector<AddedToken> added, hf::parse_added_tokens(j, label));
  for (const AddedToken& token : added) {
    if (token.special) t->special_contents_.insert(token.content);
  }
  auto vocabulary = AddedVocabulary::build(std::move(added), t->normalizer_);
  if (!vocabulary.ok()) return vocabulary.status().with_context(label);
  t->added_ = std::move(vocabulary).value();

  t->vocab_size_ = t->model_->id_limit();
  for (const AddedToken& token : t->added_.tokens())
    t->vocab_size_ = std::max<int64_t>(t->vocab_size_, int64_t{token.id} + 1);
  for (const int32_t id : t->post_processor_.special_ids()) {
    if (id >= t->vocab_size_) {
      return invalid_argument(label + ": post_processor: special token id " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(t->vocab_size_) + ")");
    }
  }
  const auto id_of = [&t](const std::optional<std::string>& token) -> std::optional<int32_t> {
    return token ? t->token_to_id(*token) : std::nullopt;
  };
  t->bos_id_ = id_of(t->config_.bos_token);
  t->eos_id_ = id_of(t->config_.eos_token);
  t->pad_id_ = id_of(t->config_.pad_token);
  return t;
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::from_json(const json& tokenizer, const json& config,
                                                              const std::string& label) {
  return HfTokenizerLoader::load(tokenizer, config, label);
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::from_tokenizer_json(const std::string& path) {
  ASSIGN_OR_RETURN(const json j, read_json_file(path));
  return HfTokenizerLoader::load(j, json(), path);
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::from_model_dir(const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::string tokenizer_json = (root / "tokenizer.json").string();
  if (!hf::is_file(tokenizer_json)) return not_found(dir + ": no tokenizer.json");
  ASSIGN_OR_RETURN(const json j, read_json_file(tokenizer_json));
  json config = json::object();  // transformers' rules apply without a tokenizer_config.json too
  const std::string config_path = (root / "tokenizer_config.json").string();
  if (hf::is_file(config_path)) {
    ASSIGN_OR_RETURN(config, read_json_file(config_path));
  }
  return HfTokenizerLoader::load(j, config, tokenizer_json);
}

}  // namespace mmserve::text
