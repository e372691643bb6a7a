// HfTokenizer's encode / decode and IncrementalDetokenizer (the loaders are in hf_tokenizer_loader.cpp).
//
// encode mirrors tokenizers' Tokenizer::encode_single_sequence + post_process; decode mirrors Tokenizer::decode;
// IncrementalDetokenizer::step mirrors tokenizers' step_decode_stream (decoders/mod.rs). A span "starts the
// input" for Metaspace's prepend_scheme "first" when it begins at byte 0 of the text and no normalizer step
// deleted its first character (tokenizers checks offsets_original().0 == 0).
// Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp, hf_tokenizer_real_test.cpp.
#include "frontends/text/hf_tokenizer.h"

#include <utility>

#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

Status HfTokenizer::encode_one(std::string_view text, std::vector<int32_t>& ids) const {
  RETURN_IF_ERROR(validate_utf8(text));
  std::vector<Segment> raw_segments;
  std::vector<Segment> normalized_segments;
  std::vector<std::string> words;
  added_.split_raw(text, raw_segments);
  for (const Segment& raw : raw_segments) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    bool keeps_start = true;
    ASSIGN_OR_RETURN(const std::string normalized, normalizer_.apply(raw.text, &keeps_start));
    const bool raw_starts = raw.text.data() == text.data() && keeps_start;
    normalized_segments.clear();
    added_.split_normalized(normalized, normalized_segments);
    for (const Segment& segment : normalized_segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
        continue;
      }
      words.clear();
      RETURN_IF_ERROR(
          pre_tokenizer_.apply(segment.text, words, raw_starts && segment.text.data() == normalized.data()));
      for (const std::string& word : words) model_->tokenize(word, ids);
    }
  }
  return ok_status();
}

StatusOr<std::vector<int32_t>> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> a;
  RETURN_IF_ERROR(encode_one(text, a));
  std::vector<int32_t> out;
  post_processor_.apply(a, nullptr, add_special_tokens, out);
  return out;
}

StatusOr<std::vector<int32_t>> HfTokenizer::encode_pair(std::string_view a, std::string_view b,
                                                        bool add_special_tokens) const {
  if (transformers_ && b.empty()) return encode(a, add_special_tokens);
  std::vector<int32_t> a_ids;
  std::vector<int32_t> b_ids;
  RETURN_IF_ERROR(encode_one(a, a_ids).with_context("first sequence"));
  RETURN_IF_ERROR(encode_one(b, b_ids).with_context("second sequence"));
  std::vector<int32_t> out;
  post_processor_.apply(a_ids, &b_ids, add_special_tokens, out);
  return out;
}

StatusOr<std::string> HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_) {
      return invalid_argument("id " + std::to_string(id) + " (position " + std::to_string(i) +
                              ") is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    }
    const std::string* token = id_to_token(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && special_contents_.count(*token) != 0) continue;
    tokens.push_back(*token);
  }
  return decoder_.decode(std::move(tokens));
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (const auto id = added_.id_of(token)) return id;
  return model_->token_to_id(token);
}

const std::string* HfTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = added_.find_by_id(id)) return &added->content;
  return model_->id_to_token(id);
}

bool HfTokenizer::is_special(int32_t id) const {
  const std::string* token = id_to_token(id);
  return token != nullptr && special_contents_.count(*token) != 0;
}

StatusOr<std::string> IncrementalDetokenizer::past_prefix(const std::string& text) const {
  if (text.compare(0, prefix_.size(), prefix_) == 0) return text.substr(prefix_.size());
  if (divergence_ == Divergence::kFail) {
    return failed_precondition("incremental decode: \"" + text + "\" does not extend \"" + prefix_ +
                               "\" (the decoder is not prefix-stable here)");
  }
  size_t common = 0;  // the longest common prefix, cut back to a character boundary
  while (common < text.size() && common < prefix_.size() && text[common] == prefix_[common]) ++common;
  while (common > 0 && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) --common;
  return text.substr(common);
}

StatusOr<std::string> IncrementalDetokenizer::step(int32_t id) {
  ids_.push_back(id);
  auto decoded = tokenizer_->decode(ids_, skip_special_tokens_);
  if (!decoded.ok()) {
    ids_.pop_back();
    return decoded.status();
  }
  const std::string& text = *decoded;
  if (text.size() <= prefix_.size() || ends_with_replacement(text)) return std::string();
  auto fresh = past_prefix(text);
  if (!fresh.ok()) {
    ids_.pop_back();
    return fresh.status();
  }
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  ASSIGN_OR_RETURN(prefix_, tokenizer_->decode(ids_, skip_special_tokens_));
  prefix_index_ = new_prefix_index;
  return fresh;
}

StatusOr<std::string> IncrementalDetokenizer::finish() {
  ASSIGN_OR_RETURN(const std::string text, tokenizer_->decode(ids_, skip_special_tokens_));
  std::string rest;
  if (text.size() > prefix_.size() || text.compare(0, prefix_.size(), prefix_) != 0) {
    ASSIGN_OR_RETURN(rest, past_prefix(text));
  }
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return rest;
}

}  // namespace mmserve::text
