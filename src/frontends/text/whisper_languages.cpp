// Whisper's language table and lookups (see whisper_languages.h). The table is copied from openai/whisper's
// whisper/tokenizer.py (LANGUAGES, TO_LANGUAGE_CODE); its order is part of the vocabulary and must not change.
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp.
#include "frontends/text/whisper_languages.h"

#include <array>
#include <string>

namespace mmserve::text {
namespace {

constexpr std::array<WhisperLanguage, kWhisperLanguagesMax> kLanguages = {{
    {"en", "english"},        {"zh", "chinese"},       {"de", "german"},    {"es", "spanish"},    {"ru", "russian"},
    {"ko", "korean"},         {"fr", "french"},        {"ja", "japanese"},  {"pt", "portuguese"}, {"tr", "turkish"},
    {"pl", "polish"},         {"ca", "catalan"},       {"nl", "dutch"},     {"ar", "arabic"},     {"sv", "swedish"},
    {"it", "italian"},        {"id", "indonesian"},    {"hi", "hindi"},     {"fi", "finnish"},    {"vi", "vietnamese"},
    {"he", "hebrew"},         {"uk", "ukrainian"},     {"el", "greek"},     {"ms", "malay"},      {"cs", "czech"},
    {"ro", "romanian"},       {"da", "danish"},        {"hu", "hungarian"}, {"ta", "tamil"},      {"no", "norwegian"},
    {"th", "thai"},           {"ur", "urdu"},          {"hr", "croatian"},  {"bg", "bulgarian"},  {"lt", "lithuanian"},
    {"la", "latin"},          {"mi", "maori"},         {"ml", "malayalam"}, {"cy", "welsh"},      {"sk", "slovak"},
    {"te", "telugu"},         {"fa", "persian"},       {"lv", "latvian"},   {"bn", "bengali"},    {"sr", "serbian"},
    {"az", "azerbaijani"},    {"sl", "slovenian"},     {"kn", "kannada"},   {"et", "estonian"},   {"mk", "macedonian"},
    {"br", "breton"},         {"eu", "basque"},        {"is", "icelandic"}, {"hy", "armenian"},   {"ne", "nepali"},
    {"mn", "mongolian"},      {"bs", "bosnian"},       {"kk", "kazakh"},    {"sq", "albanian"},   {"sw", "swahili"},
    {"gl", "galician"},       {"mr", "marathi"},       {"pa", "punjabi"},   {"si", "sinhala"},    {"km", "khmer"},
    {"sn", "shona"},          {"yo", "yoruba"},        {"so", "somali"},    {"af", "afrikaans"},  {"oc", "occitan"},
    {"ka", "georgian"},       {"be", "belarusian"},    {"tg", "tajik"},     {"sd", "sindhi"},     {"gu", "gujarati"},
    {"am", "amharic"},        {"yi", "yiddish"},       {"lo", "lao"},       {"uz", "uzbek"},      {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},        {"tk", "turkmen"},   {"nn", "nynorsk"},    {"mt", "maltese"},
    {"sa", "sanskrit"},       {"lb", "luxembourgish"}, {"my", "myanmar"},   {"bo", "tibetan"},    {"tl", "tagalog"},
    {"mg", "malagasy"},       {"as", "assamese"},      {"tt", "tatar"},     {"haw", "hawaiian"},  {"ln", "lingala"},
    {"ha", "hausa"},          {"ba", "bashkir"},       {"jw", "javanese"},  {"su", "sundanese"},  {"yue", "cantonese"},
}};

// TO_LANGUAGE_CODE's aliases beyond the names.
constexpr std::array<WhisperLanguage, 12> kAliases = {{
    {"my", "burmese"},
    {"ca", "valencian"},
    {"nl", "flemish"},
    {"ht", "haitian"},
    {"lb", "letzeburgesch"},
    {"ps", "pushto"},
    {"pa", "panjabi"},
    {"ro", "moldavian"},
    {"ro", "moldovan"},
    {"si", "sinhalese"},
    {"es", "castilian"},
    {"zh", "mandarin"},
}};

// Python's str.lower() on the ASCII letters (every code and name is ASCII).
std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

std::span<const WhisperLanguage> whisper_languages() {
  return kLanguages;
}

std::optional<int> whisper_language_index(std::string_view code) {
  for (size_t i = 0; i < kLanguages.size(); ++i) {
    if (kLanguages[i].code == code) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::optional<std::string_view> whisper_language_code(std::string_view language) {
  const std::string lower = ascii_lower(language);
  for (const WhisperLanguage& l : kLanguages) {
    if (l.code == lower) return l.code;
  }
  for (const WhisperLanguage& l : kLanguages) {
    if (l.name == lower) return l.code;
  }
  for (const WhisperLanguage& l : kAliases) {
    if (l.name == lower) return l.code;
  }
  return std::nullopt;
}

}  // namespace mmserve::text
