// TokenDecoder: tokenizers' decoders (tokenizers/src/decoders/*.rs) reproduced step for step, including their
// quirks: ByteFallback parses the two characters after "<0x" with Rust's u8::from_str_radix (so "<0x+A>" is a
// byte too), Metaspace drops every replacement of the chain's first token, and Strip never cuts past the other
// end (where tokenizers would panic on a slice, this gives the empty string). Invalid JSON types are
// InvalidArgument; unknown types Unimplemented. Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp.
#include "frontends/text/token_decoder.h"

#include <optional>
#include <utility>

#include "frontends/text/byte_level.h"
#include "frontends/text/hf_tokenizer_files.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

using nlohmann::json;


StatusOr<std::string> get_string(const json& j, const char* key, const std::string& label) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return invalid_argument(label + ": \"" + key + "\" must be a string");
  std::string s = it->get<std::string>();
  RETURN_IF_ERROR(validate_utf8(s).with_context(label + ": \"" + key + "\""));
  return s;
}

StatusOr<size_t> get_count(const json& j, const char* key, const std::string& label) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return size_t{0};
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return invalid_argument(label + ": \"" + key + "\" must be a non-negative integer");
  }
  return static_cast<size_t>(it->get<int64_t>());
}

Status check_one_char(const std::string& s, const std::string& label) {
  size_t i = 0;
  if (s.empty() || (next_code_point(s, i), i != s.size())) {
    return invalid_argument(label + ": expected one character, got \"" + s + "\"");
  }
  return ok_status();
}

std::optional<int> hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return std::nullopt;
}

// The byte of a "<0xNN>" token, parsed as Rust's u8::from_str_radix(&token[3..5], 16) (which takes a '+').
std::optional<unsigned char> fallback_byte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  if (token[3] == '+') {
    const auto d = hex_digit(token[4]);
    if (!d) return std::nullopt;
    return static_cast<unsigned char>(*d);
  }
  const auto hi = hex_digit(token[3]);
  const auto lo = hex_digit(token[4]);
  if (!hi || !lo) return std::nullopt;
  return static_cast<unsigned char>(*hi * 16 + *lo);
}

void flush_bytes(std::string& bytes, size_t n_tokens, std::vector<std::string>& out) {
  if (n_tokens == 0) return;
  if (validate_utf8(bytes).ok()) {
    out.push_back(bytes);
  } else {
    for (size_t i = 0; i < n_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");  // U+FFFD per byte token
  }
  bytes.clear();
}

std::vector<std::string> split_chars(const std::string& s) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    next_code_point(s, i);
    chars.push_back(s.substr(start, i - start));
  }
  return chars;
}

}  // namespace

StatusOr<TokenDecoder> TokenDecoder::from_json(const json& j, const std::string& label) {
  TokenDecoder d;
  if (!j.is_null()) RETURN_IF_ERROR(add_from_json(j, label, d.steps_));
  return d;
}

StatusOr<TokenDecoder> TokenDecoder::sequence(const std::vector<json>& steps, const std::string& label) {
  TokenDecoder d;
  for (size_t i = 0; i < steps.size(); ++i) {
    RETURN_IF_ERROR(add_from_json(steps[i], label + "[" + std::to_string(i) + "]", d.steps_));
  }
  return d;
}

