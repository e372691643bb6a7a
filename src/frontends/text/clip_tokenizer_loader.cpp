// Loading a ClipTokenizer: tokenizer.json, vocab.json + merges.txt, tokenizer_config.json,
// special_tokens_map.json; every malformed input is a Status naming the file and the key or line.
//
// Three entry points, three HF behaviours:
// - from_tokenizer_json(path): `tokenizers.Tokenizer.from_file` - normalizer, pre-tokenizer, BPE parameters,
//   added tokens (with their normalized/lstrip/rstrip/single_word flags) and post-processor all from the file.
// - from_vocab_merges(vocab, merges): transformers 5 `CLIPTokenizer(vocab, merges)` - the class's own pipeline
//   (text_pipeline.h, clip()), BPE(end_of_word_suffix "</w>", unk "<|endoftext|>"), RobertaProcessing(BOS, EOS)
//   and the named special tokens added as special, normalized=false tokens (TokenizersBackend._post_init).
// - from_model_dir(dir): transformers 5 `CLIPTokenizer.from_pretrained(dir)`. CLIPTokenizer has its own
//   __init__, so v5 takes only vocab, merges and post-processor from tokenizer.json and rebuilds the rest as
//   the class does; added tokens come from tokenizer_config.json's added_tokens_decoder when present, else
//   from tokenizer.json's added_tokens; special tokens named in the configs and not yet added are added as
//   special, normalized=false. Without tokenizer.json, vocab.json + merges.txt are used.
// nlohmann is accessed through type-checked, non-throwing calls; the parse itself goes through core's
// read_json_file. Tests: tests/unit/frontends/text/clip_tokenizer_loader_test.cpp.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/json_config.h"
#include "frontends/text/clip_tokenizer_parts.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

using nlohmann::json;

constexpr const char* kBos = "<|startoftext|>";
constexpr const char* kEos = "<|endoftext|>";
constexpr int kClipContextLength = 77;

// What tokenizer_config.json / special_tokens_map.json say (CLIPTokenizer's defaults when absent).
struct TokenizerConfig {
  struct Named {
    const char* key;
    AddedToken token;
    std::string source;  // file that named it, for errors
  };
  std::vector<Named> named;  // bos, eos, unk, pad, then additional special tokens
  std::optional<std::vector<AddedToken>> added_tokens_decoder;
  int model_max_length = kClipContextLength;

  TokenizerConfig() {
    for (const auto& [key, content] : {std::pair{"bos_token", kBos}, std::pair{"eos_token", kEos},
                                       std::pair{"unk_token", kEos}, std::pair{"pad_token", kEos}}) {
      named.push_back({key, special_token(content), "CLIPTokenizer default"});
    }
  }
  static AddedToken special_token(std::string content) {
    AddedToken t;
    t.content = std::move(content);
    t.normalized = false;
    t.special = true;
    return t;
  }
  const AddedToken& get(std::string_view key) const {
    for (const Named& n : named) {
      if (key == n.key) return n.token;
    }
    MMSERVE_CHECK(false, "no named token " + std::string(key));
    return named.front().token;
  }
};

bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

StatusOr<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return failed_precondition(path + ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return failed_precondition(path + ": read failed");
  return buffer.str();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// An AddedToken in any of HF's serialized forms: "text", or {"content": "text", "lstrip": ..., ...}.
// Defaults follow tokenizers' AddedToken: normalized = !special.
StatusOr<AddedToken> parse_added_token(const json& j, const std::string& label, bool special_default) {
  AddedToken t;
  if (j.is_string()) {
    t.content = j.get<std::string>();
    t.special = special_default;
    t.normalized = !t.special;
    return t;
  }
  if (!j.is_object()) return invalid_argument(label + ": expected a string or an AddedToken object");
  const auto content = j.find("content");
  if (content == j.end() || !content->is_string()) return invalid_argument(label + ": missing \"content\"");
  t.content = content->get<std::string>();
  t.special = bool_or(j, "special", special_default);
  t.single_word = bool_or(j, "single_word", false);
  t.lstrip = bool_or(j, "lstrip", false);
  t.rstrip = bool_or(j, "rstrip", false);
  t.normalized = bool_or(j, "normalized", !t.special);
  return t;
}

StatusOr<int32_t> parse_id(const json& j, const std::string& label) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() > INT32_MAX) {
    return invalid_argument(label + ": expected a non-negative integer id");
  }
  return static_cast<int32_t>(j.get<int64_t>());
}

