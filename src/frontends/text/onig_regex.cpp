// Oniguruma patterns on PCRE2: escape translation, compile-once (+JIT), onig-compatible find_all.
//
// The compiled pcre2_code is immutable and shared by all threads; each thread keeps its own one-pair match
// data (thread_local), so matching allocates nothing after the first call. Tests:
// tests/unit/frontends/text/onig_regex_test.cpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "frontends/text/onig_regex.h"

#include <pcre2.h>

namespace mmserve::text {
namespace {

// Oniguruma's Unicode `\s` and `\w`, as the inside of a PCRE2 character class.
constexpr const char* kOnigSpace = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";
constexpr const char* kOnigWord = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr const char* kOnigHex = "0-9a-fA-F";

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

pcre2_match_data* thread_match_data() {
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create(1, nullptr));
  return data.get();
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

size_t utf8_length_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
}

}  // namespace

StatusOr<std::string> onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  bool class_start = false;  // right after "[" or "[^": a ']' here is a literal
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      const char* set = e == 's' || e == 'S'   ? kOnigSpace
                        : e == 'w' || e == 'W' ? kOnigWord
                        : e == 'h' || e == 'H' ? kOnigHex
                                               : nullptr;
      const bool negated = e == 'S' || e == 'W' || e == 'H';
      if (set == nullptr) {
        out += '\\';
        out += e;
      } else if (in_class && negated) {
        return unimplemented("regex \"" + std::string(p) + "\": \\" + e + " inside a character class");
      } else if (in_class) {
        out += set;
      } else {
        out += negated ? "[^" : "[";
        out += set;
        out += ']';
      }
      class_start = false;
      continue;
    }
    if (!in_class) {
      out += c;
      if (c == '[') {
        in_class = true;
        class_start = true;
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      }
      continue;
    }
    if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX bracket [:alpha:], same in both
      const size_t close = p.find(":]", i + 2);
      if (close == std::string_view::npos) return invalid_argument("regex \"" + std::string(p) + "\": bad [: class");
      out.append(p.substr(i, close + 2 - i));
      i = close + 1;
      class_start = false;
      continue;
    }
    if (c == '[') {  // onig nests classes even right after "[" (PCRE2 would read a literal '[')
      return unimplemented("regex \"" + std::string(p) + "\": nested character classes are not supported");
    }
    if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
      return unimplemented("regex \"" + std::string(p) + "\": class intersection (&&) is not supported");
    }
    if (c == ']' && !class_start) in_class = false;
    out += c;
    class_start = false;
  }
  return out;
}

StatusOr<std::shared_ptr<const OnigRegex>> OnigRegex::compile(std::string_view onig_pattern) {
  ASSIGN_OR_RETURN(std::string translated, onig_to_pcre2(onig_pattern));
  return build(translated, std::string(onig_pattern), PCRE2_UTF | PCRE2_UCP);
}

StatusOr<std::shared_ptr<const OnigRegex>> OnigRegex::literal(std::string_view text) {
  return build(text, std::string(text), PCRE2_UTF | PCRE2_LITERAL);
}

StatusOr<std::shared_ptr<const OnigRegex>> OnigRegex::build(std::string_view pattern, std::string label,
                                                            uint32_t options) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    return invalid_argument("regex \"" + label + "\" does not compile: " + pcre2_message(error) + " (offset " +
                            std::to_string(offset) + ")");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
  return std::shared_ptr<const OnigRegex>(new OnigRegex(std::move(label), code));
}

OnigRegex::~OnigRegex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Status OnigRegex::find_all(std::string_view subject, std::vector<Span>& out) const {
  auto* code = static_cast<const pcre2_code*>(code_);
  pcre2_match_data* data = thread_match_data();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  size_t last_match_end = std::string_view::npos;
  while (pos <= subject.size()) {
    const int rc = pcre2_match(code, text, subject.size(), pos, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return resource_exhausted("regex \"" + pattern_ + "\": " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (start == end) {
      // Like onig's find_iter: an empty match touching the previous match is skipped; after an empty match
      // the search resumes one character later.
      if (last_match_end != end) {
        out.push_back({start, end});
        last_match_end = end;
      }
      if (end >= subject.size()) break;
      pos = end + utf8_length_at(subject, end);
      continue;
    }
    out.push_back({start, end});
    last_match_end = end;
    pos = end;
  }
  return ok_status();
}

}  // namespace mmserve::text
