// Unicode building blocks of the text pipeline: UTF-8 validation and iteration, NFC, lower-casing and the
// character classes that HF `tokenizers` (Rust, Oniguruma) uses, each reproduced as that library behaves.
//
// Why these exact semantics: the tokenizer must give HF's ids, so lower-casing is Rust's `char::to_lowercase`
// (full mapping: U+0130 'İ' becomes "i̇", two code points; per character, so no final-sigma rule),
// whitespace for added-token stripping is Rust regex `\s` (the White_Space property) and "word" characters are
// Rust regex `\w`. NFC is utf8proc's (UTF8PROC_STABLE | UTF8PROC_COMPOSE).
// Tests: tests/unit/frontends/text/unicode_text_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mmserve::text {

// OK when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF); otherwise an
// InvalidArgument naming the byte offset of the first bad sequence.
Status validate_utf8(std::string_view s);

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal ill-formed subpart (as Rust's
// String::from_utf8_lossy and Python's errors="replace").
std::string utf8_lossy(std::string_view bytes);

// Decodes the code point starting at s[i] of a *valid* UTF-8 string and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
// Appends the UTF-8 encoding of `cp` (a valid scalar value) to `out`.
void append_utf8(char32_t cp, std::string& out);

// Unicode NFC of valid UTF-8 `s` (ASCII short-cut; utf8proc otherwise).
StatusOr<std::string> nfc(std::string_view s);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Any of the four Unicode normal forms of valid UTF-8 `s` (utf8proc; ASCII is returned unchanged).
StatusOr<std::string> normalize_unicode(std::string_view s, NormalForm form);

// Lower-cases valid UTF-8 `s` code point by code point as Rust's `char::to_lowercase` (what HF's Lowercase
// normalizer calls): the Unicode simple lowercase mapping, except U+0130 -> U+0069 U+0307.
std::string lowercase(std::string_view s);

// Rust regex `\s` (Unicode White_Space): what HF uses when an added token has lstrip / rstrip.
bool is_white_space(char32_t cp);
// Rust regex `\w` (Alphabetic, marks, decimal digits, connector punctuation, join controls): what HF uses for
// an added token's single_word check.
bool is_word_char(char32_t cp);
// Python's str.isspace(), for the final strip() of CLIP's decode.
bool is_python_space(char32_t cp);

}  // namespace mmserve::text
