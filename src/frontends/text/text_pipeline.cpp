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

#include "frontends/text/byte_level.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

using nlohmann::json;

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool bool_or(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

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

// One step of tokenizers' NormalizedString::split on `text`, appending the kept pieces to `out`.
Status split(std::string_view text, const OnigRegex& re, PreTokenizer::Behavior behavior, bool invert,
             std::vector<std::string>& out) {
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
  for (const Piece& p : kept) out.emplace_back(text.substr(p.start, p.end - p.start));
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
  const std::string type = type_of(j);
  if (type == "Sequence") {
    const auto list = j.find("normalizers");
    if (list == j.end() || !list->is_array()) return invalid_argument(label + ": Sequence needs \"normalizers\"");
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(add_from_json((*list)[i], label + "[" + std::to_string(i) + "]", steps));
    }
  } else if (type == "NFC") {
    steps.push_back({Kind::kNfc, nullptr, ""});
  } else if (type == "Lowercase") {
    steps.push_back({Kind::kLowercase, nullptr, ""});
  } else if (type == "Replace") {
    ASSIGN_OR_RETURN(auto pattern, parse_pattern(j, label + ": Replace"));
    const auto content = j.find("content");
    if (content == j.end() || !content->is_string()) return invalid_argument(label + ": Replace needs \"content\"");
    steps.push_back({Kind::kReplace, std::move(pattern), content->get<std::string>()});
  } else if (type.empty()) {
    return invalid_argument(label + ": a normalizer must be an object with a \"type\"");
  } else {
    return unimplemented(label + ": normalizer type \"" + type + "\" is not supported");
  }
  return ok_status();
}

StatusOr<std::string> Normalizer::apply(std::string_view text) const {
  std::string s(text);
  std::vector<Span> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc: {
        ASSIGN_OR_RETURN(s, nfc(s));
        break;
      }
      case Kind::kLowercase: s = lowercase(s); break;
      case Kind::kReplace: {
        matches.clear();
        RETURN_IF_ERROR(step.pattern->find_all(s, matches));
        if (matches.empty()) break;
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
  byte_level.byte_level = true;
  p.steps_.push_back(std::move(byte_level));
  return p;
}

PreTokenizer PreTokenizer::gpt2(bool add_prefix_space) {
  PreTokenizer p;
  Step step;
  step.byte_level = true;
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
  const std::string type = type_of(j);
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
    step.invert = bool_or(j, "invert", false);
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step;
    step.byte_level = true;
    step.add_prefix_space = bool_or(j, "add_prefix_space", false);
    step.use_regex = bool_or(j, "use_regex", true);
    steps.push_back(std::move(step));
  } else if (type.empty()) {
    return invalid_argument(label + ": a pre-tokenizer must be an object with a \"type\"");
  } else {
    return unimplemented(label + ": pre-tokenizer type \"" + type + "\" is not supported");
  }
  return ok_status();
}

Status PreTokenizer::apply(std::string_view normalized, std::vector<std::string>& words) const {
  std::vector<std::string> pieces{std::string(normalized)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& piece : pieces) {
      if (!step.byte_level) {
        RETURN_IF_ERROR(split(piece, *step.pattern, step.behavior, step.invert, next));
        continue;
      }
      if (step.add_prefix_space && (piece.empty() || piece.front() != ' ')) piece.insert(piece.begin(), ' ');
      const size_t first = next.size();
      if (step.use_regex) {
        RETURN_IF_ERROR(split(piece, *gpt2_regex(), Behavior::kIsolated, false, next));
      } else {
        next.push_back(std::move(piece));
      }
      for (size_t i = first; i < next.size(); ++i) next[i] = bytes_to_byte_level(next[i]);
    }
    pieces.swap(next);
  }
  for (std::string& piece : pieces) {
    if (!piece.empty()) words.push_back(std::move(piece));
  }
  return ok_status();
}

}  // namespace mmserve::text
