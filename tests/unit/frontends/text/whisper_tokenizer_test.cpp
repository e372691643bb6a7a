// WhisperTokenizer on the real vocabularies (assets/whisper_tokenizer): the special-token ids that whisper's
// get_encoding() constructs (checked against the ids the reference package documents), exact encodings whose
// ids are read from the .tiktoken file itself, the BPE compared with a literal transcription of tiktoken's
// `_byte_pair_merge` (real and random vocabularies, ties included), decode / decode_with_timestamps and
// U+FFFD replacement, round trips over a varied corpus for both vocabularies, the language / task API, and
// concurrency. Loaders and broken files: whisper_tokenizer_loader_test.cpp.
#include "frontends/text/whisper_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "frontends/text/bpe.h"
#include "frontends/text/byte_level.h"
#include "frontends/text/tiktoken_ranks.h"
#include "whisper_test_support.h"

namespace mmserve::text {
namespace {

using Ids = std::vector<int32_t>;
using testing::vocabularies;

Ids encode(const WhisperTokenizer& t, std::string_view text, AllowSpecial allow = AllowSpecial::kNone) {
  auto ids = t.encode(text, allow);
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? *ids : Ids{};
}

std::string decode(const WhisperTokenizer& t, const Ids& ids, bool skip_special = false) {
  auto text = t.decode(ids, skip_special);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : "<error>";
}

const WhisperTokenizer& multilingual() {
  return *vocabularies().multilingual;
}
const WhisperTokenizer& gpt2() {
  return *vocabularies().gpt2;
}

TEST(WhisperTokenizer, MultilingualSpecialIds) {
  const WhisperTokenizer& t = multilingual();
  // The ids the reference package and HF's files use for every multilingual checkpoint but large-v3.
  EXPECT_EQ(t.eot(), 50257);
  EXPECT_EQ(t.sot(), 50258);
  EXPECT_EQ(t.language_token("en").value(), 50259);
  EXPECT_EQ(t.translate(), 50358);
  EXPECT_EQ(t.transcribe(), 50359);
  EXPECT_EQ(t.sot_lm(), 50360);
  EXPECT_EQ(t.sot_prev(), 50361);
  EXPECT_EQ(t.no_speech(), 50362);
  EXPECT_EQ(t.no_timestamps(), 50363);
  EXPECT_EQ(t.timestamp_begin(), 50364);
  EXPECT_EQ(t.timestamp_end(), 51864);
  EXPECT_EQ(t.vocab_size(), 51865);
  EXPECT_TRUE(t.is_multilingual());
  EXPECT_EQ(t.num_languages(), 99);
  // By construction: 50257 ranks, then the specials in get_encoding's order.
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 50257);
  EXPECT_EQ(t.token_to_id("<|0.00|>"), 50364);
  EXPECT_EQ(t.token_to_id("<|0.02|>"), 50365);
  EXPECT_EQ(t.token_to_id("<|1.08|>"), 50364 + 54);
  EXPECT_EQ(t.token_to_id("<|30.00|>"), 51864);
  EXPECT_EQ(t.id_to_token(51864), "<|30.00|>");
  EXPECT_EQ(t.id_to_token(50362), "<|nospeech|>");
  EXPECT_EQ(t.id_to_token(50259 + 98), "<|su|>");  // the 99th language
  EXPECT_EQ(t.token_to_id("<|yue|>"), std::nullopt);
  EXPECT_EQ(t.id_to_token(51865), std::nullopt);
  ASSERT_EQ(t.language_ids().size(), 99u);
  for (size_t i = 0; i < t.language_ids().size(); ++i) EXPECT_EQ(t.language_ids()[i], 50259 + static_cast<int>(i));
  EXPECT_TRUE(t.is_special(50257));
  EXPECT_TRUE(t.is_special(51864));
  EXPECT_FALSE(t.is_special(50256));
  EXPECT_TRUE(t.is_timestamp(50364));
  EXPECT_FALSE(t.is_timestamp(50363));
  // Rank 50256 of the multilingual file is the empty token ("=" in base64): it exists and decodes to nothing.
  EXPECT_EQ(t.id_to_token(50256), "");
}

TEST(WhisperTokenizer, LargeV3AddsCantonese) {
  auto loaded = WhisperTokenizer::from_tiktoken_file(testing::kMultilingualPath, 100);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const WhisperTokenizer& t = **loaded;
  EXPECT_EQ(t.language_token("yue").value(), 50358);
  EXPECT_EQ(t.language_token("Cantonese").value(), 50358);
  EXPECT_EQ(t.translate(), 50359);
  EXPECT_EQ(t.transcribe(), 50360);
  EXPECT_EQ(t.no_timestamps(), 50364);
  EXPECT_EQ(t.timestamp_begin(), 50365);
  EXPECT_EQ(t.vocab_size(), 51866);
  EXPECT_EQ(t.num_languages(), 100);
}

TEST(WhisperTokenizer, EnglishOnlySpecialIds) {
  const WhisperTokenizer& t = gpt2();
  // GPT-2's 50256 ranks, then the same specials: the .en checkpoints' ids.
  EXPECT_EQ(t.eot(), 50256);
  EXPECT_EQ(t.sot(), 50257);
  EXPECT_EQ(t.language_token("en").value(), 50258);
  EXPECT_EQ(t.translate(), 50357);
  EXPECT_EQ(t.transcribe(), 50358);
  EXPECT_EQ(t.no_timestamps(), 50362);
  EXPECT_EQ(t.timestamp_begin(), 50363);
  EXPECT_EQ(t.vocab_size(), 51864);
  EXPECT_FALSE(t.is_multilingual());
}

TEST(WhisperTokenizer, LanguagesAndSotSequence) {
  const WhisperTokenizer& t = multilingual();
  EXPECT_EQ(t.sot_sequence("en", WhisperTask::kTranscribe, false).value(), (Ids{50258, 50259, 50359, 50363}));
  EXPECT_EQ(t.sot_sequence("English", WhisperTask::kTranslate, true).value(), (Ids{50258, 50259, 50358}));
  EXPECT_EQ(t.sot_sequence("", std::nullopt, true).value(), (Ids{50258}));
  EXPECT_EQ(t.sot_sequence("", std::nullopt, false).value(), (Ids{50258, 50363}));
  EXPECT_EQ(t.language_token("zh").value(), 50260);
  EXPECT_EQ(t.language_token("Mandarin").value(), 50260);  // TO_LANGUAGE_CODE alias
  EXPECT_EQ(t.language_token("castilian").value(), t.language_token("es").value());
  EXPECT_EQ(t.language_token("haw").value(), 50259 + 93);
  EXPECT_EQ(t.task_token(WhisperTask::kTranscribe), 50359);

  auto unknown = t.language_token("xx");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'xx'"), std::string::npos) << unknown.status().message();
  auto not_here = t.language_token("yue");  // a real code, but only in large-v3's vocabulary
  EXPECT_EQ(not_here.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_here.status().message().find("'yue'"), std::string::npos);
  EXPECT_EQ(t.sot_sequence("klingon", std::nullopt, false).status().code(), StatusCode::kInvalidArgument);
}

TEST(WhisperTokenizer, KnownEncodingsFromTheFile) {
  // Every id below is read from the .tiktoken text (base64 line lookup). The pre-tokens are GPT-2's regex
  // matches; a pre-token that is itself a token is that token (tiktoken's rule), so no merging is involved.
  for (const auto* v : {&vocabularies().multilingual_file, &vocabularies().gpt2_file}) {
    const WhisperTokenizer& t = v == &vocabularies().multilingual_file ? multilingual() : gpt2();
    const auto rank = [&](std::string_view bytes) {
      const int r = testing::rank_in_file(*v, bytes);
      EXPECT_GE(r, 0) << "no token for \"" << bytes << "\"";
      return r;
    };
    EXPECT_EQ(encode(t, " hello"), (Ids{rank(" hello")}));
    EXPECT_EQ(encode(t, "Hello world"), (Ids{rank("Hello"), rank(" world")}));
    EXPECT_EQ(encode(t, "It's"), (Ids{rank("It"), rank("'s")}));
    // `\s+(?!\S)` leaves the last space of a run to the next word: "a", " ", " b".
    EXPECT_EQ(encode(t, "a  b"), (Ids{rank("a"), rank(" "), rank(" b")}));
    EXPECT_EQ(encode(t, " 2024"), (Ids{rank(" 2024")}));
    EXPECT_EQ(encode(t, "!"), (Ids{0}));
    // Special-token text: the token when allowed, ordinary text otherwise.
    EXPECT_EQ(encode(t, "<|endoftext|>", AllowSpecial::kAll), (Ids{t.eot()}));
    EXPECT_EQ(encode(t, " hello<|endoftext|>", AllowSpecial::kAll), (Ids{rank(" hello"), t.eot()}));
    const Ids as_text = encode(t, "<|endoftext|>", AllowSpecial::kNone);
    EXPECT_GT(as_text.size(), 1u);
    for (const int32_t id : as_text) EXPECT_LT(id, t.eot());
    EXPECT_EQ(decode(t, as_text), "<|endoftext|>");
  }
  // "\n\n" is one GPT-2 token but not a multilingual one.
  EXPECT_EQ(encode(gpt2(), "\n\n"), (Ids{testing::rank_in_file(vocabularies().gpt2_file, "\n\n")}));
  EXPECT_EQ(testing::rank_in_file(vocabularies().multilingual_file, "\n\n"), -1);
  EXPECT_EQ(encode(multilingual(), "\n\n").size(), 2u);
}

// BpeModel over tiktoken_bpe_config(ranks) against the literal `_byte_pair_merge` on many byte strings.
void expect_bpe_equals_tiktoken(const std::vector<std::string>& tokens, const std::vector<std::string>& pieces) {
  auto model = BpeModel::create(tiktoken_bpe_config(tokens));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::unordered_map<std::string, int> ranks;
  for (size_t r = 0; r < tokens.size(); ++r) ranks.emplace(tokens[r], static_cast<int>(r));
  int mismatches = 0;
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    std::vector<int32_t> ours;
    (*model)->tokenize(bytes_to_byte_level(piece), ours);
    const std::vector<int> reference = testing::tiktoken_byte_pair_encode(ranks, piece);
    if (std::vector<int>(ours.begin(), ours.end()) != reference && ++mismatches <= 5) {
      ADD_FAILURE() << "piece \"" << piece << "\": BpeModel and _byte_pair_merge differ";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(WhisperTokenizer, BpeIsTiktokensMergeOnTheRealRanks) {
  std::mt19937 rng(7);
  for (const std::string* path : {&testing::kMultilingualPath, &testing::kGpt2Path}) {
    auto tokens = parse_tiktoken(testing::read_file(*path), *path);
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    std::vector<std::string> pieces = {"hello",
                                       "aaaaaaaaaaaaaaaaaaa",
                                       "abababababab",
                                       " antidisestablishmentarianism",
                                       "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C",
                                       std::string(40, ' ')};
    // Concatenations of real tokens, cut at random byte offsets (words that are rarely one token).
    std::uniform_int_distribution<size_t> pick(0, tokens->size() - 1);
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < n; ++k) s += (*tokens)[pick(rng)];
      if (s.size() > 2) s = s.substr(rng() % 2, s.size() - rng() % 2);
      pieces.push_back(s);
    }
    // Random bytes, and runs over a tiny alphabet (many equal-rank ties).
    for (int i = 0; i < 500; ++i) {
      std::string s(1 + rng() % 12, '\0');
      for (char& c : s) c = static_cast<char>(rng() & 0xFF);
      pieces.push_back(s);
      std::string t(1 + rng() % 24, '\0');
      for (char& c : t) c = "ab "[rng() % 3];
      pieces.push_back(t);
    }
    expect_bpe_equals_tiktoken(*tokens, pieces);
  }
}

TEST(WhisperTokenizer, BpeIsTiktokensMergeOnRandomRanks) {
  // A vocabulary no BPE training would produce: random strings over {a, b, c} with shuffled ranks (single bytes
  // included), so pairs of equal concatenation and splits other than the "canonical" one both occur.
  std::mt19937 rng(11);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    std::unordered_map<std::string, bool> seen;
    for (const std::string& t : tokens) seen[t] = true;
    while (tokens.size() < 256 + 60) {
      std::string s(2 + rng() % 4, 'a');
      for (char& c : s) c = "abc"[rng() % 3];
      if (!seen[s]) {
        seen[s] = true;
        tokens.push_back(s);
      }
    }
    std::shuffle(tokens.begin(), tokens.end(), rng);
    std::vector<std::string> pieces;
    for (int i = 0; i < 400; ++i) {
      std::string s(1 + rng() % 20, 'a');
      for (char& c : s) c = "abc"[rng() % 3];
      pieces.push_back(s);
    }
    expect_bpe_equals_tiktoken(tokens, pieces);
  }
}