Status TokenDecoder::add_from_json(const json& j, const std::string& label, std::vector<Step>& steps) {
  const std::string type = hf::component_type(j);
  Step step{Kind::kFuse, nullptr, "", ""};
  if (type == "Sequence") {
    const auto list = j.find("decoders");
    if (list == j.end() || !list->is_array()) return invalid_argument(label + ": Sequence needs \"decoders\"");
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(add_from_json((*list)[i], label + "[" + std::to_string(i) + "]", steps));
    }
    return ok_status();
  }
  if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    ASSIGN_OR_RETURN(step.replacement, get_string(j, "replacement", label + ": Metaspace"));
    RETURN_IF_ERROR(check_one_char(step.replacement, label + ": Metaspace replacement"));
    if (const auto scheme = j.find("prepend_scheme"); scheme != j.end() && !scheme->is_null()) {
      if (!scheme->is_string() || (*scheme != "always" && *scheme != "first" && *scheme != "never")) {
        return invalid_argument(label + ": Metaspace: unknown \"prepend_scheme\" " + scheme->dump());
      }
      step.strip_first_replacement = *scheme != "never";
    } else if (const auto legacy = j.find("add_prefix_space"); legacy != j.end() && !legacy->is_null()) {
      if (!legacy->is_boolean()) return invalid_argument(label + ": Metaspace: \"add_prefix_space\" must be a boolean");
      step.strip_first_replacement = legacy->get<bool>();
    }
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    const auto pattern = j.find("pattern");
    if (pattern == j.end() || !pattern->is_object())
      return invalid_argument(label + ": Replace: \"pattern\" must be an object");
    if (const auto re = pattern->find("Regex"); re != pattern->end() && re->is_string()) {
      auto compiled = OnigRegex::compile(re->get<std::string>());
      if (!compiled.ok()) return compiled.status().with_context(label + ": Replace");
      step.pattern = std::move(compiled).value();
    } else if (const auto str = pattern->find("String"); str != pattern->end() && str->is_string()) {
      ASSIGN_OR_RETURN(step.pattern, OnigRegex::literal(str->get<std::string>()));
    } else {
      return invalid_argument(label + ": Replace: \"pattern\" needs a \"Regex\" or \"String\" string");
    }
    ASSIGN_OR_RETURN(step.content, get_string(j, "content", label + ": Replace"));
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    ASSIGN_OR_RETURN(step.content, get_string(j, "content", label + ": Strip"));
    RETURN_IF_ERROR(check_one_char(step.content, label + ": Strip content"));
    ASSIGN_OR_RETURN(step.start, get_count(j, "start", label + ": Strip"));
    ASSIGN_OR_RETURN(step.stop, get_count(j, "stop", label + ": Strip"));
  } else if (type == "BPEDecoder") {
    step.kind = Kind::kBpeSuffix;
    const auto suffix = j.find("suffix");
    if (suffix == j.end() || suffix->is_null()) {
      step.content = "</w>";
    } else {
      ASSIGN_OR_RETURN(step.content, get_string(j, "suffix", label + ": BPEDecoder"));
    }
  } else if (type.empty()) {
    return invalid_argument(label + ": a decoder must be an object with a \"type\"");
  } else {
    return unimplemented(label + ": decoder type \"" + type + "\" is not supported");
  }
  steps.push_back(std::move(step));
  return ok_status();
}

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  if (steps_.empty()) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined += ' ';
      joined += tokens[i];
    }
    return joined;
  }
  std::vector<std::string> next;
  std::vector<Span> matches;
  for (const Step& step : steps_) {
    next.clear();
    switch (step.kind) {
      case Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) byte_level_to_bytes(t, bytes);
        next.push_back(utf8_lossy(bytes));
        break;
      }
      case Kind::kByteFallback: {
        std::string bytes;
        size_t n_bytes = 0;
        for (std::string& t : tokens) {
          if (const auto b = fallback_byte(t)) {
            bytes.push_back(static_cast<char>(*b));
            ++n_bytes;
            continue;
          }
          flush_bytes(bytes, n_bytes, next);
          n_bytes = 0;
          next.push_back(std::move(t));
        }
        flush_bytes(bytes, n_bytes, next);
        break;
      }
      case Kind::kFuse: {
        std::string fused;
        for (const std::string& t : tokens) fused += t;
        next.push_back(std::move(fused));
        break;
      }
      case Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && step.strip_first_replacement;
          std::string out;
          for (size_t pos = 0; pos < tokens[i].size();) {
            if (tokens[i].compare(pos, step.replacement.size(), step.replacement) == 0) {
              if (!drop) out += ' ';
              pos += step.replacement.size();
              continue;
            }
            const size_t start = pos;
            next_code_point(tokens[i], pos);
            out.append(tokens[i], start, pos - start);
          }
          next.push_back(std::move(out));
        }
        break;
      case Kind::kReplace:
        for (const std::string& t : tokens) {
          matches.clear();
          if (!step.pattern->find_all(t, matches).ok()) matches.clear();  // a failing match replaces nothing
          std::string out;
          size_t prev = 0;
          for (const Span& m : matches) {
            out.append(t, prev, m.start - prev);
            out += step.content;
            prev = m.end;
          }
          out.append(t, prev, std::string::npos);
          next.push_back(std::move(out));
        }
        break;
      case Kind::kStrip:
        for (const std::string& t : tokens) {
          const std::vector<std::string> chars = split_chars(t);
          size_t start_cut = 0;
          for (size_t i = 0; i < step.start && i < chars.size() && chars[i] == step.content; ++i) start_cut = i + 1;
          size_t stop_cut = chars.size();
          for (size_t i = 0; i < step.stop && i < chars.size() && chars[chars.size() - i - 1] == step.content; ++i) {
            stop_cut = chars.size() - i - 1;
          }
          std::string out;
          for (size_t i = start_cut; i < stop_cut; ++i) out += chars[i];
          next.push_back(std::move(out));
        }
        break;
      case Kind::kBpeSuffix:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const std::string with = i + 1 == tokens.size() ? "" : " ";
          std::string out;
          size_t prev = 0;
          for (size_t pos = tokens[i].find(step.content); pos != std::string::npos && !step.content.empty();
               pos = tokens[i].find(step.content, prev)) {
            out.append(tokens[i], prev, pos - prev);
            out += with;
            prev = pos + step.content.size();
          }
          out.append(tokens[i], prev, std::string::npos);
          next.push_back(std::move(out));
        }
        break;
    }
    tokens.swap(next);
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace mmserve::text
