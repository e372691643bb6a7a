// The post-processor stage of an HF `tokenizers` pipeline: the special tokens around one or two encoded
// sequences (tokenizer.json's "post_processor").
//
// TemplateProcessing (single / pair templates of SpecialToken and Sequence pieces, in the object form files use
// or the "[CLS] $A:0 [SEP]" string form, special_tokens giving each name its ids), BertProcessing ([CLS] A [SEP]
// (B [SEP])), RobertaProcessing (<s> A </s> (</s> B </s>)), ByteLevel (offsets only: no change to ids) and a
// Sequence of these (at most one of them adding tokens). With add_special_tokens false the sequences are
// concatenated unchanged, as tokenizers does. Other types are Unimplemented, named in the error.
// Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::text {

class PostProcessor {
 public:
  // `j` is tokenizer.json's "post_processor" (null: none).
  static StatusOr<PostProcessor> from_json(const nlohmann::json& j, const std::string& label);

  // The ids of `a` (and `b` when not null) with the template's special tokens, appended to `out`.
  void apply(const std::vector<int32_t>& a, const std::vector<int32_t>* b, bool add_special_tokens,
             std::vector<int32_t>& out) const;
  // Every special-token id the templates can add (to check them against the vocabulary).
  std::vector<int32_t> special_ids() const;

 private:
  struct Piece {
    int sequence = -1;         // 0: A, 1: B; -1: special tokens
    std::vector<int32_t> ids;  // the special token's ids
  };
  static Status add_from_json(const nlohmann::json& j, const std::string& label, PostProcessor& p);
  bool has_template_ = false;
  std::vector<Piece> single_;
  std::vector<Piece> pair_;
};

}  // namespace mmserve::text
