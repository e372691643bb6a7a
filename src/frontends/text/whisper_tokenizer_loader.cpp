// Loading a WhisperTokenizer from a .tiktoken file or an HF directory; every malformed input is a Status naming
// the file and the line or key, never a crash.
//
// - tiktoken: whisper's get_encoding(). The ranks become the vocabulary (tiktoken_ranks.h), the special tokens
//   are appended from id len(ranks) on in get_encoding's order, and a word that is itself a token is that token
//   (tiktoken's shortcut before BPE).
// - HF directory: tokenizer.json (tokenizers' Tokenizer.from_file: normalizer, pre-tokenizer, BPE, added
//   tokens), else vocab.json + merges.txt with GPT-2's ByteLevel pre-tokenizer (add_prefix_space from
//   tokenizer_config.json, default false) and added_tokens.json. tokenizer_config.json's added_tokens_decoder
//   replaces the added tokens when present (transformers 5); special tokens named in special_tokens_map.json /
//   tokenizer_config.json and not yet added are added from the vocabulary. The Whisper specials are then
//   found by their text ("<|nocaptions|>", the older name of <|nospeech|>, is accepted); directories written
//   before the timestamps became added tokens have timestamp_begin = <|notimestamps|> + 1, as HF assumes.
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp.
#include <algorithm>
#include <filesystem>

#include "core/json_config.h"
#include "frontends/text/hf_tokenizer_files.h"
#include "frontends/text/tiktoken_ranks.h"
#include "frontends/text/whisper_languages.h"
#include "frontends/text/whisper_tokenizer.h"

namespace mmserve::text {

using nlohmann::json;

namespace {

constexpr int32_t kAddedIdMax = 1 << 30;

std::string timestamp_text(int index) {
  const int centiseconds = index * 2;  // f"{i * 0.02:.2f}" without the float
  std::string s = "<|" + std::to_string(centiseconds / 100) + ".";
  s += static_cast<char>('0' + centiseconds % 100 / 10);
  s += static_cast<char>('0' + centiseconds % 10);
  return s + "|>";
}

// whisper/tokenizer.py get_encoding()'s `specials`, in order.
std::vector<std::string> whisper_specials(int num_languages) {
  std::vector<std::string> specials = {"<|endoftext|>", "<|startoftranscript|>"};
  for (int i = 0; i < num_languages; ++i) specials.push_back("<|" + std::string(whisper_languages()[i].code) + "|>");
  for (const char* s :
       {"<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"}) {
    specials.emplace_back(s);
  }
  for (int i = 0; i < WhisperTokenizer::kTimestampCount; ++i) specials.push_back(timestamp_text(i));
  return specials;
}

AddedToken special_token(std::string content, int32_t id) {
  AddedToken t;
  t.content = std::move(content);
  t.id = id;
  t.normalized = false;
  t.special = true;
  return t;
}

StatusOr<WhisperTask> parse_task(const std::string& task, const std::string& label) {
  if (task == "transcribe") return WhisperTask::kTranscribe;
  if (task == "translate") return WhisperTask::kTranslate;
  return invalid_argument(label + ": task '" + task + "' is not supported (transcribe or translate)");
}

}  // namespace

// Fills the private members of WhisperTokenizer (friend).
struct WhisperTokenizerBuilder {
  // Completes `t` (model, normalizer and pre-tokenizer set): added tokens and the Whisper special ids.
  static StatusOr<std::unique_ptr<WhisperTokenizer>> finish(std::unique_ptr<WhisperTokenizer> t,
                                                            std::vector<AddedToken> added, const std::string& label) {
    ASSIGN_OR_RETURN(t->added_, AddedVocabulary::build(std::move(added), t->normalizer_));
    int64_t limit = t->model_->id_limit();
    for (const AddedToken& token : t->added_.tokens()) {
      if (token.id > kAddedIdMax) {  // keeps the timestamp arithmetic far from overflow
        return invalid_argument(label + ": added token \"" + token.content + "\" has id " + std::to_string(token.id) +
                                " (at most " + std::to_string(kAddedIdMax) + ")");
      }
      t->special_text_.emplace(token.id, token.content);
      if (t->special_first_bytes_.find(token.content[0]) == std::string::npos) {
        t->special_first_bytes_ += token.content[0];
      }
      limit = std::max<int64_t>(limit, int64_t{token.id} + 1);
    }
    const auto find = [&](const std::string& content) -> std::optional<int32_t> {
      if (auto id = t->added_.id_of(content)) return id;
      if (auto id = t->model_->token_to_id(content)) {
        t->special_text_.emplace(*id, content);
        return id;
      }
      return std::nullopt;
    };
    const auto require = [&](const char* content, int32_t& id) -> Status {
      const auto found = find(content);
      if (!found) return invalid_argument(label + ": no special token " + content);
      id = *found;
      return ok_status();
    };
    RETURN_IF_ERROR(require("<|endoftext|>", t->eot_));
    RETURN_IF_ERROR(require("<|startoftranscript|>", t->sot_));
    for (const WhisperLanguage& language : whisper_languages()) {
      const auto id = find("<|" + std::string(language.code) + "|>");
      if (!id) break;
      t->language_ids_.push_back(*id);
    }
    RETURN_IF_ERROR(require("<|translate|>", t->translate_));
    RETURN_IF_ERROR(require("<|transcribe|>", t->transcribe_));
    RETURN_IF_ERROR(require("<|startoflm|>", t->sot_lm_));
    RETURN_IF_ERROR(require("<|startofprev|>", t->sot_prev_));
    if (const auto no_speech = find("<|nospeech|>")) {
      t->no_speech_ = *no_speech;
    } else {
      RETURN_IF_ERROR(require("<|nocaptions|>", t->no_speech_));  // HF's first Whisper files
    }
    RETURN_IF_ERROR(require("<|notimestamps|>", t->no_timestamps_));
    t->timestamp_begin_ = find("<|0.00|>").value_or(t->no_timestamps_ + 1);
    t->vocab_size_ = std::max<int64_t>(limit, int64_t{t->timestamp_end()} + 1);
    return t;
  }

