// WhisperTokenizer's encoder, decoder and special-token queries over the stages assembled by the loaders
// (whisper_tokenizer_loader.cpp).
//
// encode mirrors tiktoken's Encoding.encode / HF tokenizers' encode for one sequence without post-processing:
// special tokens split out of the raw text (AddedVocabulary: leftmost match; the Whisper specials never
// overlap), the rest normalized (never, for Whisper's files), GPT-2's regex, then per word either the token
// the whole word is (tiktoken's shortcut, tiktoken source only) or BPE. decode concatenates token bytes and
// special-token text and decodes once, so a character split across tokens comes out whole, and a partial one
// becomes U+FFFD exactly where Python's bytes.decode(errors="replace") puts it.
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp.
#include "frontends/text/whisper_tokenizer.h"

#include "frontends/text/byte_level.h"
#include "frontends/text/unicode_text.h"
#include "frontends/text/whisper_languages.h"

namespace mmserve::text {

StatusOr<std::vector<int32_t>> WhisperTokenizer::encode(std::string_view text, AllowSpecial allow_special) const {
  RETURN_IF_ERROR(validate_utf8(text));
  const bool split_special = allow_special == AllowSpecial::kAll && !added_.tokens().empty() &&
                             (!normalizer_.empty() || text.find_first_of(special_first_bytes_) != text.npos);
  std::vector<int32_t> ids;
  std::vector<Segment> raw_segments;
  std::vector<Segment> normalized_segments;
  std::vector<std::string> words;
  if (split_special) {
    added_.split_raw(text, raw_segments);
  } else {
    raw_segments.push_back({text, -1});
  }
  for (const Segment& raw : raw_segments) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string normalized;
    std::string_view plain = raw.text;
    if (!normalizer_.empty()) {
      ASSIGN_OR_RETURN(normalized, normalizer_.apply(raw.text));
      plain = normalized;
    }
    normalized_segments.clear();
    if (split_special) {
      added_.split_normalized(plain, normalized_segments);
    } else {
      normalized_segments.push_back({plain, -1});
    }
    for (const Segment& segment : normalized_segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
        continue;
      }
      words.clear();
      RETURN_IF_ERROR(pre_tokenizer_.apply(segment.text, words));
      for (const std::string& word : words) {
        if (whole_word_lookup_) {
          if (const auto id = model_->token_to_id(word)) {
            ids.push_back(*id);
            continue;
          }
        }
        model_->tokenize(word, ids);
      }
    }
  }
  return ids;
}

StatusOr<std::string> WhisperTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return decode_impl(ids, /*keep_timestamps=*/false, skip_special);
}

StatusOr<std::string> WhisperTokenizer::decode_with_timestamps(const std::vector<int32_t>& ids) const {
  return decode_impl(ids, /*keep_timestamps=*/true, /*skip_special=*/false);
}

StatusOr<std::string> WhisperTokenizer::decode_impl(const std::vector<int32_t>& ids, bool keep_timestamps,
                                                    bool skip_special) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (!keep_timestamps && id >= timestamp_begin_) continue;  // the package's `t < timestamp_begin` filter
    if (const auto special = special_text_.find(id); special != special_text_.end()) {
      if (!skip_special) bytes += special->second;
      continue;
    }
    if (const std::string* token = model_->id_to_token(id)) {
      byte_level_to_bytes(*token, bytes);
      continue;
    }
    if (keep_timestamps && is_timestamp(id)) {  // an HF directory whose timestamps are not added tokens
      append_timestamp(id, bytes);
      continue;
    }
    return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary (ids 0.." +
                            std::to_string(vocab_size_ - 1) + ")");
  }
  return utf8_lossy(bytes);
}

void WhisperTokenizer::append_timestamp(int32_t id, std::string& out) const {
  const int centiseconds = (id - timestamp_begin_) * 2;
  out += "<|" + std::to_string(centiseconds / 100) + ".";
  out += static_cast<char>('0' + centiseconds % 100 / 10);
  out += static_cast<char>('0' + centiseconds % 10);
  out += "|>";
}

std::optional<int32_t> WhisperTokenizer::token_to_id(std::string_view token) const {
  if (const auto id = model_->token_to_id(bytes_to_byte_level(token))) return id;
  return added_.id_of(token);
}

std::optional<std::string> WhisperTokenizer::id_to_token(int32_t id) const {
  if (const auto special = special_text_.find(id); special != special_text_.end()) return special->second;
  const std::string* token = model_->id_to_token(id);
  if (token == nullptr) return std::nullopt;
  std::string bytes;
  byte_level_to_bytes(*token, bytes);
  return bytes;
}

StatusOr<int32_t> WhisperTokenizer::language_token(std::string_view language) const {
  const std::optional<std::string_view> code = whisper_language_code(language);
  if (!code) return invalid_argument("unknown language '" + std::string(language) + "'");
  const std::optional<int> index = whisper_language_index(*code);
  if (!index || *index >= num_languages()) {
    return invalid_argument("language '" + std::string(language) + "' is not in this vocabulary (its " +
                            std::to_string(num_languages()) + " languages end before it)");
  }
  return language_ids_[*index];
}

StatusOr<std::vector<int32_t>> WhisperTokenizer::sot_sequence(std::string_view language,
                                                              std::optional<WhisperTask> task, bool timestamps) const {
  std::vector<int32_t> ids{sot_};
  if (!language.empty()) {
    ASSIGN_OR_RETURN(const int32_t id, language_token(language));
    ids.push_back(id);
  }
  if (task) ids.push_back(task_token(*task));
  if (!timestamps) ids.push_back(no_timestamps_);
  return ids;
}

StatusOr<std::vector<int32_t>> WhisperTokenizer::hf_prefix_tokens() const {
  return sot_sequence(hf_prefix_.language, hf_prefix_.task, hf_prefix_.predict_timestamps);
}

}  // namespace mmserve::text