TEST(WhisperTokenizer, WholeWordThatIsATokenIsThatToken) {
  // "abc" is a token but neither "ab" nor "bc" is: BPE alone gives a b c; tiktoken's shortcut gives abc.
  std::string file;
  for (int b = 0; b < 256; ++b)
    file += testing::base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  file += testing::base64_encode("abc") + " 256\n";
  auto t = WhisperTokenizer::from_tiktoken(file, 2, "synthetic");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(encode(**t, "abc"), (Ids{256}));
  EXPECT_EQ(encode(**t, "abcd"), (Ids{'a', 'b', 'c', 'd'}));
  // num_languages = 2: <|en|> <|zh|>, then the tasks.
  EXPECT_EQ((*t)->eot(), 257);
  EXPECT_EQ((*t)->language_token("zh").value(), 260);
  EXPECT_EQ((*t)->translate(), 261);
  EXPECT_EQ((*t)->timestamp_begin(), 267);
  EXPECT_EQ((*t)->language_token("de").status().code(), StatusCode::kInvalidArgument);
}

TEST(WhisperTokenizer, RoundTripOverTheCorpus) {
  for (const WhisperTokenizer* t : {&multilingual(), &gpt2()}) {
    for (const std::string& text : testing::corpus()) {
      const Ids ids = encode(*t, text);
      EXPECT_EQ(decode(*t, ids), text) << "text: " << text;
      for (const int32_t id : ids) EXPECT_LT(id, t->eot()) << text;
      const Ids with_special = encode(*t, text, AllowSpecial::kAll);
      EXPECT_EQ(t->decode_with_timestamps(with_special).value(), text);
      if (text.find("<|endoftext|>") == std::string::npos) {
        EXPECT_EQ(with_special, ids) << text;
      }
    }
  }
}