  static StatusOr<std::unique_ptr<WhisperTokenizer>> from_tiktoken(std::string_view contents, int num_languages,
                                                                   const std::string& label) {
    if (num_languages < 0 || num_languages > kWhisperLanguagesMax) {
      return invalid_argument("num_languages must be in [0, " + std::to_string(kWhisperLanguagesMax) + "], got " +
                              std::to_string(num_languages));
    }
    ASSIGN_OR_RETURN(const std::vector<std::string> ranks, parse_tiktoken(contents, label));
    auto model = BpeModel::create(tiktoken_bpe_config(ranks));
    if (!model.ok()) return model.status().with_context(label);
    std::unique_ptr<WhisperTokenizer> t(new WhisperTokenizer());
    t->model_ = std::move(model).value();
    t->pre_tokenizer_ = PreTokenizer::gpt2();
    t->whole_word_lookup_ = true;
    std::vector<AddedToken> added;
    auto id = static_cast<int32_t>(ranks.size());
    for (std::string& special : whisper_specials(num_languages)) {
      added.push_back(special_token(std::move(special), id++));
    }
    return finish(std::move(t), std::move(added), label);
  }

  static StatusOr<std::unique_ptr<WhisperTokenizer>> from_model_dir(const std::string& dir);
};

namespace {

// tokenizer_config.json / special_tokens_map.json, when present.
StatusOr<json> read_optional_json(const std::string& path) {
  if (!hf::is_file(path)) return json::object();
  ASSIGN_OR_RETURN(json j, read_json_file(path));
  if (!j.is_object()) return invalid_argument(path + ": expected a JSON object");
  return j;
}

// added_tokens.json: {"content": id, ...}.
StatusOr<std::vector<AddedToken>> read_added_tokens_json(const std::string& path) {
  std::vector<AddedToken> tokens;
  if (!hf::is_file(path)) return tokens;
  ASSIGN_OR_RETURN(const json j, read_json_file(path));
  if (!j.is_object()) return invalid_argument(path + ": expected an object of token -> id");
  for (const auto& [content, id] : j.items()) {
    ASSIGN_OR_RETURN(const int32_t value, hf::parse_id(id, path + ": \"" + content + "\""));
    tokens.push_back(special_token(content, value));
  }
  std::sort(tokens.begin(), tokens.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  return tokens;
}

// Adds the special tokens that `config` (tokenizer_config.json or special_tokens_map.json) names and `added`
// lacks, with their vocabulary ids.
Status add_named_specials(const json& config, const std::string& path, const BpeModel& model,
                          std::vector<AddedToken>& added) {
  std::vector<std::pair<std::string, const json*>> named;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (const auto it = config.find(key); it != config.end() && !it->is_null()) named.emplace_back(key, &*it);
  }
  if (const auto extra = config.find("additional_special_tokens"); extra != config.end() && extra->is_array()) {
    for (size_t i = 0; i < extra->size(); ++i) {
      named.emplace_back("additional_special_tokens[" + std::to_string(i) + "]", &(*extra)[i]);
    }
  }
  for (const auto& [key, value] : named) {
    const std::string label = path + ": " + key;
    ASSIGN_OR_RETURN(AddedToken token, hf::parse_added_token(*value, label, true));
    const bool present =
        std::any_of(added.begin(), added.end(), [&](const AddedToken& t) { return t.content == token.content; });
    if (present) continue;
    const auto id = model.token_to_id(token.content);
    if (!id) return invalid_argument(label + ": special token \"" + token.content + "\" has no id");
    token.id = *id;
    token.special = true;
    added.push_back(std::move(token));
  }
  return ok_status();
}

// HF's prefix settings from tokenizer_config.json.
StatusOr<WhisperPrefix> parse_prefix(const json& config, const std::string& path) {
  WhisperPrefix prefix;
  if (const auto it = config.find("language"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) return invalid_argument(path + ": \"language\" must be a string");
    const auto code = whisper_language_code(it->get<std::string>());
    if (!code) return invalid_argument(path + ": unknown language '" + it->get<std::string>() + "'");
    prefix.language = std::string(*code);
  }
  if (const auto it = config.find("task"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) return invalid_argument(path + ": \"task\" must be a string");
    ASSIGN_OR_RETURN(prefix.task, parse_task(it->get<std::string>(), path));
  }
  prefix.predict_timestamps = hf::bool_or(config, "predict_timestamps", false);
  return prefix;
}

}  // namespace

StatusOr<std::unique_ptr<WhisperTokenizer>> WhisperTokenizerBuilder::from_model_dir(const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::string config_path = (root / "tokenizer_config.json").string();
  const std::string map_path = (root / "special_tokens_map.json").string();
  const std::string tokenizer_json = (root / "tokenizer.json").string();
  ASSIGN_OR_RETURN(const json config, read_optional_json(config_path));
  ASSIGN_OR_RETURN(const json special_map, read_optional_json(map_path));

  std::unique_ptr<WhisperTokenizer> t(new WhisperTokenizer());
  BpeConfig bpe;
  std::vector<AddedToken> added;
  std::string label;
  if (hf::is_file(tokenizer_json)) {
    label = tokenizer_json;
    ASSIGN_OR_RETURN(const json j, read_json_file(tokenizer_json));
    if (!j.is_object()) return invalid_argument(tokenizer_json + ": expected a JSON object");
    const json null_json;
    const auto member = [&](const char* key) -> const json& {
      const auto it = j.find(key);
      return it == j.end() ? null_json : *it;
    };
    ASSIGN_OR_RETURN(t->normalizer_, Normalizer::from_json(member("normalizer"), tokenizer_json + ": normalizer"));
    ASSIGN_OR_RETURN(t->pre_tokenizer_,
                     PreTokenizer::from_json(member("pre_tokenizer"), tokenizer_json + ": pre_tokenizer"));
    ASSIGN_OR_RETURN(bpe, hf::parse_bpe_model(member("model"), tokenizer_json));
    ASSIGN_OR_RETURN(added, hf::parse_added_tokens(j, tokenizer_json));
  } else {
    const std::string vocab_path = (root / "vocab.json").string();
    const std::string merges_path = (root / "merges.txt").string();
    if (!hf::is_file(vocab_path) || !hf::is_file(merges_path)) {
      return not_found(dir + ": no tokenizer.json, and no vocab.json + merges.txt");
    }
    label = vocab_path + " + " + merges_path;
    ASSIGN_OR_RETURN(const json vocab_json, read_json_file(vocab_path));
    ASSIGN_OR_RETURN(bpe.vocab, hf::parse_vocab(vocab_json, vocab_path));
    ASSIGN_OR_RETURN(const std::string merges_text, hf::read_text_file(merges_path));
    ASSIGN_OR_RETURN(bpe.merges, hf::parse_merges_txt(merges_text, merges_path));
    t->pre_tokenizer_ = PreTokenizer::gpt2(hf::bool_or(config, "add_prefix_space", false));
    ASSIGN_OR_RETURN(added, read_added_tokens_json((root / "added_tokens.json").string()));
  }
  // A byte-level model never needs its unknown token; HF's Whisper files name one that is an added token.
  if (bpe.unk_token && bpe.vocab.find(*bpe.unk_token) == bpe.vocab.end()) bpe.unk_token.reset();
  auto model = BpeModel::create(std::move(bpe));
  if (!model.ok()) return model.status().with_context(label);
  t->model_ = std::move(model).value();

  ASSIGN_OR_RETURN(auto decoder, hf::parse_added_tokens_decoder(config, config_path));
  if (decoder) added = std::move(*decoder);
  RETURN_IF_ERROR(add_named_specials(special_map, map_path, *t->model_, added));
  RETURN_IF_ERROR(add_named_specials(config, config_path, *t->model_, added));
  ASSIGN_OR_RETURN(t->hf_prefix_, parse_prefix(config, config_path));
  ASSIGN_OR_RETURN(auto tokenizer, finish(std::move(t), std::move(added), dir));
  if (!tokenizer->hf_prefix_.language.empty()) {
    RETURN_IF_ERROR(tokenizer->language_token(tokenizer->hf_prefix_.language).status().with_context(config_path));
  }
  return tokenizer;
}

StatusOr<std::unique_ptr<WhisperTokenizer>> WhisperTokenizer::from_tiktoken(std::string_view contents,
                                                                            int num_languages,
                                                                            const std::string& label) {
  return WhisperTokenizerBuilder::from_tiktoken(contents, num_languages, label);
}

StatusOr<std::unique_ptr<WhisperTokenizer>> WhisperTokenizer::from_tiktoken_file(const std::string& path,
                                                                                 int num_languages) {
  ASSIGN_OR_RETURN(const std::string contents, hf::read_text_file(path));
  return from_tiktoken(contents, num_languages, path);
}

StatusOr<std::unique_ptr<WhisperTokenizer>> WhisperTokenizer::from_model_dir(const std::string& dir) {
  return WhisperTokenizerBuilder::from_model_dir(dir);
}

}  // namespace mmserve::text
