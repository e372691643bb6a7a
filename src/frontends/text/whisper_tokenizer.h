// The Whisper tokenizer: the reference `whisper` package's (tiktoken) and HF's WhisperTokenizer, id for id.
//
// Pipeline: the special tokens found in the text (when allowed), GPT-2's pre-tokenisation regex on the rest
// (PCRE2), bytes to GPT-2's byte-level alphabet, byte-level BPE (bpe.h) with the vocabulary's merge ranks.
// Two sources:
// - a .tiktoken file (the package's format, assets/whisper_tokenizer/): ranks as ids, tiktoken's merge rule
//   (tiktoken_ranks.h), and the special tokens appended after the ranks as whisper's get_encoding() does:
//   <|endoftext|>, <|startoftranscript|>, num_languages language tokens in the package's order, <|translate|>,
//   <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, then the 1501 timestamps
//   <|0.00|>..<|30.00|>. num_languages is 99 for every checkpoint but large-v3 (100, adds <|yue|>).
// - an HF model directory (what a model repository holds): tokenizer.json, or vocab.json + merges.txt +
//   added_tokens.json (+ special_tokens_map.json, tokenizer_config.json), HF's BPE and added tokens; the
//   special-token ids are looked up by their text, the number of languages is the number of language tokens
//   present.
// decode follows the package's Tokenizer.decode (timestamps dropped, other special tokens as their text, bytes
// decoded with errors="replace"). All state is immutable after loading except the BPE word cache, which
// guards itself: concurrent calls are safe.
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp (+ goldens from tiktoken and HF when generated).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "frontends/text/added_vocabulary.h"
#include "frontends/text/bpe.h"
#include "frontends/text/text_pipeline.h"

namespace mmserve::text {

// Whether special-token text in the input becomes the special token (kAll: tiktoken's allowed_special="all",
// HF's default) or is encoded as ordinary text (kNone: tiktoken's encode_ordinary; what user text should get).
enum class AllowSpecial { kAll, kNone };

enum class WhisperTask { kTranscribe, kTranslate };

// The decoder prompt HF's WhisperTokenizer puts before the text (its prefix_tokens), as a model directory's
// tokenizer_config.json configures it ("language", "task", "predict_timestamps").
struct WhisperPrefix {
  std::string language;  // a language code; empty: none
  std::optional<WhisperTask> task;
  bool predict_timestamps = false;
};

class WhisperTokenizer {
 public:
  static constexpr int kNumLanguagesDefault = 99;
  static constexpr int kTimestampCount = 1501;  // <|0.00|> .. <|30.00|>, 0.02 s apart

  // A .tiktoken file / its contents. InvalidArgument for a malformed file (with the line number) or a
  // num_languages outside [0, 100].
  static StatusOr<std::unique_ptr<WhisperTokenizer>> from_tiktoken_file(const std::string& path,
                                                                        int num_languages = kNumLanguagesDefault);
  static StatusOr<std::unique_ptr<WhisperTokenizer>> from_tiktoken(std::string_view contents, int num_languages,
                                                                   const std::string& label);
  // An HF directory: tokenizer.json if present, else vocab.json + merges.txt (+ added_tokens.json); added
  // tokens from tokenizer_config.json's added_tokens_decoder take precedence (transformers 5); the prefix
  // settings from tokenizer_config.json. NotFound when the directory has neither.
  static StatusOr<std::unique_ptr<WhisperTokenizer>> from_model_dir(const std::string& dir);

  // Token ids of valid UTF-8 `text` (InvalidArgument otherwise), no special tokens added.
  StatusOr<std::vector<int32_t>> encode(std::string_view text, AllowSpecial allow_special = AllowSpecial::kNone) const;

