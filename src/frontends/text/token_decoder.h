// The decoder stage of an HF `tokenizers` pipeline: token strings back to text (tokenizer.json's "decoder").
//
// Components, each as tokenizers' decode_chain (a list of token strings in, a list out): ByteLevel (GPT-2's
// alphabet back to bytes, all tokens fused into one string, ill-formed UTF-8 replaced by U+FFFD), ByteFallback
// (runs of <0xNN> tokens become their bytes when those are valid UTF-8, else one U+FFFD per byte token),
// Metaspace (the replacement becomes a space; in the first token it is dropped unless prepend_scheme is
// "never"), Replace (String or Regex pattern, per token), Fuse (all tokens into one), Strip (up to `start`
// leading and `stop` trailing `content` characters per token), BPEDecoder (the suffix becomes a space, dropped
// on the last token) and Sequence. The text is the concatenation of the chain's output; with no decoder the
// tokens are joined by single spaces (tokenizers' default). Other types are Unimplemented, named in the error.
// Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "frontends/text/onig_regex.h"

namespace mmserve::text {

class TokenDecoder {
 public:
  // `j` is tokenizer.json's "decoder" (null: none). `label` prefixes errors.
  static StatusOr<TokenDecoder> from_json(const nlohmann::json& j, const std::string& label);
  // A Sequence of the given decoder objects (what transformers builds for some tokenizer classes).
  static StatusOr<TokenDecoder> sequence(const std::vector<nlohmann::json>& steps, const std::string& label);

  // tokenizers' Decoder::decode: the chain over `tokens` (valid UTF-8 each), concatenated. Always valid UTF-8.
  std::string decode(std::vector<std::string> tokens) const;
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { kByteLevel, kByteFallback, kMetaspace, kReplace, kFuse, kStrip, kBpeSuffix };
  struct Step {
    Kind kind;
    std::shared_ptr<const OnigRegex> pattern;  // Replace
    std::string content;                       // Replace: replacement; Strip: the character; BPEDecoder: suffix
    std::string replacement;                   // Metaspace
    bool strip_first_replacement = true;       // Metaspace: prepend_scheme != never
    size_t start = 0;                          // Strip
    size_t stop = 0;
  };
  static Status add_from_json(const nlohmann::json& j, const std::string& label, std::vector<Step>& steps);
  std::vector<Step> steps_;
};

}  // namespace mmserve::text
