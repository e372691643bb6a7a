// Normalizer and pre-tokenizer: JSON parsing (tokenizers' serde format) and application.
//
// Split follows tokenizers' NormalizedString::split: the pattern's matches and the gaps between them form a
// list of (span, is_match) covering the text (an empty text is one empty gap); `invert` swaps the flags; the
// behavior then drops matches (Removed), keeps everything (Isolated) or glues matches to a neighbour.
// ByteLevel with use_regex applies GPT-2's pattern to each piece (Isolated) before mapping bytes to GPT-2's
// alphabet. nlohmann is used through non-throwing accessors only (type checked before every get).
// Tests: tests/unit/frontends/text/clip_tokenizer_test.cpp (pipelines), onig_regex_test.cpp.
#include "frontends/text/text_pipeline.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "frontends/text/byte_level.h"
#include "frontends/text/hf_tokenizer_files.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

using nlohmann::json;

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";


// j[key] as a boolean: `fallback` when absent or null, InvalidArgument when of another type.
StatusOr<bool> get_bool(const json& j, const char* key, bool fallback, const std::string& label) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return invalid_argument(label + ": \"" + key + "\" must be a boolean");
  return it->get<bool>();
}

// j[key] as a string: InvalidArgument when absent or of another type.
StatusOr<std::string> get_string(const json& j, const char* key, const std::string& label) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return invalid_argument(label + ": \"" + key + "\" must be a string");
  return it->get<std::string>();
}

// One Unicode scalar value (Metaspace's replacement, Strip's content).
Status check_one_char(const std::string& s, const std::string& label) {
  RETURN_IF_ERROR(validate_utf8(s).with_context(label));
  size_t i = 0;
  if (s.empty() || (next_code_point(s, i), i != s.size()))
    return invalid_argument(label + ": expected one character, got \"" + s + "\"");
  return ok_status();
}

// The regexes the fixed pre-tokenizers split on, compiled once (returned by value: the cache may grow).
std::shared_ptr<const OnigRegex> fixed_regex(const char* pattern) {
  static std::mutex mutex;
  static std::vector<std::pair<std::string, std::shared_ptr<const OnigRegex>>> cache;
  std::lock_guard lock(mutex);
  for (const auto& [p, re] : cache) {
    if (p == pattern) return re;
  }
  auto compiled = OnigRegex::compile(pattern);
  MMSERVE_CHECK(compiled.ok(), std::string(pattern) + ": " + compiled.status().to_string());
  cache.emplace_back(pattern, std::move(compiled).value());
  return cache.back().second;
}

// Rust's char::is_numeric (Nd, Nl, No): what Digits splits on.
constexpr const char* kDigitPattern = R"(\p{N})";
constexpr const char* kDigitsPattern = R"(\p{N}+)";
// tokenizers' Whitespace: Rust regex `\w+|[^\w\s]+` (\w: Alphabetic, M, Nd, Pc, Join_Control).
constexpr const char* kWhitespacePattern =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)";
// WhitespaceSplit: char::is_whitespace (White_Space = Oniguruma's \s).
constexpr const char* kWhiteSpacePattern = R"(\s+)";

// tokenizers' Pattern: {"Regex": "..."} or {"String": "..."}.
StatusOr<std::shared_ptr<const OnigRegex>> parse_pattern(const json& j, const std::string& label) {
  const auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) return invalid_argument(label + ": \"pattern\" must be an object");
  if (const auto re = it->find("Regex"); re != it->end() && re->is_string()) {
    auto compiled = OnigRegex::compile(re->get<std::string>());
    if (!compiled.ok()) return compiled.status().with_context(label);
    return compiled;
  }
  if (const auto str = it->find("String"); str != it->end() && str->is_string()) {
    return OnigRegex::literal(str->get<std::string>());
  }
  return invalid_argument(label + ": \"pattern\" needs a \"Regex\" or \"String\" string");
}

const std::shared_ptr<const OnigRegex>& gpt2_regex() {
  static const std::shared_ptr<const OnigRegex> re = [] {
    auto compiled = OnigRegex::compile(kGpt2Pattern);
    MMSERVE_CHECK(compiled.ok(), "GPT-2 pattern: " + compiled.status().to_string());
    return std::move(compiled).value();
  }();
  return re;
}

// A pre-tokenizer piece and whether it starts the whole input (see the header).
struct Word {
  std::string text;
  bool starts_input = false;
};

