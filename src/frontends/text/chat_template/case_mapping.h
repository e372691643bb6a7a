// Python's str.upper(), .lower(), .title() and .capitalize() on code points: utf8proc's one-to-one mappings
// plus CPython's one-to-many special casings (case_tables.inc, generated from CPython by
// tools/reference/make_case_tables.py: 'ß'.upper() is 'SS', 'ﬁ'.title() is 'Fi', with CPython's Lowercase,
// Uppercase and Cased properties as ranges) and lower()'s final-sigma
// rule ('ΟΔΟΣ'.lower() is 'οδος'). Test: the odd-case goldens (chat_template_golden_test.cpp).
#pragma once

#include <string>
#include <string_view>

namespace mmserve::chat_template {

std::u32string py_upper(std::u32string_view s);
std::u32string py_lower(std::u32string_view s);
std::u32string py_title(std::u32string_view s);
std::u32string py_capitalize(std::u32string_view s);
// The properties behind CPython's title()/lower() (Cased) and islower()/isupper()/istitle() (Lowercase,
// Uppercase, titlecase letter).
bool py_is_cased(char32_t c);
bool py_is_lower(char32_t c);
bool py_is_upper(char32_t c);
bool py_is_title(char32_t c);

}  // namespace mmserve::chat_template
