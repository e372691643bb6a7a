// Case mapping as CPython does it (unicodeobject.c: do_upper_or_lower, do_title, do_capitalize,
// handle_capital_sigma). Test: the odd-case goldens in chat_template_golden_test.cpp.
#include "frontends/text/chat_template/case_mapping.h"

#include <utf8proc.h>

#include <algorithm>
#include <initializer_list>

namespace mmserve::chat_template {
namespace {

struct SpecialCase {
  char32_t cp;
  std::initializer_list<char32_t> mapped;
};
struct CodeRange {
  char32_t lo, hi;
};

#include "frontends/text/chat_template/case_tables.inc"

template <size_t N>
const SpecialCase* find(const SpecialCase (&table)[N], char32_t c) {
  const auto* it = std::lower_bound(std::begin(table), std::end(table), c,
                                    [](const SpecialCase& e, char32_t x) { return e.cp < x; });
  return it != std::end(table) && it->cp == c ? it : nullptr;
}

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  const auto* it =
      std::upper_bound(std::begin(table), std::end(table), c, [](char32_t x, const CodeRange& r) { return x < r.lo; });
  return it != std::begin(table) && c <= (it - 1)->hi;
}

auto u(char32_t c) {
  return static_cast<utf8proc_int32_t>(c);
}

template <size_t N>
void append_mapped(std::u32string& out, char32_t c, const SpecialCase (&table)[N],
                   utf8proc_int32_t (*simple)(utf8proc_int32_t)) {
  if (const SpecialCase* s = find(table, c)) {
    out.append(s->mapped.begin(), s->mapped.end());
  } else {
    out += static_cast<char32_t>(simple(u(c)));
  }
}

// Case-ignorable (Unicode): marks, format characters, modifier letters and symbols, and the word-internal
// punctuation of Word_Break MidLetter/MidNumLet/Single_Quote.
bool is_case_ignorable(char32_t c) {
  switch (c) {
    case '\'':
    case '.':
    case ':':
    case 0x00B7:
    case 0x0387:
    case 0x05F4:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xFE13:
    case 0xFE52:
    case 0xFE55:
    case 0xFF07:
    case 0xFF0E:
    case 0xFF1A: return true;
    default: break;
  }
  switch (utf8proc_category(u(c))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return true;
    default: return false;
  }
}

// Σ at i lowercases to ς when a cased letter precedes it and none follows (case-ignorables skipped).
bool final_sigma(std::u32string_view s, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(s[j - 1])) --j;
  if (j == 0 || !py_is_cased(s[j - 1])) return false;
  size_t k = i + 1;
  while (k < s.size() && is_case_ignorable(s[k])) ++k;
  return k == s.size() || !py_is_cased(s[k]);
}

void append_lower(std::u32string& out, std::u32string_view s, size_t i) {
  if (s[i] == 0x03A3) {
    out += final_sigma(s, i) ? char32_t{0x03C2} : char32_t{0x03C3};
  } else {
    append_mapped(out, s[i], kLowerSpecial, utf8proc_tolower);
  }
}

}  // namespace

bool py_is_cased(char32_t c) {
  return in_ranges(kCased, c);
}
bool py_is_lower(char32_t c) {
  return in_ranges(kLowercase, c);
}
bool py_is_upper(char32_t c) {
  return in_ranges(kUppercase, c);
}
bool py_is_title(char32_t c) {
  return utf8proc_category(u(c)) == UTF8PROC_CATEGORY_LT;
}

std::u32string py_upper(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (const char32_t c : s) append_mapped(out, c, kUpperSpecial, utf8proc_toupper);
  return out;
}

std::u32string py_lower(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) append_lower(out, s, i);
  return out;
}

std::u32string py_title(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (previous_cased) {
      append_lower(out, s, i);
    } else {
      append_mapped(out, s[i], kTitleSpecial, utf8proc_totitle);
    }
    previous_cased = py_is_cased(s[i]);
  }
  return out;
}

std::u32string py_capitalize(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 0) {
      append_mapped(out, s[i], kTitleSpecial, utf8proc_totitle);
    } else {
      append_lower(out, s, i);
    }
  }
  return out;
}

}  // namespace mmserve::chat_template