// One step of tokenizers' NormalizedString::split on `text`, appending the kept pieces to `out`.
Status split(std::string_view text, bool starts_input, const OnigRegex& re, PreTokenizer::Behavior behavior,
             bool invert, std::vector<Word>& out) {
  struct Piece {
    size_t start, end;
    bool is_match;
  };
  std::vector<Piece> pieces;
  if (text.empty()) {
    pieces.push_back({0, 0, false});
  } else {
    std::vector<Span> matches;
    RETURN_IF_ERROR(re.find_all(text, matches));
    size_t prev = 0;
    for (const Span& m : matches) {
      if (prev != m.start) pieces.push_back({prev, m.start, false});
      pieces.push_back({m.start, m.end, true});
      prev = m.end;
    }
    if (prev != text.size()) pieces.push_back({prev, text.size(), false});
  }
  if (invert) {
    for (Piece& p : pieces) p.is_match = !p.is_match;
  }

  using B = PreTokenizer::Behavior;
  std::vector<Piece> kept;
  bool previous_match = false;
  switch (behavior) {
    case B::kRemoved:
      for (const Piece& p : pieces) {
        if (!p.is_match) kept.push_back(p);
      }
      break;
    case B::kIsolated: kept = pieces; break;
    case B::kContiguous:
      for (const Piece& p : pieces) {
        if (p.is_match == previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    case B::kMergedWithPrevious:
      for (const Piece& p : pieces) {
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    case B::kMergedWithNext:
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().start = it->start;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Piece& p : kept)
    out.push_back({std::string(text.substr(p.start, p.end - p.start)), starts_input && p.start == 0});
  return ok_status();
}

}  // namespace

StatusOr<Normalizer> Normalizer::clip() {
  Normalizer n;
  ASSIGN_OR_RETURN(auto whitespace, OnigRegex::compile(R"(\s+)"));
  n.steps_.push_back({Kind::kNfc, nullptr, ""});
  n.steps_.push_back({Kind::kReplace, std::move(whitespace), " "});
  n.steps_.push_back({Kind::kLowercase, nullptr, ""});
  return n;
}

StatusOr<Normalizer> Normalizer::from_json(const json& j, const std::string& label) {
  Normalizer n;
  if (!j.is_null()) RETURN_IF_ERROR(add_from_json(j, label, n.steps_));
  return n;
}

Status Normalizer::add_from_json(const json& j, const std::string& label, std::vector<Step>& steps) {
  const std::string type = hf::component_type(j);
  if (type == "Sequence") {
    const auto list = j.find("normalizers");
    if (list == j.end() || !list->is_array()) return invalid_argument(label + ": Sequence needs \"normalizers\"");
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(add_from_json((*list)[i], label + "[" + std::to_string(i) + "]", steps));
    }
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const Kind kind = type == "NFC"    ? Kind::kNfc
                      : type == "NFD"  ? Kind::kNfd
                      : type == "NFKC" ? Kind::kNfkc
                                       : Kind::kNfkd;
    steps.push_back({kind, nullptr, ""});
  } else if (type == "Lowercase") {
    steps.push_back({Kind::kLowercase, nullptr, ""});
  } else if (type == "Replace") {
    ASSIGN_OR_RETURN(auto pattern, parse_pattern(j, label + ": Replace"));
    ASSIGN_OR_RETURN(std::string content, get_string(j, "content", label + ": Replace"));
    RETURN_IF_ERROR(validate_utf8(content).with_context(label + ": Replace content"));
    steps.push_back({Kind::kReplace, std::move(pattern), std::move(content)});
  } else if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prepend, get_string(j, "prepend", label + ": Prepend"));
    RETURN_IF_ERROR(validate_utf8(prepend).with_context(label + ": Prepend"));
    steps.push_back({Kind::kPrepend, nullptr, std::move(prepend)});
  } else if (type == "Strip") {
    Step step{Kind::kStrip, nullptr, ""};
    ASSIGN_OR_RETURN(step.strip_left, get_bool(j, "strip_left", true, label + ": Strip"));
    ASSIGN_OR_RETURN(step.strip_right, get_bool(j, "strip_right", true, label + ": Strip"));
    steps.push_back(std::move(step));
  } else if (type.empty()) {
    return invalid_argument(label + ": a normalizer must be an object with a \"type\"");
  } else {
    return unimplemented(label + ": normalizer type \"" + type + "\" is not supported");
  }
  return ok_status();
}

