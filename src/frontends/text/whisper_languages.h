// Whisper's languages: the reference `whisper` package's LANGUAGES table (code, English name) in its order,
// which fixes the ids of the language tokens (<|startoftranscript|> + 1 + index), and TO_LANGUAGE_CODE's
// name/alias lookup. The first 99 are every checkpoint's; "yue" (Cantonese) is the 100th, in large-v3 only.
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace mmserve::text {

struct WhisperLanguage {
  std::string_view code;
  std::string_view name;
};

inline constexpr int kWhisperLanguagesMax = 100;

// All 100 languages, in the package's order.
std::span<const WhisperLanguage> whisper_languages();

// The index of a language code in that order, or nullopt.
std::optional<int> whisper_language_index(std::string_view code);

// The code of `language` given as a code, an English name or one of the package's aliases ("burmese",
// "castilian", "mandarin", ...), case-insensitively, as whisper's get_tokenizer resolves it; nullopt when
// it is none of those.
std::optional<std::string_view> whisper_language_code(std::string_view language);

}  // namespace mmserve::text
