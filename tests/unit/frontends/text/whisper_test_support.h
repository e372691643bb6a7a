// Shared by the Whisper tokenizer tests: the two real vocabularies loaded once, the varied test corpus, a
// base64 encoder and a literal transcription of tiktoken's `_byte_pair_merge` (the reference the BPE is
// compared with), all written independently of the code under test.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontends/text/whisper_tokenizer.h"
#include "test_paths.h"

namespace mmserve::text::testing {

inline const std::string kMultilingualPath = MMSERVE_SOURCE_DIR + "/assets/whisper_tokenizer/multilingual.tiktoken";
inline const std::string kGpt2Path = MMSERVE_SOURCE_DIR + "/assets/whisper_tokenizer/gpt2.tiktoken";

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// RFC 4648 base64 with padding (what the .tiktoken files hold).
inline std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// The rank of `bytes` read straight from a .tiktoken file's text (its base64 spelling looked up line by line),
// or -1 when the file has no such token.
inline int rank_in_file(const std::string& contents, std::string_view bytes) {
  const std::string needle = base64_encode(bytes) + " ";
  size_t pos = 0;
  while (pos < contents.size()) {
    const size_t end = contents.find('\n', pos);
    const std::string_view line(contents.data() + pos, (end == std::string::npos ? contents.size() : end) - pos);
    if (line.substr(0, needle.size()) == needle) return std::stoi(std::string(line.substr(needle.size())));
    pos = end == std::string::npos ? contents.size() : end + 1;
  }
  return -1;
}

// tiktoken's src/lib.rs `_byte_pair_merge` + `byte_pair_encode`, transcribed literally: a vector of
// (start, rank of the pair starting there); the lowest rank is merged, the first index winning a tie (strict <).
inline std::vector<int> tiktoken_byte_pair_encode(const std::unordered_map<std::string, int>& ranks,
                                                  const std::string& piece) {
  constexpr int kMax = INT32_MAX;
  if (piece.size() == 1) return {ranks.at(piece)};
  const auto rank_of = [&](size_t a, size_t b) {
    const auto it = ranks.find(piece.substr(a, b - a));
    return it == ranks.end() ? kMax : it->second;
  };
  std::vector<std::pair<size_t, int>> parts;
  std::pair<int, size_t> min_rank{kMax, SIZE_MAX};
  for (size_t i = 0; i + 1 < piece.size(); ++i) {
    const int rank = rank_of(i, i + 2);
    if (rank < min_rank.first) min_rank = {rank, i};
    parts.emplace_back(i, rank);
  }
  parts.emplace_back(piece.size() - 1, kMax);
  parts.emplace_back(piece.size(), kMax);
  const auto get_rank = [&](size_t i) {
    return i + 3 < parts.size() ? rank_of(parts[i].first, parts[i + 3].first) : kMax;
  };
  while (min_rank.first != kMax) {
    const size_t i = min_rank.second;
    if (i > 0) parts[i - 1].second = get_rank(i - 1);
    parts[i].second = get_rank(i);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    min_rank = {kMax, SIZE_MAX};
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      if (parts[k].second < min_rank.first) min_rank = {parts[k].second, k};
    }
  }
  std::vector<int> out;
  for (size_t k = 0; k + 1 < parts.size(); ++k)
    out.push_back(ranks.at(piece.substr(parts[k].first, parts[k + 1].first - parts[k].first)));
  return out;
}

// Varied text: ASCII, punctuation, numbers, contractions, whitespace runs and newlines, CJK, emoji (with ZWJ
// sequences and modifiers), Arabic, Hebrew, Devanagari, Thai, combining marks, control characters, text that
// looks like special tokens or escapes, long runs. All valid UTF-8 (encode requires it).
inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = {
      "",
      " ",
      "hello",
      " hello",
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      "It's a test. I'm sure they'll've done it; we'd see, you're right, I've got it.",
      "don't DON'T Don'T 'S 'T",
      "'s 't 're 've 'm 'll 'd",
      "HELLO   WORLD\n\n\tTabs\tand  spaces   ",
      "  leading and trailing  ",
      "\n",
      "\r\n",
      "a\n\nb",
      "a  b",
      "     ",
      "   \n  \n",
      "line one\nline two\r\nline three\n\n\n",
      "1234567890 3.14159 -42 1e10 0x1F 2024",
      "$100,000.00 (approx.) #hashtag @user 50% off!",
      "!!!???...,,,;;;:::---___+++===",
      "\"quoted\" 'single' `back` (paren) [bracket] {brace} <angle>",
      "ثم قال: مرحبا بالعالم",
      "שלום עולם",
      "你好，世界！今天天气很好。",
      "日本語のテキストとカタカナ、ひらがな。",
      "한국어 텍스트입니다",
      "Привет, мир! Как дела?",
      "Ελληνικά κείμενο",
      "नमस्ते दुनिया",
      "สวัสดีชาวโลก",
      "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️",
      "combining: e\xCC\x81 n\xCC\x83 a\xCC\x88\xCC\x84 Z\xCD\x91\xCD\x97",
      "zero\xE2\x80\x8Bwidth\xE2\x80\x8Djoiner",
      "nbsp\xC2\xA0here\xE3\x80\x80ideographic\xE2\x80\xA8sep",
      "math: \xE2\x88\x91\xE2\x88\xAB\xE2\x88\x9A\xE2\x88\x9E \xE2\x89\xA0 \xE2\x89\xA4",
      "<|endoftext|> literally",
      "<|notanspecial|> <| |> <||>",
      "\\xff %E2%82 &amp; \\u0000",
      "tab\tthen\x0Bvt\x0C"
      "ff",
      std::string("nul\0ctl\x01\x7F", 9),
      "\xEF\xBF\xBD replacement char \xF4\x8F\xBF\xBF max code point",
      "\xC5\xB8 \xC3\xBF \xC3\xB1 \xCA\xBBokina",
      "ellipsis\xE2\x80\xA6 smart \xE2\x80\x9Cquotes\xE2\x80\x9D \xE2\x80\x98x\xE2\x80\x99",
      "\xE2\x99\xAA\xE2\x99\xAA\xE2\x99\xAA music \xE2\x99\xAA",
      "mixed123abc!!def456",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "ababababababababab",
      std::string(300, 'x'),
      std::string(70, ' ') + "x",
      "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
  };
  return texts;
}

// The real vocabularies, loaded once per test binary.
struct Vocabularies {
  std::unique_ptr<WhisperTokenizer> multilingual;
  std::unique_ptr<WhisperTokenizer> gpt2;
  std::string multilingual_file;
  std::string gpt2_file;
};

inline const Vocabularies& vocabularies() {
  static const Vocabularies v = [] {
    Vocabularies r;
    auto m = WhisperTokenizer::from_tiktoken_file(kMultilingualPath);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) r.multilingual = std::move(m).value();
    auto g = WhisperTokenizer::from_tiktoken_file(kGpt2Path);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    if (g.ok()) r.gpt2 = std::move(g).value();
    r.multilingual_file = read_file(kMultilingualPath);
    r.gpt2_file = read_file(kGpt2Path);
    return r;
  }();
  return v;
}

}  // namespace mmserve::text::testing