StatusOr<std::string> Normalizer::apply(std::string_view text, bool* keeps_start) const {
  std::string s(text);
  std::vector<Span> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc: {
        ASSIGN_OR_RETURN(s, normalize_unicode(s, NormalForm::kNfc));
        break;
      }
      case Kind::kNfd: {
        ASSIGN_OR_RETURN(s, normalize_unicode(s, NormalForm::kNfd));
        break;
      }
      case Kind::kNfkc: {
        ASSIGN_OR_RETURN(s, normalize_unicode(s, NormalForm::kNfkc));
        break;
      }
      case Kind::kNfkd: {
        ASSIGN_OR_RETURN(s, normalize_unicode(s, NormalForm::kNfkd));
        break;
      }
      case Kind::kLowercase: s = lowercase(s); break;
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.content);  // tokenizers prepends to non-empty strings only
        break;
      case Kind::kStrip: {
        size_t begin = 0;
        size_t end = s.size();
        if (step.strip_left) {
          while (begin < end) {
            size_t next = begin;
            if (!is_white_space(next_code_point(s, next))) break;
            begin = next;
          }
        }
        if (step.strip_right) {
          while (end > begin) {
            size_t start = end - 1;
            while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
            size_t next = start;
            if (!is_white_space(next_code_point(s, next))) break;
            end = start;
          }
        }
        if (begin > 0 && keeps_start != nullptr) *keeps_start = false;
        s = s.substr(begin, end - begin);
        break;
      }
      case Kind::kReplace: {
        matches.clear();
        RETURN_IF_ERROR(step.pattern->find_all(s, matches));
        if (matches.empty()) break;
        if (matches.front().start == 0 && matches.front().end > 0 && step.content.empty() && keeps_start != nullptr) {
          *keeps_start = false;
        }
        std::string replaced;
        replaced.reserve(s.size());
        size_t prev = 0;
        for (const Span& m : matches) {
          replaced.append(s, prev, m.start - prev);
          replaced += step.content;
          prev = m.end;
        }
        replaced.append(s, prev, std::string::npos);
        s = std::move(replaced);
        break;
      }
    }
  }
  return s;
}

StatusOr<PreTokenizer> PreTokenizer::clip() {
  PreTokenizer p;
  ASSIGN_OR_RETURN(auto pattern, OnigRegex::compile(kClipSplitPattern));
  Step split_step;
  split_step.pattern = std::move(pattern);
  split_step.behavior = Behavior::kRemoved;
  split_step.invert = true;
  p.steps_.push_back(std::move(split_step));
  Step byte_level;
  byte_level.kind = Kind::kByteLevel;
  p.steps_.push_back(std::move(byte_level));
  return p;
}

PreTokenizer PreTokenizer::gpt2(bool add_prefix_space) {
  PreTokenizer p;
  Step step;
  step.kind = Kind::kByteLevel;
  step.add_prefix_space = add_prefix_space;
  p.steps_.push_back(std::move(step));
  return p;
}

StatusOr<PreTokenizer> PreTokenizer::from_json(const json& j, const std::string& label) {
  PreTokenizer p;
  if (!j.is_null()) RETURN_IF_ERROR(add_from_json(j, label, p.steps_));
  return p;
}

