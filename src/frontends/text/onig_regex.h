// An Oniguruma-syntax regular expression (what HF `tokenizers` stores in tokenizer.json) run with PCRE2.
//
// Why a translation: HF compiles `Regex(...)` patterns with Oniguruma in Unicode mode, where `\s` is
// [\t\n\v\f\r\x85] plus the Z categories, `\w` is [\p{L}\p{M}\p{N}\p{Pc}] and `\h` is a hex digit. PCRE2 (UTF +
// UCP) differs on each, so those escapes are rewritten into explicit classes; `\p{..}`, alternation and
// look-around mean the same in both. A pattern is compiled (and JIT-compiled) once and is safe to use from
// many threads; `find_all` reproduces onig's find_iter (leftmost-first, non-overlapping, no empty match right
// after the previous match). Subjects must be valid UTF-8 (not re-checked).
// Tests: tests/unit/frontends/text/onig_regex_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mmserve::text {

struct Span {
  size_t start = 0;
  size_t end = 0;
};

// Rewrites an Oniguruma pattern into an equivalent PCRE2 pattern; Unimplemented for constructs whose meaning
// would silently differ (nested character classes, `\S` / `\W` inside a class).
StatusOr<std::string> onig_to_pcre2(std::string_view onig_pattern);

class OnigRegex {
 public:
  // Compiles an Oniguruma pattern; InvalidArgument with PCRE2's message and offset if it does not compile.
  static StatusOr<std::shared_ptr<const OnigRegex>> compile(std::string_view onig_pattern);
  // A pattern that matches `text` literally (tokenizers' `{"String": ...}` patterns).
  static StatusOr<std::shared_ptr<const OnigRegex>> literal(std::string_view text);
  ~OnigRegex();
  OnigRegex(const OnigRegex&) = delete;
  OnigRegex& operator=(const OnigRegex&) = delete;

  // Appends every match in `subject` to `out`, left to right, as Oniguruma's find_iter reports them.
  Status find_all(std::string_view subject, std::vector<Span>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  OnigRegex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}
  static StatusOr<std::shared_ptr<const OnigRegex>> build(std::string_view pattern, std::string label,
                                                          uint32_t options);

  std::string pattern_;  // as written (Oniguruma syntax), for error messages
  void* code_;           // pcre2_code_8*
};

}  // namespace mmserve::text
