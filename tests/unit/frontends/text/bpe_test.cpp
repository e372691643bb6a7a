// The BPE model on tiny hand-made vocabularies, where each expected split follows from the merge ranks by
// hand: lowest rank first, leftmost on a tie, the end-of-word suffix on the last character, unknown characters
// (fused or not), and validation errors; plus GPT-2's byte-level alphabet.
#include "frontends/text/bpe.h"

#include <gtest/gtest.h>

#include "frontends/text/byte_level.h"

namespace mmserve::text {
namespace {

BpeConfig config(std::vector<std::pair<std::string, std::string>> merges) {
  BpeConfig c;
  const char* tokens[] = {"a", "b", "c", "a</w>", "b</w>", "c</w>", "ab", "abc</w>", "bc</w>", "<unk>", "aa", "aa</w>"};
  for (int32_t i = 0; i < 12; ++i) c.vocab[tokens[i]] = i;
  c.merges = std::move(merges);
  c.end_of_word_suffix = "</w>";
  return c;
}

std::vector<int32_t> tokenize(const BpeModel& model, std::string_view word) {
  std::vector<int32_t> ids;
  model.tokenize(word, ids);
  return ids;
}

TEST(BpeTest, MergesByRank) {
  // "abc" = a b c</w>. With (a b) ranked first: ab, then (ab c</w>) -> abc</w>.
  auto m1 = BpeModel::create(config({{"a", "b"}, {"b", "c</w>"}, {"ab", "c</w>"}}));
  ASSERT_TRUE(m1.ok()) << m1.status().to_string();
  EXPECT_EQ(tokenize(**m1, "abc"), (std::vector<int32_t>{7}));
  // With (b c</w>) ranked first: a + bc</w>, and no merge (a bc</w>) exists.
  auto m2 = BpeModel::create(config({{"b", "c</w>"}, {"a", "b"}, {"ab", "c</w>"}}));
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(tokenize(**m2, "abc"), (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(tokenize(**m2, "a"), (std::vector<int32_t>{3}));  // a single character takes the suffix
  EXPECT_TRUE(tokenize(**m2, "").empty());
}

TEST(BpeTest, EqualRanksMergeLeftmostFirst) {
  // "aaaa" = a a a a</w>: both (a a) pairs have rank 0; the leftmost merges first -> aa a a</w>, then
  // (a a</w>) -> aa aa</w>. Merging the second pair first would end in a aa a</w>.
  auto m = BpeModel::create(config({{"a", "a"}, {"a", "a</w>"}}));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(tokenize(**m, "aaaa"), (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(tokenize(**m, "aaa"), (std::vector<int32_t>{10, 3}));
}

TEST(BpeTest, UnknownCharacters) {
  BpeConfig c = config({{"a", "b"}});
  c.unk_token = "<unk>";
  auto m = BpeModel::create(c);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(tokenize(**m, "abzz"), (std::vector<int32_t>{6, 9, 9}));  // each unknown character on its own
  c.fuse_unk = true;
  auto fused = BpeModel::create(c);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(tokenize(**fused, "abzz"), (std::vector<int32_t>{6, 9}));
  auto no_unk = BpeModel::create(config({{"a", "b"}}));
  ASSERT_TRUE(no_unk.ok());
  EXPECT_EQ(tokenize(**no_unk, "abzz"), (std::vector<int32_t>{6}));  // without an unknown token: dropped
}

TEST(BpeTest, ValidationErrors) {
  auto missing_part = BpeModel::create(config({{"a", "b"}, {"q", "b"}}));
  EXPECT_EQ(missing_part.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing_part.status().message().find("merge 2"), std::string::npos);
  EXPECT_NE(missing_part.status().message().find("\"q\""), std::string::npos);
  auto missing_result = BpeModel::create(config({{"c", "a"}}));  // "ca" is not in the vocabulary
  EXPECT_EQ(missing_result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing_result.status().message().find("\"ca\""), std::string::npos);
  BpeConfig bad_unk = config({});
  bad_unk.unk_token = "<nope>";
  EXPECT_EQ(BpeModel::create(bad_unk).status().code(), StatusCode::kInvalidArgument);
  BpeConfig negative = config({});
  negative.vocab["x"] = -1;
  EXPECT_EQ(BpeModel::create(negative).status().code(), StatusCode::kInvalidArgument);
}

TEST(BpeTest, LookupsBothWays) {
  auto m = BpeModel::create(config({}));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->token_to_id("abc</w>"), 7);
  EXPECT_FALSE((*m)->token_to_id("zzz").has_value());
  ASSERT_NE((*m)->id_to_token(9), nullptr);
  EXPECT_EQ(*(*m)->id_to_token(9), "<unk>");
  EXPECT_EQ((*m)->id_to_token(12), nullptr);
  EXPECT_EQ((*m)->id_limit(), 12);
}

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(bytes_to_byte_level("a!~"), "a!~");                      // printable ASCII maps to itself
  EXPECT_EQ(bytes_to_byte_level(" "), "\xC4\xA0");                   // 0x20 -> U+0120 'Ġ'
  EXPECT_EQ(bytes_to_byte_level("\n"), "\xC4\x8A");                  // 0x0A -> U+010A 'Ċ'
  EXPECT_EQ(bytes_to_byte_level(std::string(1, '\0')), "\xC4\x80");  // 0x00 -> U+0100
  EXPECT_EQ(bytes_to_byte_level("\xAD"), "\xC5\x83");                // 0xAD, the last unprintable -> U+0143
  EXPECT_EQ(bytes_to_byte_level("\xC3\xA9"), "\xC3\x83\xC2\xA9");    // é's bytes -> "Ã©"
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  byte_level_to_bytes(bytes_to_byte_level(all), back);
  EXPECT_EQ(back, all);
  back.clear();
  byte_level_to_bytes("\xE7\x8C\xAB", back);  // a character outside the alphabet: token kept as is
  EXPECT_EQ(back, "\xE7\x8C\xAB");
}

}  // namespace
}  // namespace mmserve::text
