// The normalizer and pre-tokenizer stages of an HF `tokenizers` pipeline (CLIP, Whisper, HfTokenizer).
//
// Normalizer: a sequence of NFC / NFD / NFKC / NFKD / Replace(pattern, content) / Lowercase / Prepend / Strip.
// Pre-tokenizer: a sequence of Split(pattern, behavior, invert), ByteLevel(add_prefix_space, use_regex),
// Metaspace(replacement, prepend_scheme, split), Digits(individual_digits), Whitespace, WhitespaceSplit and
// CharDelimiterSplit. Both are read from the "normalizer" / "pre_tokenizer" objects of a tokenizer.json (null:
// none) or built as transformers 5's CLIPTokenizer builds them (`clip()`): NFC, Replace(\s+ -> " "), Lowercase;
// then Split(<CLIP regex>, removed, invert) and ByteLevel(add_prefix_space=false, use_regex=true), where
// use_regex applies GPT-2's regex to each piece. Other component types are Unimplemented (named in the error).
// Metaspace's prepend_scheme "first" needs to know whether a piece starts the input: pieces carry that flag
// (a piece starts the input when it starts at offset 0 of a segment that does; tokenizers asks the same of its
// offsets into the original text). Tests: tests/unit/frontends/text/*_test.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "frontends/text/onig_regex.h"

namespace mmserve::text {

// transformers 5 CLIPTokenizer's split pattern (the special-token alternatives first).
inline constexpr const char* kClipSplitPattern =
    R"(<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";

class Normalizer {
 public:
  static StatusOr<Normalizer> clip();
  // `j` is tokenizer.json's "normalizer" (null: no normalisation). `label` prefixes errors.
  static StatusOr<Normalizer> from_json(const nlohmann::json& j, const std::string& label);
  // Normalises valid UTF-8 text (the result is valid UTF-8 too). `*keeps_start` (optional) is cleared when a step
  // deleted the text's first character (Strip, or a Replace with empty content matching at offset 0): what is
  // left then no longer starts at offset 0 of the original.
  StatusOr<std::string> apply(std::string_view text, bool* keeps_start = nullptr) const;
  // True when apply() returns its input unchanged (no steps).
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip };
  struct Step {
    Kind kind;
    std::shared_ptr<const OnigRegex> pattern;  // Replace
    std::string content;                       // Replace: the replacement; Prepend: the prefix
    bool strip_left = false;                   // Strip
    bool strip_right = false;
  };
  static Status add_from_json(const nlohmann::json& j, const std::string& label, std::vector<Step>& steps);
  std::vector<Step> steps_;
};

class PreTokenizer {
 public:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class PrependScheme { kAlways, kFirst, kNever };

  static StatusOr<PreTokenizer> clip();
  // GPT-2's (and Whisper's): ByteLevel(add_prefix_space, use_regex=true) - GPT-2's regex
  // `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, then bytes to GPT-2's alphabet.
  static PreTokenizer gpt2(bool add_prefix_space = false);
  // `j` is tokenizer.json's "pre_tokenizer" (null: the whole span is one word).
  static StatusOr<PreTokenizer> from_json(const nlohmann::json& j, const std::string& label);
  // Splits one normalized span into the words BPE sees, appended to `words` (byte-level spelled when a
  // ByteLevel step is present). Empty words are dropped. `starts_input`: the span starts the whole input (for
  // Metaspace's prepend_scheme "first").
  Status apply(std::string_view normalized, std::vector<std::string>& words, bool starts_input = true) const;
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  struct Step {
    Kind kind = Kind::kSplit;
    // Split (Digits, Whitespace, WhitespaceSplit and CharDelimiterSplit are Splits too)
    std::shared_ptr<const OnigRegex> pattern;
    Behavior behavior = Behavior::kRemoved;
    bool invert = false;
    // ByteLevel
    bool add_prefix_space = false;
    bool use_regex = true;
    // Metaspace
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;
  };
  static Status add_from_json(const nlohmann::json& j, const std::string& label, std::vector<Step>& steps);
  std::vector<Step> steps_;
};

}  // namespace mmserve::text
