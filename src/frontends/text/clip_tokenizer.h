// The CLIP tokenizer, identical to HF's (fast) CLIPTokenizer.
//
// Pipeline: split out special-token strings present in the text (`<|startoftext|>`, `<|endoftext|>`, any
// added tokens), then for each other span: NFC normalisation (utf8proc), whitespace runs collapsed to one
// space, lower-casing, CLIP's pre-tokenisation regex (PCRE2 with Unicode properties:
// `<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+`), bytes to
// GPT-2's byte-to-unicode alphabet, byte-level BPE with the `</w>` end-of-word suffix (merge ranks from
// merges.txt / tokenizer.json), a per-word cache. Then BOS/EOS and truncation to `model_max_length` (77).
// Loads from `tokenizer.json` or `vocab.json` + `merges.txt` (+ `tokenizer_config.json`/`special_tokens_map.json`
// when present). Input must be valid UTF-8 (a Status otherwise).
// Tests: tests/unit/frontends/text/*_test.cpp, tests/conformance/clip_tokenizer_conformance_test.cpp;
// fuzz: fuzz/clip_tokenizer_fuzz.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mmserve::text {

struct EncodeOptions {
  bool add_special_tokens = true;  // BOS ... EOS
  int max_length = 77;             // truncation (EOS kept last, as HF); 0 = no truncation
};

class ClipTokenizer {
 public:
  // From an HF model directory: tokenizer.json if present, else vocab.json + merges.txt.
  static StatusOr<std::unique_ptr<ClipTokenizer>> from_model_dir(const std::string& dir);
  static StatusOr<std::unique_ptr<ClipTokenizer>> from_tokenizer_json(const std::string& path);
  static StatusOr<std::unique_ptr<ClipTokenizer>> from_vocab_merges(const std::string& vocab_path,
                                                                    const std::string& merges_path);
  virtual ~ClipTokenizer() = default;

  virtual StatusOr<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options = {}) const = 0;
  // Token ids back to text (`</w>` becomes a space, special tokens kept), for debugging and tests.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int model_max_length() const = 0;
};

}  // namespace mmserve::text
