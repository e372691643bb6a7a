// Unicode helpers against facts from the Unicode Character Database and Rust's documented behaviour:
// strict UTF-8 validation, NFC composition, char::to_lowercase semantics (U+0130 -> "i" U+0307, no final
// sigma), lossy decoding with one U+FFFD per maximal ill-formed subpart, and the whitespace / word classes.
#include "frontends/text/unicode_text.h"

#include <gtest/gtest.h>

namespace mmserve::text {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(validate_utf8("").ok());
  EXPECT_TRUE(validate_utf8("plain ascii").ok());
  EXPECT_TRUE(validate_utf8("caf\xC3\xA9 \xE7\x8C\xAB \xF0\x9F\x99\x82").ok());  // café 猫 🙂
  EXPECT_TRUE(validate_utf8(std::string_view("a\0b", 3)).ok());                  // NUL is a character
}

TEST(Utf8Test, RejectsMalformedText) {
  for (const char* bad :
       {"\xC3", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF", "\x80", "ok\xE2\x82"}) {
    const Status s = validate_utf8(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(validate_utf8("abc\xFF").message().find("offset 3"), std::string::npos);
}

TEST(Utf8Test, EncodeAndDecodeCodePoints) {
  std::string s;
  for (const char32_t cp : {char32_t{0x41}, char32_t{0xE9}, char32_t{0x732B}, char32_t{0x1F642}}) append_utf8(cp, s);
  EXPECT_EQ(s, "A\xC3\xA9\xE7\x8C\xAB\xF0\x9F\x99\x82");
  size_t i = 0;
  EXPECT_EQ(next_code_point(s, i), 0x41u);
  EXPECT_EQ(next_code_point(s, i), 0xE9u);
  EXPECT_EQ(next_code_point(s, i), 0x732Bu);
  EXPECT_EQ(next_code_point(s, i), 0x1F642u);
  EXPECT_EQ(i, s.size());
}

TEST(NfcTest, ComposesCanonicalSequences) {
  EXPECT_EQ(nfc("cafe\xCC\x81").value(), "caf\xC3\xA9");                          // e + COMBINING ACUTE -> U+00E9
  EXPECT_EQ(nfc("\xE2\x84\xAB").value(), "\xC3\x85");                             // ANGSTROM SIGN -> U+00C5
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1").value(), "\xEA\xB0\x80");             // Hangul L + V -> U+AC00
  EXPECT_EQ(nfc("a\xCC\xA3\xCC\x81").value(), nfc("a\xCC\x81\xCC\xA3").value());  // canonical reordering
  EXPECT_EQ(nfc("untouched ascii").value(), "untouched ascii");
  EXPECT_EQ(nfc("\xEF\xAC\x81").value(), "\xEF\xAC\x81");  // the ligature "fi" is only a compatibility form
}

TEST(LowercaseTest, FollowsRustCharToLowercase) {
  EXPECT_EQ(lowercase("A Photo OF"), "a photo of");
  EXPECT_EQ(lowercase("\xC4\xB0"), "i\xCC\x87");                                 // U+0130 -> i + U+0307 (full mapping)
  EXPECT_EQ(lowercase("\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x83");  // ΣΑΣ -> σασ, no final ς
  EXPECT_EQ(lowercase("\xE1\xBA\x9E"), "\xC3\x9F");                              // ẞ -> ß
  EXPECT_EQ(lowercase("\xE2\x84\xA6"), "\xCF\x89");                              // OHM SIGN -> ω
  EXPECT_EQ(lowercase("\xE1\xB2\x90"), "\xE1\x83\x90");                          // Georgian Mtavruli -> Mkhedruli
  EXPECT_EQ(lowercase("\xC3\x9F"), "\xC3\x9F");                                  // ß has no lowercase change
  EXPECT_EQ(lowercase("\xF0\x90\x90\x80"), "\xF0\x90\x90\xA8");                  // Deseret U+10400 -> U+10428
}

TEST(LossyTest, ReplacesMaximalIllFormedSubparts) {
  EXPECT_EQ(utf8_lossy("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8_lossy("\xE2\x82"
                       "a"),
            "\xEF\xBF\xBD"
            "a");  // one U+FFFD for a truncated sequence
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x99"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3 subparts
  EXPECT_EQ(utf8_lossy("ok \xE7\x8C\xAB"), "ok \xE7\x8C\xAB");
}

TEST(CharClassTest, WhitespaceAndWordCharacters) {
  for (const char32_t cp : {0x09u, 0x0Au, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2003u, 0x2028u, 0x3000u}) {
    EXPECT_TRUE(is_white_space(cp)) << static_cast<uint32_t>(cp);
  }
  for (const char32_t cp : {0x200Bu, 0xFEFFu, 0x1Cu, 0x41u})
    EXPECT_FALSE(is_white_space(cp)) << static_cast<uint32_t>(cp);
  EXPECT_TRUE(is_python_space(0x1C));
  for (const char32_t cp : {0x61u, 0x5Fu, 0x39u, 0x301u, 0x732Bu, 0x2160u, 0x24B6u}) {
    EXPECT_TRUE(is_word_char(cp)) << static_cast<uint32_t>(cp);
  }
  for (const char32_t cp : {0x2Du, 0x2Cu, 0x20u, 0x1F642u}) EXPECT_FALSE(is_word_char(cp)) << static_cast<uint32_t>(cp);
}

}  // namespace
}  // namespace mmserve::text