  // The package's Tokenizer.decode: timestamp ids (>= timestamp_begin()) dropped, other special tokens written
  // as their text (dropped too when skip_special), the bytes decoded as UTF-8 with every invalid sequence
  // replaced by U+FFFD. InvalidArgument for an id that is negative or not in the vocabulary.
  StatusOr<std::string> decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The same keeping timestamps, written as "<|1.08|>".
  StatusOr<std::string> decode_with_timestamps(const std::vector<int32_t>& ids) const;

  // The id of a token given as its bytes (an ordinary token) or its text (a special token), as tiktoken's
  // encode_single_token; nullopt when there is none.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The bytes of an ordinary token or the text of a special one; nullopt for an unknown id.
  std::optional<std::string> id_to_token(int32_t id) const;

  int32_t eot() const { return eot_; }
  int32_t sot() const { return sot_; }
  int32_t translate() const { return translate_; }
  int32_t transcribe() const { return transcribe_; }
  int32_t sot_lm() const { return sot_lm_; }
  int32_t sot_prev() const { return sot_prev_; }
  int32_t no_speech() const { return no_speech_; }
  int32_t no_timestamps() const { return no_timestamps_; }
  int32_t timestamp_begin() const { return timestamp_begin_; }                      // <|0.00|>
  int32_t timestamp_end() const { return timestamp_begin_ + kTimestampCount - 1; }  // <|30.00|>
  int32_t task_token(WhisperTask task) const { return task == WhisperTask::kTranslate ? translate_ : transcribe_; }

  // The token of a language given as a code or an English name ("en", "English", "mandarin").
  // InvalidArgument naming it when it is unknown or past this vocabulary's num_languages().
  StatusOr<int32_t> language_token(std::string_view language) const;
  // <|startoftranscript|> [<|language|>] [<|task|>] [<|notimestamps|> unless timestamps]; an empty language
  // or no task leaves that token out (the English-only models use neither).
  StatusOr<std::vector<int32_t>> sot_sequence(std::string_view language, std::optional<WhisperTask> task,
                                              bool timestamps) const;
  // HF's prefix_tokens for this directory's settings (hf_prefix()).
  StatusOr<std::vector<int32_t>> hf_prefix_tokens() const;
  const WhisperPrefix& hf_prefix() const { return hf_prefix_; }

  int num_languages() const { return static_cast<int>(language_ids_.size()); }
  // The language tokens' ids, in the package's order.
  const std::vector<int32_t>& language_ids() const { return language_ids_; }
  bool is_special(int32_t id) const { return special_text_.count(id) != 0; }
  bool is_timestamp(int32_t id) const { return id >= timestamp_begin_ && id <= timestamp_end(); }
  // One past the largest id (51865 for the multilingual vocabulary, 51864 for GPT-2's, 51866 for large-v3's).
  int64_t vocab_size() const { return vocab_size_; }
  // Whisper's own test (ModelDimensions: n_vocab >= 51865).
  bool is_multilingual() const { return vocab_size_ >= 51865; }

 private:
  WhisperTokenizer() = default;
  friend struct WhisperTokenizerBuilder;

  // Appends the text of timestamp `id` ("<|1.08|>").
  void append_timestamp(int32_t id, std::string& out) const;
  StatusOr<std::string> decode_impl(const std::vector<int32_t>& ids, bool keep_timestamps, bool skip_special) const;

  Normalizer normalizer_;  // none unless an HF tokenizer.json has one
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;                                  // the special (added) tokens, as matched in text
  std::unordered_map<int32_t, std::string> special_text_;  // id -> text of every special (added) token
  std::string special_first_bytes_;                        // first byte of each special token, for a fast skip
  bool whole_word_lookup_ = false;                         // tiktoken: a word that is a token is that token
  int32_t eot_ = -1, sot_ = -1, translate_ = -1, transcribe_ = -1, sot_lm_ = -1, sot_prev_ = -1, no_speech_ = -1,
          no_timestamps_ = -1, timestamp_begin_ = -1;
  std::vector<int32_t> language_ids_;
  int64_t vocab_size_ = 0;
  WhisperPrefix hf_prefix_;
};

}  // namespace mmserve::text
