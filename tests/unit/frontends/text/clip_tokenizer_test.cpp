// ClipTokenizer on the real CLIP vocabulary (assets/clip_tokenizer), against ids looked up by hand in
// vocab.json and splits derived by hand from merges.txt (the merge lines are cited next to each case):
// known sentences, case / whitespace / Unicode normalisation, special tokens in the text, truncation keeping
// EOS, the no-special mode, invalid UTF-8, decoding, and concurrent encoding.
#include "frontends/text/clip_tokenizer.h"

#include <gtest/gtest.h>

#include <thread>
#include "test_paths.h"

namespace mmserve::text {
namespace {

using Ids = std::vector<int32_t>;

constexpr int32_t kBos = 49406;  // <|startoftext|>
constexpr int32_t kEos = 49407;  // <|endoftext|>

class ClipTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = ClipTokenizer::from_vocab_merges(MMSERVE_SOURCE_DIR + "/assets/clip_tokenizer/vocab.json",
                                                   MMSERVE_SOURCE_DIR + "/assets/clip_tokenizer/merges.txt");
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    tokenizer_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }

  static Ids encode(std::string_view text, EncodeOptions options = {}) {
    auto ids = tokenizer_->encode(text, options);
    EXPECT_TRUE(ids.ok()) << ids.status().to_string();
    return ids.ok() ? *ids : Ids{};
  }
  static Ids encode_plain(std::string_view text) {
    return encode(text, {.add_special_tokens = false, .max_length = 0});
  }

  static ClipTokenizer* tokenizer_;
};

ClipTokenizer* ClipTokenizerTest::tokenizer_ = nullptr;

TEST_F(ClipTokenizerTest, KnownSentence) {
  // a</w>=320 photo</w>=1125 of</w>=539 cat</w>=2368
  EXPECT_EQ(encode("a photo of a cat"), (Ids{kBos, 320, 1125, 539, 320, 2368, kEos}));
}

TEST_F(ClipTokenizerTest, ModelDirLoaderAgrees) {
  auto from_dir = ClipTokenizer::from_model_dir(MMSERVE_SOURCE_DIR + "/assets/clip_tokenizer");
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().to_string();
  EXPECT_EQ((*from_dir)->encode("a photo of a cat").value(), (Ids{kBos, 320, 1125, 539, 320, 2368, kEos}));
}

TEST_F(ClipTokenizerTest, WordSplitIntoTwoPieces) {
  // catdog = c a t d o g</w>: merges "a t" (line 17), "d o" (129), "c at" (971; "c a" is only line 262),
  // "do g</w>" (1419); no "cat dog</w>" -> cat=1481, dog</w>=1929.
  EXPECT_EQ(encode("catdog"), (Ids{kBos, 1481, 1929, kEos}));
}

TEST_F(ClipTokenizerTest, CaseAndWhitespaceAreNormalised) {
  // Tab, newlines, NBSP (U+00A0) and the ideographic space (U+3000) are all whitespace.
  EXPECT_EQ(encode("  A\tPHOTO\n\nof\xC2\xA0"
                   "a\xE3\x80\x80"
                   "CAT  "),
            (Ids{kBos, 320, 1125, 539, 320, 2368, kEos}));
}

TEST_F(ClipTokenizerTest, ContractionsDigitsAndPunctuation) {
  // it</w>=585 ("i t</w>", line 75), 's</w>=568 ("' s</w>", line 58), each digit alone: 2</w>=273 0</w>=271
  // 4</w>=275, !</w>=256.
  EXPECT_EQ(encode_plain("It's 2024!"), (Ids{585, 568, 273, 271, 273, 275, 256}));
  // A NUL is a punctuation character: byte 0 is 'Ā' in the byte-level alphabet, Ā</w>=444; b</w>=321.
  EXPECT_EQ(encode_plain(std::string_view("a\0b", 3)), (Ids{320, 444, 321}));
}

TEST_F(ClipTokenizerTest, EmptyText) {
  EXPECT_EQ(encode(""), (Ids{kBos, kEos}));
  EXPECT_EQ(encode(" \t\n "), (Ids{kBos, kEos}));
  EXPECT_TRUE(encode_plain("").empty());
}

TEST_F(ClipTokenizerTest, SpecialTokensInText) {
  EXPECT_EQ(encode("<|startoftext|>a cat<|endoftext|>"), (Ids{kBos, kBos, 320, 2368, kEos, kEos}));
  EXPECT_EQ(encode_plain("a<|endoftext|>cat"), (Ids{320, kEos, 2368}));
  // Special tokens of a vocab.json + merges.txt tokenizer are matched on the raw text (normalized=false), so
  // upper case is plain text: "<|" -> < (27) |</w> (347); "endoftext" -> endof (40786) text</w> (4160) via
  // "e n" (14), "t e" (90), "d o" (129), "x t</w>" (542), "te xt</w>" (3650), "do f" (7767), "en dof" (40276);
  // "|>" -> | (91) ></w> (285).
  EXPECT_EQ(encode_plain("<|ENDOFTEXT|>"), (Ids{27, 347, 40786, 4160, 91, 285}));
}

