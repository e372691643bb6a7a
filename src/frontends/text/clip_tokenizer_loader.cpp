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
// The file readers shared with the Whisper loader are in hf_tokenizer_files.h; nlohmann is accessed through
// type-checked, non-throwing calls; the parse itself goes through core's read_json_file.
// Tests: tests/unit/frontends/text/clip_tokenizer_loader_test.cpp.
#include <algorithm>
#include <climits>
#include <filesystem>
#include <optional>

#include "core/json_config.h"
#include "frontends/text/clip_tokenizer_parts.h"
#include "frontends/text/hf_tokenizer_files.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

using hf::bool_or;
using hf::is_file;
using hf::parse_added_token;
using hf::parse_id;
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
  ASSIGN_OR_RETURN(auto decoder, hf::parse_added_tokens_decoder(j, path));
  if (decoder) config.added_tokens_decoder = std::move(decoder);
  if (const auto max = j.find("model_max_length"); max != j.end() && !max->is_null()) {
    if (!max->is_number() || max->get<double>() < 1) {
      return invalid_argument(path + ": model_max_length must be a positive number");
    }
    const double value = max->get<double>();  // HF writes 1e30 for "no limit"
    config.model_max_length = value >= static_cast<double>(INT_MAX) ? INT_MAX : static_cast<int>(value);
  }
  return ok_status();
}

// transformers 5 CLIPTokenizer's BPE parameters over a vocabulary and merges.
BpeConfig clip_bpe_config(Vocab vocab, hf::Merges merges, const TokenizerConfig& config) {
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
  ASSIGN_OR_RETURN(Vocab vocab, hf::parse_vocab(vocab_json, vocab_path));
  ASSIGN_OR_RETURN(const std::string merges_text, hf::read_text_file(merges_path));
  ASSIGN_OR_RETURN(auto merges, hf::parse_merges_txt(merges_text, merges_path));
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
  ASSIGN_OR_RETURN(BpeConfig bpe, hf::parse_bpe_model(member("model"), path));
  auto model = BpeModel::create(std::move(bpe));
  if (!model.ok()) return model.status().with_context(path);
  parts.model = std::move(model).value();
  RETURN_IF_ERROR(parse_post_processor(member("post_processor"), path + ": post_processor", parts));
  ASSIGN_OR_RETURN(auto added, hf::parse_added_tokens(j, path));
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
  ASSIGN_OR_RETURN(BpeConfig file_bpe, hf::parse_bpe_model(*model_json, tokenizer_json));
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
    ASSIGN_OR_RETURN(added, hf::parse_added_tokens(j, tokenizer_json));
  }
  return finish(std::move(parts), std::move(added), config, /*add_named=*/true, roberta_default);
}

}  // namespace mmserve::text
