// Added-token matching: HF tokenizers' AddedVocabulary::find_matches (tokenizer/added_vocabulary.rs).
//
// HF uses an Aho-Corasick automaton (MatchKind::LeftmostLongest); with the handful of added tokens a tokenizer
// has, a per-pattern "next occurrence" scan gives the same matches more simply. A match dropped by
// single_word still consumes its span (the automaton's iterator has moved past it), as in HF.
// Tests: tests/unit/frontends/text/clip_tokenizer_test.cpp.
#include "frontends/text/added_vocabulary.h"

#include <algorithm>

#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

char32_t last_code_point(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  return next_code_point(s, i);
}

// Start of the run of White_Space that ends `s`.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_white_space(next_code_point(s, i))) break;
    end = start;
  }
  return end;
}

// Length of the run of White_Space that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!is_white_space(next_code_point(s, next))) break;
    i = next;
  }
  return i;
}

}  // namespace

StatusOr<AddedVocabulary> AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer& normalizer) {
  AddedVocabulary v;
  // Specials first, then the rest (stable), and one entry per content (the last definition wins).
  std::stable_partition(tokens.begin(), tokens.end(), [](const AddedToken& t) { return t.special; });
  for (AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    auto same =
        std::find_if(v.tokens_.begin(), v.tokens_.end(), [&](const AddedToken& u) { return u.content == t.content; });
    if (same != v.tokens_.end()) {
      *same = std::move(t);
    } else {
      v.tokens_.push_back(std::move(t));
    }
  }
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    v.by_id_[t.id] = i;
    if (!t.normalized) {
      v.raw_patterns_.push_back({t.content, i});
      continue;
    }
    auto normalized = normalizer.apply(t.content);
    if (!normalized.ok()) return normalized.status().with_context("added token \"" + t.content + "\"");
    if (!normalized->empty()) v.normalized_patterns_.push_back({std::move(normalized).value(), i});
  }
  return v;
}

const AddedToken* AddedVocabulary::find_by_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return t.id;
  }
  return std::nullopt;
}

void AddedVocabulary::split_raw(std::string_view text, std::vector<Segment>& out) const {
  split(text, raw_patterns_, out);
}

void AddedVocabulary::split_normalized(std::string_view text, std::vector<Segment>& out) const {
  split(text, normalized_patterns_, out);
}

void AddedVocabulary::split(std::string_view text, const std::vector<Pattern>& patterns,
                            std::vector<Segment>& out) const {
  if (text.empty() || patterns.empty()) {
    out.push_back({text, -1});
    return;
  }
  // next[i]: the first occurrence of pattern i at or after the search position (npos when none is left).
  std::vector<size_t> next(patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) next[i] = text.find(patterns[i].text);

  size_t pos = 0;           // where the automaton resumes searching
  size_t start_offset = 0;  // end of the last emitted token
  while (true) {
    size_t best = patterns.size();
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (next[i] != std::string_view::npos && next[i] < pos) next[i] = text.find(patterns[i].text, pos);
      if (next[i] == std::string_view::npos) continue;
      if (best == patterns.size() || next[i] < next[best] ||
          (next[i] == next[best] && patterns[i].text.size() > patterns[best].text.size())) {
        best = i;
      }
    }
    if (best == patterns.size()) break;
    size_t start = next[best];
    size_t stop = start + patterns[best].text.size();
    pos = stop;
    const AddedToken& token = tokens_[patterns[best].token];
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
      size_t after = stop;
      const bool stop_space = stop == text.size() || !is_word_char(next_code_point(text, after));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({text.substr(start_offset), -1});
}

}  // namespace mmserve::text