// Reads one of tokenizer_config.json / special_tokens_map.json into `config` (a missing file changes nothing).
Status read_config_file(const std::string& path, TokenizerConfig& config) {
  if (!is_file(path)) return ok_status();
  ASSIGN_OR_RETURN(const json j, read_json_file(path));
  if (!j.is_object()) return invalid_argument(path + ": expected a JSON object");
  for (TokenizerConfig::Named& named : config.named) {
    const auto it = j.find(named.key);
    if (it == j.end() || it->is_null()) continue;
    ASSIGN_OR_RETURN(named.token, parse_added_token(*it, path + ": " + named.key, true));
    named.token.special = true;
    named.source = path + ": " + named.key;
  }
  if (const auto extra = j.find("additional_special_tokens"); extra != j.end() && extra->is_array()) {
    for (size_t i = 0; i < extra->size(); ++i) {
      const std::string label = path + ": additional_special_tokens[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(AddedToken token, parse_added_token((*extra)[i], label, true));
      token.special = true;
      config.named.push_back({"additional_special_token", std::move(token), label});
    }
  }
  if (const auto decoder = j.find("added_tokens_decoder"); decoder != j.end() && decoder->is_object()) {
    std::vector<AddedToken> tokens;
    for (const auto& [key, value] : decoder->items()) {
      const std::string label = path + ": added_tokens_decoder." + key;
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) return invalid_argument(label + ": bad id");
      ASSIGN_OR_RETURN(AddedToken token, parse_added_token(value, label, false));
      token.id = static_cast<int32_t>(id);
      tokens.push_back(std::move(token));
    }
    std::sort(tokens.begin(), tokens.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
    config.added_tokens_decoder = std::move(tokens);
  }
  if (const auto max = j.find("model_max_length"); max != j.end() && !max->is_null()) {
    if (!max->is_number() || max->get<double>() < 1) {
      return invalid_argument(path + ": model_max_length must be a positive number");
    }
    const double value = max->get<double>();  // HF writes 1e30 for "no limit"
    config.model_max_length = value >= static_cast<double>(INT_MAX) ? INT_MAX : static_cast<int>(value);
  }
  return ok_status();
}

StatusOr<Vocab> parse_vocab(const json& j, const std::string& label) {
  if (!j.is_object()) return invalid_argument(label + ": expected an object of token -> id");
  Vocab vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    ASSIGN_OR_RETURN(vocab[token], parse_id(id, label + ": \"" + token + "\""));
  }
  return vocab;
}

Status split_merge(std::string_view line, const std::string& label,
                   std::vector<std::pair<std::string, std::string>>& merges) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return invalid_argument(label + ": expected two space-separated symbols, got \"" + std::string(line) + "\"");
  }
  merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  return ok_status();
}

// merges.txt: an optional "#version" line, then one "a b" pair per line (blank lines ignored).
StatusOr<std::vector<std::pair<std::string, std::string>>> parse_merges_txt(const std::string& text,
                                                                            const std::string& path) {
  if (Status s = validate_utf8(text); !s.ok()) return s.with_context(path);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    RETURN_IF_ERROR(split_merge(line, path + ": line " + std::to_string(line_number), merges));
  }
  return merges;
}