TEST(WhisperTokenizer, RoundTripWithSpecialTokens) {
  const std::string text = "<|startoftranscript|><|en|><|transcribe|><|0.00|> And so<|1.08|><|endoftext|>";
  for (const WhisperTokenizer* t : {&multilingual(), &gpt2()}) {
    const Ids ids = encode(*t, text, AllowSpecial::kAll);
    ASSERT_GE(ids.size(), 8u);
    EXPECT_EQ(ids[0], t->sot());
    EXPECT_EQ(ids[1], t->language_token("en").value());
    EXPECT_EQ(ids[2], t->transcribe());
    EXPECT_EQ(ids[3], t->timestamp_begin());
    EXPECT_EQ(ids[ids.size() - 2], t->timestamp_begin() + 54);
    EXPECT_EQ(ids.back(), t->eot());
    EXPECT_EQ(t->decode_with_timestamps(ids).value(), text);
    // decode drops timestamps (the package's Tokenizer.decode), skip_special drops the rest.
    EXPECT_EQ(decode(*t, ids), "<|startoftranscript|><|en|><|transcribe|> And so<|endoftext|>");
    EXPECT_EQ(decode(*t, ids, /*skip_special=*/true), " And so");
  }
}

TEST(WhisperTokenizer, DecodeReplacesPartialCharacters) {
  const WhisperTokenizer& t = multilingual();
  const auto byte = [&](unsigned char b) { return t.token_to_id(std::string(1, static_cast<char>(b))).value(); };
  const std::string fffd = "\xEF\xBF\xBD";
  // U+20AC is E2 82 AC. A truncated sequence is one maximal ill-formed subpart -> one U+FFFD (Python's
  // bytes.decode(errors="replace")); a byte that can never start a character is one each.
  EXPECT_EQ(decode(t, {byte(0xE2), byte(0x82), byte(0xAC)}), "\xE2\x82\xAC");
  EXPECT_EQ(decode(t, {byte(0xE2), byte(0x82)}), fffd);
  EXPECT_EQ(decode(t, {byte(0xE2)}), fffd);
  EXPECT_EQ(decode(t, {byte(0xE2), byte('a')}), fffd + "a");
  EXPECT_EQ(decode(t, {byte(0xFF), byte(0xFE)}), fffd + fffd);
  EXPECT_EQ(decode(t, {byte(0x82), byte(0xAC)}), fffd + fffd);
  // A character split across tokens decodes whole: bytes are joined before decoding.
  const Ids emoji = encode(t, "\xF0\x9F\x98\x80");
  EXPECT_GT(emoji.size(), 1u);
  EXPECT_EQ(decode(t, emoji), "\xF0\x9F\x98\x80");
  EXPECT_EQ(decode(t, Ids(emoji.begin(), emoji.end() - 1)), fffd);
}

