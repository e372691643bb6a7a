// The BPE model of HF `tokenizers` (models::bpe): one pre-tokenized word in, token ids out.
//
// A word is split into characters; the last one gets `end_of_word_suffix` ("</w>" for CLIP), every one but
// the first gets `continuing_subword_prefix`; a character missing from the vocabulary becomes the unknown token
// (each on its own unless fuse_unk) or, with byte_fallback, its bytes as `<0xNN>` tokens when all of them are in
// the vocabulary; with ignore_merges a word that is itself in the vocabulary is that token. Then the pair with the
// lowest merge rank is merged, leftmost first on a tie, until no pair has a merge: HF's priority-queue algorithm,
// ported step for step. With explicit merge ranks (BpeConfig::merge_ranks) the same loop is tiktoken's
// `_byte_pair_merge` (tiktoken_ranks.h says why). Results are cached per word (bounded, shared-mutex guarded), so
// `tokenize` is const and safe from many threads. Tests: tests/unit/frontends/text/bpe_test.cpp,
// whisper_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mmserve::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeConfig {
  Vocab vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // Optional, one per merge: its rank when that is not its index. tiktoken ranks a pair by the rank of the
  // merged token, so every split of a token into two tokens is a merge with that token's rank (see
  // tiktoken_ranks.h). Empty: merge i has rank i (HF).
  std::vector<int32_t> merge_ranks;
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;  // a character missing from the vocabulary becomes its bytes' <0xNN> tokens
  bool ignore_merges = false;  // a word found in the vocabulary is one token, merges or not
};

class BpeModel {
 public:
  // Checks the config: ids non-negative, every merge's parts and result in the vocabulary, the unknown token in
  // the vocabulary. InvalidArgument naming the offending merge (1-based) or token otherwise.
  static StatusOr<std::unique_ptr<BpeModel>> create(BpeConfig config);

  // Appends the ids of `word` (one pre-token) to `out`. An empty word yields nothing.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token of `id`, or nullptr when no token has that id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id.
  int64_t id_limit() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::vector<int32_t> merge_word(std::string_view word) const;

  Vocab vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  int32_t unk_id_ = -1;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // byte -> id of its <0xNN> token, -1 when absent (byte_fallback only)

  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace mmserve::text
