// ClipTokenizer's encoder and decoder over the stages assembled by the loaders.
//
// encode mirrors tokenizers' Tokenizer::encode for one sequence: added tokens split from the raw text, the
// rest normalized, normalized added tokens split from that, pre-tokenization into words, BPE per word; then
// truncation to max_length minus the post-processor's tokens (so EOS survives, as HF's truncation=True) and the
// post-processor's BOS/EOS. decode is HF's ByteLevel decoder followed by CLIPTokenizer's wrapper
// (`</w>` -> " ", then strip()). All state is immutable after construction except the BPE word cache, which
// guards itself, so concurrent encode calls are safe.
// Tests: tests/unit/frontends/text/clip_tokenizer_test.cpp, tests/conformance/clip_tokenizer_conformance_test.cpp.
#include "frontends/text/clip_tokenizer.h"

#include <algorithm>
#include <utility>

#include "frontends/text/byte_level.h"
#include "frontends/text/clip_tokenizer_parts.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

class ClipTokenizerImpl final : public ClipTokenizer {
 public:
  explicit ClipTokenizerImpl(ClipTokenizerParts parts) : p_(std::move(parts)) {
    int64_t limit = p_.model->id_limit();
    for (const AddedToken& t : p_.added.tokens()) limit = std::max<int64_t>(limit, int64_t{t.id} + 1);
    vocab_size_ = limit;
  }

  StatusOr<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options) const override {
    RETURN_IF_ERROR(validate_utf8(text));
    if (options.max_length < 0) {
      return invalid_argument("max_length must be >= 0 (0: no truncation), got " + std::to_string(options.max_length));
    }
    std::vector<int32_t> ids;
    std::vector<Segment> raw_segments;
    std::vector<Segment> normalized_segments;
    std::vector<std::string> words;
    p_.added.split_raw(text, raw_segments);
    for (const Segment& raw : raw_segments) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      ASSIGN_OR_RETURN(const std::string normalized, p_.normalizer.apply(raw.text));
      normalized_segments.clear();
      p_.added.split_normalized(normalized, normalized_segments);
      for (const Segment& segment : normalized_segments) {
        if (segment.id >= 0) {
          ids.push_back(segment.id);
          continue;
        }
        words.clear();
        RETURN_IF_ERROR(p_.pre_tokenizer.apply(segment.text, words));
        for (const std::string& word : words) p_.model->tokenize(word, ids);
      }
    }

    const size_t n_special = options.add_special_tokens ? p_.prefix_ids.size() + p_.suffix_ids.size() : 0;
    if (options.max_length > 0) {
      const auto max_length = static_cast<size_t>(options.max_length);
      if (max_length < n_special) {
        return invalid_argument("max_length " + std::to_string(max_length) + " leaves no room for the " +
                                std::to_string(n_special) + " special tokens");
      }
      if (ids.size() > max_length - n_special) ids.resize(max_length - n_special);
    }
    if (!options.add_special_tokens) return ids;
    std::vector<int32_t> out;
    out.reserve(ids.size() + n_special);
    out.insert(out.end(), p_.prefix_ids.begin(), p_.prefix_ids.end());
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), p_.suffix_ids.begin(), p_.suffix_ids.end());
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string bytes;
    for (const int32_t id : ids) {
      if (const AddedToken* added = p_.added.find_by_id(id)) {
        byte_level_to_bytes(added->content, bytes);
      } else if (const std::string* token = p_.model->id_to_token(id)) {
        byte_level_to_bytes(*token, bytes);
      }  // unknown ids are skipped, as HF's id_to_token filter does
    }
    const std::string text = utf8_lossy(bytes);
    std::string spaced;
    spaced.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, 4, "</w>") == 0) {
        spaced.push_back(' ');
        i += 4;
      } else {
        spaced.push_back(text[i++]);
      }
    }
    return strip(spaced);
  }

  int32_t bos_id() const override { return p_.bos_id; }
  int32_t eos_id() const override { return p_.eos_id; }
  int32_t pad_id() const override { return p_.pad_id; }
  int64_t vocab_size() const override { return vocab_size_; }
  int model_max_length() const override { return p_.model_max_length; }

 private:
  // Python's str.strip(): leading and trailing whitespace (str.isspace) removed.
  static std::string strip(const std::string& s) {
    size_t begin = 0;
    while (begin < s.size()) {
      size_t next = begin;
      if (!is_python_space(next_code_point(s, next))) break;
      begin = next;
    }
    size_t end = s.size();
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      if (!is_python_space(next_code_point(s, next))) break;
      end = start;
    }
    return s.substr(begin, end - begin);
  }

  ClipTokenizerParts p_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<ClipTokenizer> make_clip_tokenizer(ClipTokenizerParts parts) {
  return std::make_unique<ClipTokenizerImpl>(std::move(parts));
}

}  // namespace mmserve::text