// tokenizer.json's model.merges: ["a b", ...] (legacy) or [["a", "b"], ...].
StatusOr<std::vector<std::pair<std::string, std::string>>> parse_merges_json(const json& j, const std::string& label) {
  if (!j.is_array()) return invalid_argument(label + ": expected an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const json& m = j[i];
    const std::string item = label + "[" + std::to_string(i) + "]";
    if (m.is_string()) {
      RETURN_IF_ERROR(split_merge(m.get_ref<const std::string&>(), item, merges));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return invalid_argument(item + ": expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

// tokenizer.json's "model" as a BpeConfig (tokenizers' BPE parameters as written in the file).
StatusOr<BpeConfig> parse_bpe_model(const json& model, const std::string& label) {
  if (!model.is_object()) return invalid_argument(label + ": \"model\" must be an object");
  if (const auto type = model.find("type"); type != model.end() && *type != "BPE") {
    return unimplemented(label + ": model type " + type->dump() + " is not supported (BPE only)");
  }
  const auto vocab = model.find("vocab");
  const auto merges = model.find("merges");
  if (vocab == model.end()) return invalid_argument(label + ": model has no \"vocab\"");
  if (merges == model.end()) return invalid_argument(label + ": model has no \"merges\"");
  if (bool_or(model, "byte_fallback", false)) return unimplemented(label + ": BPE byte_fallback is not supported");
  if (bool_or(model, "ignore_merges", false)) return unimplemented(label + ": BPE ignore_merges is not supported");
  if (const auto dropout = model.find("dropout");
      dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return unimplemented(label + ": BPE dropout is not supported");
  }
  BpeConfig config;
  ASSIGN_OR_RETURN(config.vocab, parse_vocab(*vocab, label + ": model.vocab"));
  ASSIGN_OR_RETURN(config.merges, parse_merges_json(*merges, label + ": model.merges"));
  const auto string_or = [&model](const char* key) -> std::optional<std::string> {
    const auto it = model.find(key);
    return it != model.end() && it->is_string() ? std::optional(it->get<std::string>()) : std::nullopt;
  };
  config.unk_token = string_or("unk_token");
  config.continuing_subword_prefix = string_or("continuing_subword_prefix").value_or("");
  config.end_of_word_suffix = string_or("end_of_word_suffix").value_or("");
  config.fuse_unk = bool_or(model, "fuse_unk", false);
  return config;
}

// transformers 5 CLIPTokenizer's BPE parameters over a vocabulary and merges.
BpeConfig clip_bpe_config(Vocab vocab, std::vector<std::pair<std::string, std::string>> merges,
                          const TokenizerConfig& config) {
  BpeConfig bpe;
  bpe.vocab = std::move(vocab);
  bpe.merges = std::move(merges);
  bpe.unk_token = config.get("unk_token").content;
  bpe.end_of_word_suffix = "</w>";
  return bpe;
}

std::optional<int32_t> lookup(const ClipTokenizerParts& parts, std::string_view token) {
  if (auto id = parts.added.id_of(token)) return id;
  return parts.model->token_to_id(token);
}

// Post-processor -> the ids around the text. RobertaProcessing / BertProcessing (cls, sep),
// TemplateProcessing (its "single" template), ByteLevel (none), Sequence, or null (none).
Status parse_post_processor(const json& j, const std::string& label, ClipTokenizerParts& parts) {
  if (j.is_null()) return ok_status();
  const auto type = j.find("type");
  const std::string name = type != j.end() && type->is_string() ? type->get<std::string>() : "";
  if (name == "RobertaProcessing" || name == "BertProcessing") {
    const auto cls = j.find("cls");
    const auto sep = j.find("sep");
    const auto pair_id = [&](json::const_iterator it, const char* key) -> StatusOr<int32_t> {
      if (it == j.end() || !it->is_array() || it->size() != 2) {
        return invalid_argument(label + ": " + name + "." + key + " must be [token, id]");
      }
      return parse_id((*it)[1], label + ": " + name + "." + key);
    };
    ASSIGN_OR_RETURN(const int32_t cls_id, pair_id(cls, "cls"));
    ASSIGN_OR_RETURN(const int32_t sep_id, pair_id(sep, "sep"));
    parts.prefix_ids.push_back(cls_id);
    parts.suffix_ids.push_back(sep_id);
  } else if (name == "TemplateProcessing") {
    const auto single = j.find("single");
    const auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array() || specials == j.end() || !specials->is_object()) {
      return invalid_argument(label + ": TemplateProcessing needs \"single\" and \"special_tokens\"");
    }
    bool after_sequence = false;
    for (const json& piece : *single) {
      if (piece.is_object() && piece.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const json* special = piece.is_object() && piece.contains("SpecialToken") ? &piece["SpecialToken"] : nullptr;
      if (special == nullptr || !special->is_object() || !special->contains("id") || !(*special)["id"].is_string()) {
        return invalid_argument(label + ": bad TemplateProcessing piece " + piece.dump());
      }
      const std::string token = (*special)["id"].get<std::string>();
      const auto entry = specials->find(token);
      if (entry == specials->end() || !entry->is_object() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
        return invalid_argument(label + ": special token \"" + token + "\" has no ids");
      }
      for (const json& id : (*entry)["ids"]) {
        ASSIGN_OR_RETURN(const int32_t value, parse_id(id, label + ": special_tokens." + token));
        (after_sequence ? parts.suffix_ids : parts.prefix_ids).push_back(value);
      }
    }
  } else if (name == "Sequence") {
    const auto list = j.find("processors");
    if (list == j.end() || !list->is_array()) return invalid_argument(label + ": Sequence needs \"processors\"");
    for (const json& p : *list) RETURN_IF_ERROR(parse_post_processor(p, label, parts));
  } else if (name != "ByteLevel") {
    return unimplemented(label + ": post-processor type \"" + name + "\" is not supported");
  }
  return ok_status();
}

// Added tokens from a tokenizer.json "added_tokens" array.
StatusOr<std::vector<AddedToken>> parse_added_tokens(const json& tokenizer, const std::string& label) {
  std::vector<AddedToken> tokens;
  const auto list = tokenizer.find("added_tokens");
  if (list == tokenizer.end() || list->is_null()) return tokens;
  if (!list->is_array()) return invalid_argument(label + ": \"added_tokens\" must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string item = label + ": added_tokens[" + std::to_string(i) + "]";
    const json& entry = (*list)[i];
    ASSIGN_OR_RETURN(AddedToken token, parse_added_token(entry, item, false));
    const auto id = entry.is_object() ? entry.find("id") : entry.end();
    if (id == entry.end()) return invalid_argument(item + ": missing \"id\"");
    ASSIGN_OR_RETURN(token.id, parse_id(*id, item + ".id"));
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// Completes `parts` (model and pipeline already set): added tokens (plus, when `add_named`, the named special
// tokens not yet among them), BOS/EOS/PAD ids, and the post-processor when `roberta_default`.
StatusOr<std::unique_ptr<ClipTokenizer>> finish(ClipTokenizerParts parts, std::vector<AddedToken> added,
                                                const TokenizerConfig& config, bool add_named, bool roberta_default) {
  for (AddedToken& t : added) {  // a token of the model's vocabulary keeps that id (tokenizers' token_to_id)
    if (auto id = parts.model->token_to_id(t.content)) t.id = *id;
  }
  if (add_named) {
    for (const TokenizerConfig::Named& named : config.named) {
      const bool present = std::any_of(added.begin(), added.end(),
                                       [&](const AddedToken& t) { return t.content == named.token.content; });
      if (present) continue;
      const auto id = parts.model->token_to_id(named.token.content);
      if (!id) {
        return invalid_argument(named.source + ": special token \"" + named.token.content +
                                "\" is not in the vocabulary");
      }
      AddedToken token = named.token;
      token.id = *id;
      added.push_back(std::move(token));
    }
  }
  ASSIGN_OR_RETURN(parts.added, AddedVocabulary::build(std::move(added), parts.normalizer));
  int32_t* const ids[] = {&parts.bos_id, &parts.eos_id, nullptr, &parts.pad_id};
  for (size_t i = 0; i < 4; ++i) {
    const TokenizerConfig::Named& named = config.named[i];
    const auto id = lookup(parts, named.token.content);
    if (!id) {
      return invalid_argument(named.source + ": special token \"" + named.token.content +
                              "\" is not in the vocabulary");
    }
    if (ids[i] != nullptr) *ids[i] = *id;
  }
  if (roberta_default) {
    parts.prefix_ids = {parts.bos_id};
    parts.suffix_ids = {parts.eos_id};
  }
  parts.model_max_length = config.model_max_length;
  return make_clip_tokenizer(std::move(parts));
}

StatusOr<ClipTokenizerParts> clip_pipeline() {
  ClipTokenizerParts parts;
  ASSIGN_OR_RETURN(parts.normalizer, Normalizer::clip());
  ASSIGN_OR_RETURN(parts.pre_tokenizer, PreTokenizer::clip());
  return parts;
}

StatusOr<std::unique_ptr<ClipTokenizer>> load_vocab_merges(const std::string& vocab_path,
                                                           const std::string& merges_path,
                                                           const TokenizerConfig& config,
                                                           std::vector<AddedToken> added) {
  ASSIGN_OR_RETURN(const json vocab_json, read_json_file(vocab_path));
  ASSIGN_OR_RETURN(Vocab vocab, parse_vocab(vocab_json, vocab_path));
  ASSIGN_OR_RETURN(const std::string merges_text, read_text_file(merges_path));
  ASSIGN_OR_RETURN(auto merges, parse_merges_txt(merges_text, merges_path));
  ASSIGN_OR_RETURN(ClipTokenizerParts parts, clip_pipeline());
  auto model = BpeModel::create(clip_bpe_config(std::move(vocab), std::move(merges), config));
  if (!model.ok()) return model.status().with_context(vocab_path + " + " + merges_path);
  parts.model = std::move(model).value();
  return finish(std::move(parts), std::move(added), config, /*add_named=*/true, /*roberta_default=*/true);
}

}  // namespace

StatusOr<std::unique_ptr<ClipTokenizer>> ClipTokenizer::from_vocab_merges(const std::string& vocab_path,
                                                                          const std::string& merges_path) {
  return load_vocab_merges(vocab_path, merges_path, TokenizerConfig(), {});
}

StatusOr<std::unique_ptr<ClipTokenizer>> ClipTokenizer::from_tokenizer_json(const std::string& path) {
  ASSIGN_OR_RETURN(const json j, read_json_file(path));
  if (!j.is_object()) return invalid_argument(path + ": expected a JSON object");
  const json null_json;
  const auto member = [&](const char* key) -> const json& {
    const auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  ClipTokenizerParts parts;
  ASSIGN_OR_RETURN(parts.normalizer, Normalizer::from_json(member("normalizer"), path + ": normalizer"));
  ASSIGN_OR_RETURN(parts.pre_tokenizer, PreTokenizer::from_json(member("pre_tokenizer"), path + ": pre_tokenizer"));
  ASSIGN_OR_RETURN(BpeConfig bpe, parse_bpe_model(member("model"), path));
  auto model = BpeModel::create(std::move(bpe));
  if (!model.ok()) return model.status().with_context(path);
  parts.model = std::move(model).value();
  RETURN_IF_ERROR(parse_post_processor(member("post_processor"), path + ": post_processor", parts));
  ASSIGN_OR_RETURN(auto added, parse_added_tokens(j, path));
  return finish(std::move(parts), std::move(added), TokenizerConfig(), /*add_named=*/false,
                /*roberta_default=*/false);
}

StatusOr<std::unique_ptr<ClipTokenizer>> ClipTokenizer::from_model_dir(const std::string& dir) {
  const std::filesystem::path root(dir);
  TokenizerConfig config;
  RETURN_IF_ERROR(read_config_file((root / "tokenizer_config.json").string(), config));
  RETURN_IF_ERROR(read_config_file((root / "special_tokens_map.json").string(), config));

  const std::string tokenizer_json = (root / "tokenizer.json").string();
  if (!is_file(tokenizer_json)) {
    const std::string vocab = (root / "vocab.json").string();
    const std::string merges = (root / "merges.txt").string();
    if (!is_file(vocab) || !is_file(merges)) {
      return not_found(dir + ": no tokenizer.json, and no vocab.json + merges.txt");
    }
    return load_vocab_merges(vocab, merges, config, config.added_tokens_decoder.value_or(std::vector<AddedToken>{}));
  }

  ASSIGN_OR_RETURN(const json j, read_json_file(tokenizer_json));
  if (!j.is_object()) return invalid_argument(tokenizer_json + ": expected a JSON object");
  const auto model_json = j.find("model");
  if (model_json == j.end()) return invalid_argument(tokenizer_json + ": no \"model\"");
  ASSIGN_OR_RETURN(BpeConfig file_bpe, parse_bpe_model(*model_json, tokenizer_json));
  ASSIGN_OR_RETURN(ClipTokenizerParts parts, clip_pipeline());
  auto model = BpeModel::create(clip_bpe_config(std::move(file_bpe.vocab), std::move(file_bpe.merges), config));
  if (!model.ok()) return model.status().with_context(tokenizer_json);
  parts.model = std::move(model).value();
  // A null post-processor leaves the class's RobertaProcessing(BOS, EOS) in place.
  const auto post = j.find("post_processor");
  const bool roberta_default = post == j.end() || post->is_null();
  if (!roberta_default) RETURN_IF_ERROR(parse_post_processor(*post, tokenizer_json + ": post_processor", parts));
  std::vector<AddedToken> added;
  if (config.added_tokens_decoder) {
    added = *config.added_tokens_decoder;
  } else {
    ASSIGN_OR_RETURN(added, parse_added_tokens(j, tokenizer_json));
  }
  return finish(std::move(parts), std::move(added), config, /*add_named=*/true, roberta_default);
}

}  // namespace mmserve::text