Status PreTokenizer::add_from_json(const json& j, const std::string& label, std::vector<Step>& steps) {
  const std::string type = hf::component_type(j);
  const auto add_split = [&steps](const char* pattern, Behavior behavior, bool invert) {
    Step step;
    step.pattern = fixed_regex(pattern);
    step.behavior = behavior;
    step.invert = invert;
    steps.push_back(std::move(step));
  };
  if (type == "Sequence") {
    const auto list = j.find("pretokenizers");
    if (list == j.end() || !list->is_array()) return invalid_argument(label + ": Sequence needs \"pretokenizers\"");
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(add_from_json((*list)[i], label + "[" + std::to_string(i) + "]", steps));
    }
  } else if (type == "Split") {
    Step step;
    ASSIGN_OR_RETURN(step.pattern, parse_pattern(j, label + ": Split"));
    const auto behavior = j.find("behavior");
    const std::string name = behavior != j.end() && behavior->is_string() ? behavior->get<std::string>() : "";
    if (name == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (name == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (name == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (name == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (name == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return invalid_argument(label + ": Split has an unknown \"behavior\" \"" + name + "\"");
    }
    ASSIGN_OR_RETURN(step.invert, get_bool(j, "invert", false, label + ": Split"));
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step;
    step.kind = Kind::kByteLevel;
    // Files always write add_prefix_space; absent, it stays off (what the CLIP and Whisper loaders assumed).
    ASSIGN_OR_RETURN(step.add_prefix_space, get_bool(j, "add_prefix_space", false, label + ": ByteLevel"));
    ASSIGN_OR_RETURN(step.use_regex, get_bool(j, "use_regex", true, label + ": ByteLevel"));
    steps.push_back(std::move(step));
  } else if (type == "Metaspace") {
    Step step;
    step.kind = Kind::kMetaspace;
    const std::string where = label + ": Metaspace";
    ASSIGN_OR_RETURN(step.replacement, get_string(j, "replacement", where));
    RETURN_IF_ERROR(check_one_char(step.replacement, where + " replacement"));
    ASSIGN_OR_RETURN(step.split, get_bool(j, "split", true, where));
    ASSIGN_OR_RETURN(step.pattern, OnigRegex::literal(step.replacement));
    // The current form has "prepend_scheme"; files from before tokenizers 0.19 have "add_prefix_space".
    if (const auto scheme = j.find("prepend_scheme"); scheme != j.end() && !scheme->is_null()) {
      const std::string name = scheme->is_string() ? scheme->get<std::string>() : "";
      if (name == "always") {
        step.prepend_scheme = PrependScheme::kAlways;
      } else if (name == "first") {
        step.prepend_scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        step.prepend_scheme = PrependScheme::kNever;
      } else {
        return invalid_argument(where + ": unknown \"prepend_scheme\" " + scheme->dump() + " (always, first, never)");
      }
    } else {
      ASSIGN_OR_RETURN(const bool add_prefix_space, get_bool(j, "add_prefix_space", true, where));
      step.prepend_scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    steps.push_back(std::move(step));
  } else if (type == "Digits") {
    ASSIGN_OR_RETURN(const bool individual, get_bool(j, "individual_digits", false, label + ": Digits"));
    if (individual) {
      add_split(kDigitPattern, Behavior::kIsolated, false);
    } else {
      add_split(kDigitsPattern, Behavior::kContiguous, false);
    }
  } else if (type == "Whitespace") {
    add_split(kWhitespacePattern, Behavior::kRemoved, true);
  } else if (type == "WhitespaceSplit") {
    add_split(kWhiteSpacePattern, Behavior::kRemoved, false);
  } else if (type == "CharDelimiterSplit") {
    ASSIGN_OR_RETURN(const std::string delimiter, get_string(j, "delimiter", label + ": CharDelimiterSplit"));
    RETURN_IF_ERROR(check_one_char(delimiter, label + ": CharDelimiterSplit delimiter"));
    Step step;
    ASSIGN_OR_RETURN(step.pattern, OnigRegex::literal(delimiter));
    step.behavior = Behavior::kRemoved;
    steps.push_back(std::move(step));
  } else if (type.empty()) {
    return invalid_argument(label + ": a pre-tokenizer must be an object with a \"type\"");
  } else {
    return unimplemented(label + ": pre-tokenizer type \"" + type + "\" is not supported");
  }
  return ok_status();
}

Status PreTokenizer::apply(std::string_view normalized, std::vector<std::string>& words, bool starts_input) const {
  std::vector<Word> pieces{{std::string(normalized), starts_input}};
  std::vector<Word> next;
  for (const Step& step : steps_) {
    next.clear();
    for (Word& piece : pieces) {
      switch (step.kind) {
        case Kind::kSplit:
          RETURN_IF_ERROR(split(piece.text, piece.starts_input, *step.pattern, step.behavior, step.invert, next));
          break;
        case Kind::kByteLevel: {
          std::string& text = piece.text;
          // tokenizers' NormalizedString::prepend does nothing to an empty string.
          if (step.add_prefix_space && !text.empty() && text.front() != ' ') text.insert(text.begin(), ' ');
          const size_t first = next.size();
          if (step.use_regex) {
            RETURN_IF_ERROR(split(text, piece.starts_input, *gpt2_regex(), Behavior::kIsolated, false, next));
          } else {
            next.push_back(std::move(piece));
          }
          for (size_t i = first; i < next.size(); ++i) next[i].text = bytes_to_byte_level(next[i].text);
          break;
        }
        case Kind::kMetaspace: {
          // tokenizers' Metaspace: spaces become the replacement, which is prepended per the scheme unless the
          // piece starts with it already; then (split) the piece is cut before each replacement.
          std::string replaced;
          replaced.reserve(piece.text.size() + step.replacement.size());
          for (const char c : piece.text) {
            if (c == ' ') {
              replaced += step.replacement;
            } else {
              replaced.push_back(c);
            }
          }
          const bool prepend = step.prepend_scheme == PrependScheme::kAlways ||
                               (step.prepend_scheme == PrependScheme::kFirst && piece.starts_input);
          if (prepend && !replaced.empty() && replaced.compare(0, step.replacement.size(), step.replacement) != 0) {
            replaced.insert(0, step.replacement);
          }
          if (!step.split) {
            next.push_back({std::move(replaced), piece.starts_input});
            break;
          }
          RETURN_IF_ERROR(split(replaced, piece.starts_input, *step.pattern, Behavior::kMergedWithNext, false, next));
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (Word& piece : pieces) {
    if (!piece.text.empty()) words.push_back(std::move(piece.text));
  }
  return ok_status();
}

}  // namespace mmserve::text