TEST(WhisperTokenizer, DecodeErrorsAndDroppedIds) {
  const WhisperTokenizer& t = multilingual();
  EXPECT_EQ(t.decode({-1}).status().code(), StatusCode::kInvalidArgument);
  // Ids >= timestamp_begin are filtered before lookup, as the package does, even past the vocabulary...
  EXPECT_EQ(decode(t, {51865, 1000000}), "");
  // ...but decode_with_timestamps looks every id up.
  auto past = t.decode_with_timestamps({51865});
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("51865"), std::string::npos);
  EXPECT_EQ(t.decode_with_timestamps({50364, 50418, 51864}).value(), "<|0.00|><|1.08|><|30.00|>");
  EXPECT_EQ(decode(t, {50256}), "");  // the empty token
  EXPECT_EQ(decode(t, {}), "");
}

TEST(WhisperTokenizer, EncodeRejectsInvalidUtf8) {
  for (const char* bad : {"\xFF", "abc\xE2\x82", "\xED\xA0\x80", "\xC0\xAF"}) {
    auto ids = multilingual().encode(bad);
    EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(WhisperTokenizer, TokenLookups) {
  const WhisperTokenizer& t = gpt2();
  const int hello = testing::rank_in_file(vocabularies().gpt2_file, " hello");
  EXPECT_EQ(t.token_to_id(" hello"), hello);
  EXPECT_EQ(t.id_to_token(hello), " hello");
  EXPECT_EQ(t.token_to_id(std::string(1, '\xFF')), testing::rank_in_file(vocabularies().gpt2_file, "\xFF"));
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(t.token_to_id("definitely not one token"), std::nullopt);
  EXPECT_EQ(t.id_to_token(-5), std::nullopt);
}

TEST(WhisperTokenizer, ConcurrentEncodeAgrees) {
  const WhisperTokenizer& t = multilingual();
  std::vector<Ids> expected;
  for (const std::string& text : testing::corpus()) expected.push_back(encode(t, text));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < testing::corpus().size(); ++i) {
          auto ids = t.encode(testing::corpus()[i]);
          if (!ids.ok() || *ids != expected[i]) ++failures;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace mmserve::text