TEST_F(ClipTokenizerTest, UnicodeText) {
  // é is bytes C3 A9 = "Ã©"; "Ã ©</w>" (line 3656) -> Ã©</w>=4166. café: "a f" (192), "c af" (2961),
  // "caf Ã©</w>" (14794) -> cafÃ©</w>=15304, the same for the decomposed e + U+0301 after NFC.
  EXPECT_EQ(encode_plain("\xC3\xA9"), (Ids{4166}));
  EXPECT_EQ(encode_plain("caf\xC3\xA9"), (Ids{15304}));
  EXPECT_EQ(encode_plain("cafe\xCC\x81"), (Ids{15304}));
  // İ lower-cases to i + U+0307; the mark is not a letter, so it is its own word: i</w>=328, U+0307 = CC 87 =
  // "Ìĩ" with "Ì ĩ</w>" (line 15874) -> 16384, stanbul</w>=11231 ("istanbul" would be one token, 12258).
  EXPECT_EQ(encode_plain("\xC4\xB0stanbul"), (Ids{328, 16384, 11231}));
  // ΣΑΣ lower-cases character by character to σασ (no final ς): CF 83 CE B1 CF 83 = Ï ĥ Î ± Ï ĥ</w>, none of
  // whose pairs has a merge -> 139 225 138 109 139 481.
  EXPECT_EQ(encode_plain("\xCE\xA3\xCE\x91\xCE\xA3"), (Ids{139, 225, 138, 109, 139, 481}));
  // 猫 = E7 8C AB = ç Į «</w>; no "ç Į" or "Į «</w>" merge -> 163 234 360.
  EXPECT_EQ(encode_plain("\xE7\x8C\xAB"), (Ids{163, 234, 360}));
  // 🙂 = F0 9F 99 82 = ð Ł Ļ Ĥ</w>: "ð Ł" (48), "ðŁ Ļ" (968), "ðŁĻ Ĥ</w>" (14350) -> 14860.
  EXPECT_EQ(encode_plain("\xF0\x9F\x99\x82"), (Ids{14860}));
}

TEST_F(ClipTokenizerTest, TruncationKeepsEos) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "a ";
  const Ids truncated = encode(text);
  ASSERT_EQ(truncated.size(), 77u);
  EXPECT_EQ(truncated.front(), kBos);
  EXPECT_EQ(truncated.back(), kEos);
  for (size_t i = 1; i + 1 < truncated.size(); ++i) EXPECT_EQ(truncated[i], 320);
  EXPECT_EQ(encode(text, {.max_length = 0}).size(), 102u);
  EXPECT_EQ(encode(text, {.max_length = 10}), (Ids{kBos, 320, 320, 320, 320, 320, 320, 320, 320, kEos}));
  EXPECT_EQ(encode(text, {.add_special_tokens = false}), Ids(77, 320));
  EXPECT_EQ(encode("a photo of a cat", {.max_length = 2}), (Ids{kBos, kEos}));
  EXPECT_EQ(tokenizer_->encode(text, {.max_length = 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer_->encode(text, {.max_length = -1}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClipTokenizerTest, NoSpecialTokensMode) {
  EXPECT_EQ(encode("a photo", {.add_special_tokens = false}), (Ids{320, 1125}));
}

TEST_F(ClipTokenizerTest, InvalidUtf8IsAnError) {
  for (const char* bad : {"caf\xC3", "\xFF",
                          "a\xED\xA0\x80"
                          "b",
                          "\xC0\x80"}) {
    const auto result = tokenizer_->encode(bad);
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(ClipTokenizerTest, DecodeRoundTrip) {
  for (const char* text :
       {"a photo of a cat", "the quick brown fox jumps over the lazy dog", "catdog", "caf\xC3\xA9"}) {
    EXPECT_EQ(tokenizer_->decode(encode_plain(text)), text);
  }
  EXPECT_EQ(tokenizer_->decode(encode("a photo of a cat")), "<|startoftext|>a photo of a cat <|endoftext|>");
  EXPECT_EQ(tokenizer_->decode({1481, 99999999, 1929}), "catdog");  // unknown ids are skipped
}

TEST_F(ClipTokenizerTest, Accessors) {
  EXPECT_EQ(tokenizer_->bos_id(), kBos);
  EXPECT_EQ(tokenizer_->eos_id(), kEos);
  EXPECT_EQ(tokenizer_->pad_id(), kEos);
  EXPECT_EQ(tokenizer_->vocab_size(), 49408);
  EXPECT_EQ(tokenizer_->model_max_length(), 77);
}

TEST_F(ClipTokenizerTest, ConcurrentEncoding) {
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"a photo of a cat", {kBos, 320, 1125, 539, 320, 2368, kEos}},
      {"catdog", {kBos, 1481, 1929, kEos}},
      {"caf\xC3\xA9 \xE7\x8C\xAB", {kBos, 15304, 163, 234, 360, kEos}},
      {"It's 2024!", {kBos, 585, 568, 273, 271, 273, 275, 256, kEos}},
  };
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int iteration = 0; iteration < 300; ++iteration) {
        const auto& [text, expected] = cases[(iteration + t) % cases.size()];
        auto ids = tokenizer_->encode(text);
        if (!ids.ok() || *ids != expected) ++failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace mmserve::text
