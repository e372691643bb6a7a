// Oniguruma-on-PCRE2: the escape translation (onig's Unicode \s is [\t\n\v\f\r\x85] + Z categories, \w is
// L|M|N|Pc, \h a hex digit), find_all's onig find_iter semantics (leftmost-first alternation, empty matches),
// and the CLIP split pattern on a hand-split sentence.
#include "frontends/text/onig_regex.h"

#include <gtest/gtest.h>

#include "frontends/text/text_pipeline.h"

namespace mmserve::text {
namespace {

std::vector<std::string> matches(std::string_view pattern, std::string_view subject) {
  auto re = OnigRegex::compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status().to_string();
  std::vector<Span> spans;
  EXPECT_TRUE((*re)->find_all(subject, spans).ok());
  std::vector<std::string> out;
  for (const Span& s : spans) out.emplace_back(subject.substr(s.start, s.end - s.start));
  return out;
}

TEST(OnigToPcre2Test, TranslatesOnigEscapes) {
  EXPECT_EQ(onig_to_pcre2(R"(\s+)").value(), R"([\t\n\x0B\f\r\x{85}\p{Z}]+)");
  EXPECT_EQ(onig_to_pcre2(R"([^\s\p{L}\p{N}]+)").value(), R"([^\t\n\x0B\f\r\x{85}\p{Z}\p{L}\p{N}]+)");
  EXPECT_EQ(onig_to_pcre2(R"(\S)").value(), R"([^\t\n\x0B\f\r\x{85}\p{Z}])");
  EXPECT_EQ(onig_to_pcre2(R"(\w\h)").value(), R"([\p{L}\p{M}\p{N}\p{Pc}][0-9a-fA-F])");
  EXPECT_EQ(onig_to_pcre2(R"(\\s'\p{L}[]a])").value(), R"(\\s'\p{L}[]a])");  // escaped backslash, literal ]
  EXPECT_EQ(onig_to_pcre2(R"([[:alpha:]\s])").value(), R"([[:alpha:]\t\n\x0B\f\r\x{85}\p{Z}])");
}

TEST(OnigToPcre2Test, RefusesConstructsThatWouldDiffer) {
  EXPECT_EQ(onig_to_pcre2(R"([\S])").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(onig_to_pcre2(R"([a[b]])").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(onig_to_pcre2(R"([[b]])").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(onig_to_pcre2(R"([a-z&&[^aeiou]])").status().code(), StatusCode::kUnimplemented);
}

TEST(OnigRegexTest, WhitespaceIsOnigsUnicodeSet) {
  // U+3000, U+0085 and U+00A0 are \s in Oniguruma; U+200B (ZERO WIDTH SPACE, Cf) is not.
  EXPECT_EQ(matches(R"(\s+)",
                    "a \xE3\x80\x80\xC2\x85"
                    "b\xC2\xA0"
                    "c\xE2\x80\x8B"
                    "d"),
            (std::vector<std::string>{" \xE3\x80\x80\xC2\x85", "\xC2\xA0"}));
}

TEST(OnigRegexTest, EmptyMatchesFollowFindIter) {
  EXPECT_EQ(matches("x*", "ab"), (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(matches("a*", "baaa"), (std::vector<std::string>{"", "aaa"}));  // no empty match right after "aaa"
}

TEST(OnigRegexTest, ClipPatternSplitsWordsDigitsAndPunctuation) {
  EXPECT_EQ(matches(kClipSplitPattern, "a photo's 12 cats!! <|endoftext|>x"),
            (std::vector<std::string>{"a", "photo", "'s", "1", "2", "cats", "!!", "<|endoftext|>", "x"}));
  // Letters are \p{L} in any script; combining marks (Mn) are not letters and fall into the punctuation run.
  EXPECT_EQ(matches(kClipSplitPattern, "i\xCC\x87stanbul \xE7\x8C\xAB\xE5\x92\xAA"),
            (std::vector<std::string>{"i", "\xCC\x87", "stanbul", "\xE7\x8C\xAB\xE5\x92\xAA"}));
}

TEST(OnigRegexTest, LiteralPatternsAndCompileErrors) {
  auto literal = OnigRegex::literal("a.b");
  ASSERT_TRUE(literal.ok());
  std::vector<Span> spans;
  ASSERT_TRUE((*literal)->find_all("a.b axb a.b", spans).ok());
  EXPECT_EQ(spans.size(), 2u);
  const auto bad = OnigRegex::compile("(unclosed");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos);
}

}  // namespace
}  // namespace mmserve::text
