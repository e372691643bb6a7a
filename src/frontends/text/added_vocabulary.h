// Added tokens (`<|startoftext|>`, `<|endoftext|>`, user additions): found in the text before BPE and emitted
// as their own ids, as HF `tokenizers`' AddedVocabulary does.
//
// Tokens with normalized == false are matched on the raw text first; the text between them is normalized and
// the normalized == true tokens (whose patterns are normalized the same way) are matched on that. Matching is
// leftmost-longest and non-overlapping over all patterns; `single_word` drops a match touching a word
// character (Rust regex `\w`), `lstrip` / `rstrip` widen a match over neighbouring White_Space.
// Tests: tests/unit/frontends/text/clip_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "frontends/text/text_pipeline.h"

namespace mmserve::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A piece of text: either an added token (id >= 0) or plain text still to be tokenized (id == -1).
struct Segment {
  std::string_view text;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `tokens` in HF's order (special tokens first, then the others, each in the order given); a later token with
  // the same content replaces an earlier one. Normalized tokens' patterns are `normalizer` applied to content.
  static StatusOr<AddedVocabulary> build(std::vector<AddedToken> tokens, const Normalizer& normalizer);

  // Splits `text` on the raw (normalized == false) / normalized tokens. Segments point into `text`; the
  // concatenation of the plain segments and the matched spans is `text`. An empty text gives one empty segment.
  void split_raw(std::string_view text, std::vector<Segment>& out) const;
  void split_normalized(std::string_view text, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The token with `id` (constant time), or nullptr.
  const AddedToken* find_by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;

 private:
  struct Pattern {
    std::string text;
    size_t token;  // index into tokens_
  };
  void split(std::string_view text, const std::vector<Pattern>& patterns, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  std::vector<Pattern> raw_patterns_;
  std::vector<Pattern> normalized_patterns_;
  std::unordered_map<int32_t, size_t> by_id_;  // id -> index into tokens_ (the last token with that id)
};

}  // namespace mmserve::text
