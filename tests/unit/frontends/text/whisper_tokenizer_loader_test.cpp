// WhisperTokenizer's loaders: the .tiktoken parser (every malformed line named by number, random bytes never
// crash), HF directories built here from the same ranks exactly as transformers' convert_openai_to_hf.py builds
// them (byte-level spelled vocab.json; merges.txt derived by re-running BPE on each token's bytes under the
// lower ranks; added_tokens.json; and a tokenizer.json) which must encode, decode and name the specials exactly
// as the tiktoken loader does over the test corpus, older HF directories (<|nocaptions|>, no timestamp tokens),
// tokenizer_config.json's prefix settings, and the goldens from tiktoken / HF when the GPU host has made them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "frontends/text/byte_level.h"
#include "frontends/text/tiktoken_ranks.h"
#include "frontends/text/whisper_tokenizer.h"
#include "whisper_test_support.h"
#include "test_paths.h"

namespace mmserve::text {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;
namespace fs = std::filesystem;

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mmserve_wtok_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// A minimal valid .tiktoken text: the 256 single bytes, plus `extra` lines.
std::string byte_file(const std::string& extra = "") {
  std::string file;
  for (int b = 0; b < 256; ++b) {
    file += testing::base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  return file + extra;
}

Status load_status(const std::string& contents, int num_languages = 99) {
  return WhisperTokenizer::from_tiktoken(contents, num_languages, "t.tiktoken").status();
}

void expect_error(const std::string& contents, const std::string& needle) {
  const Status s = load_status(contents);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message() << "\nexpected: " << needle;
}

TEST(WhisperTiktokenFile, MalformedLinesAreNamed) {
  expect_error("", "no tokens");
  expect_error(byte_file("YWI=\n"), "line 257: expected \"<base64 token> <rank>\"");
  expect_error(byte_file("YWI= 256 7\n"), "line 257: expected");
  expect_error(byte_file("!!!! 256\n"), "line 257: \"!!!!\" is not base64");
  expect_error(byte_file("YWJjZ 256\n"), "line 257: \"YWJjZ\" is not base64");  // 5 characters: impossible
  expect_error(byte_file("YWI= -1\n"), "line 257: the rank \"-1\" is not an integer");
  expect_error(byte_file("YWI= 2x\n"), "line 257: the rank \"2x\"");
  expect_error(byte_file("YWI= 99999999999999999999\n"), "line 257: the rank");
  expect_error(byte_file("YWI= 300\n"), "line 257: rank 300 but the file has 257 tokens");
  expect_error(byte_file("YWI= 255\n"), "rank 255 is also on line 256");
  expect_error(byte_file("YQ== 256\n"), "token \"a\" is also on line 98");  // 'a' is byte 97, line 98
  // A file without some single byte cannot encode every text (tiktoken would panic): refused.
  std::string missing = byte_file();
  missing.erase(0, missing.find('\n') + 1);  // drop byte 0 ...
  missing += "YWI= 0\n";                     // ... and keep the ranks dense
  expect_error(missing, "no token for the single byte 0");
}

TEST(WhisperTiktokenFile, BlankLinesCrlfAndTabsAreAccepted) {
  std::string file = byte_file();
  file.insert(0, "\n\r\n");
  file += "YWI=\t256\r\n\n";
  auto t = WhisperTokenizer::from_tiktoken(file, 0, "t.tiktoken");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->token_to_id("ab"), 256);
  EXPECT_EQ((*t)->eot(), 257);
  EXPECT_EQ((*t)->num_languages(), 0);
  EXPECT_EQ((*t)->translate(), 259);  // no language tokens between <|startoftranscript|> and the tasks
  EXPECT_EQ((*t)->encode("abab").value(), (Ids{256, 256}));
}

TEST(WhisperTiktokenFile, NumLanguagesIsChecked) {
  EXPECT_EQ(load_status(byte_file(), 101).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load_status(byte_file(), -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(load_status(byte_file(), 100).ok());
}

TEST(WhisperTiktokenFile, Base64) {
  EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(base64_decode("aGVsbG8"), "hello");  // padding optional
  EXPECT_EQ(base64_decode("IGhlbGxv"), " hello");
  EXPECT_EQ(base64_decode("="), "");  // the multilingual file's rank 50256, as Python's b64decode reads it
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_decode("/w=="), std::string(1, '\xFF'));
  EXPECT_EQ(base64_decode("a"), std::nullopt);
  EXPECT_EQ(base64_decode("a=b="), std::nullopt);
  EXPECT_EQ(base64_decode("ab==="), std::nullopt);
}

TEST(WhisperTiktokenFile, RandomBytesNeverCrash) {
  std::mt19937 rng(3);
  const std::string valid = byte_file("YWI= 256\nYWJj 257\n");
  const std::string real_head = testing::read_file(testing::kMultilingualPath).substr(0, 20000);
  int loaded = 0;
  for (int i = 0; i < 300; ++i) {
    std::string s = i % 2 == 0 ? valid : real_head;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng() & 0xFF); break;
        case 1: s.erase(at, 1 + rng() % 16); break;
        default: s.insert(at, 1, "\n =A9\t-"[rng() % 7]); break;
      }
    }
    if (i % 10 == 0) {
      s.resize(rng() % 64);
      for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    }
    auto t = WhisperTokenizer::from_tiktoken(s, static_cast<int>(rng() % 101), "fuzz");
    if (!t.ok()) {
      EXPECT_NE(t.status().code(), StatusCode::kOk);
      continue;
    }
    ++loaded;
    auto ids = (*t)->encode("hello <|endoftext|> world", AllowSpecial::kAll);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_TRUE((*t)->decode_with_timestamps(*ids).ok());
  }
  EXPECT_GT(loaded, 0);
}

// ---- HF directories built from the ranks ----

// transformers' convert_openai_to_hf.py `_bpe`: BPE on `token` using only ranks below `max_rank`.
std::vector<std::string> bpe_below(const std::unordered_map<std::string, int>& ranks, const std::string& token,
                                   int max_rank) {
  std::vector<std::string> parts;
  for (const char c : token) parts.emplace_back(1, c);
  while (true) {
    int min_rank = -1;
    size_t min_index = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && (min_rank < 0 || it->second < min_rank)) {
        min_rank = it->second;
        min_index = i;
      }
    }
    if (min_rank < 0 || min_rank >= max_rank) break;
    parts[min_index] += parts[min_index + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(min_index) + 1);
  }
  return parts;
}

TEST(WhisperTiktokenFile, EveryRealTokenSplitsIntoTwoLowerRankedTokens) {
  // What makes HF's derived merges encode like tiktoken's ranks (REFERENCE_NOTES.md): BPE on each token's
  // bytes under the ranks below its own ends in exactly two parts; and under all ranks it ends in the token
  // itself, so tiktoken's whole-word shortcut never changes a result on these files.
  for (const std::string* path : {&testing::kMultilingualPath, &testing::kGpt2Path}) {
    auto tokens = parse_tiktoken(testing::read_file(*path), *path);
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    std::unordered_map<std::string, int> ranks;
    for (size_t r = 0; r < tokens->size(); ++r) ranks.emplace((*tokens)[r], static_cast<int>(r));
    int not_two = 0, not_itself = 0;
    for (size_t r = 0; r < tokens->size(); ++r) {
      const std::string& token = (*tokens)[r];
      if (token.size() < 2) continue;
      if (bpe_below(ranks, token, static_cast<int>(r)).size() != 2) ++not_two;
      if (testing::tiktoken_byte_pair_encode(ranks, token) != std::vector<int>{static_cast<int>(r)}) ++not_itself;
    }
    EXPECT_EQ(not_two, 0) << *path;
    EXPECT_EQ(not_itself, 0) << *path;
  }
}

struct HfFiles {
  json vocab = json::object();
  std::vector<std::string> merges;  // "a b"
  std::vector<std::pair<std::string, int32_t>> specials;
};

// convert_tiktoken_bpe_to_hf: vocab = byte-level spelled tokens -> rank; a merge per token whose BPE under the
// lower ranks ends in two parts; the special tokens from the tiktoken tokenizer (ids eot..vocab_size-1).
HfFiles hf_files(const std::string& path, const WhisperTokenizer& reference) {
  HfFiles files;
  auto tokens = parse_tiktoken(testing::read_file(path), path);
  EXPECT_TRUE(tokens.ok()) << tokens.status().to_string();
  if (!tokens.ok()) return files;
  std::unordered_map<std::string, int> ranks;
  for (size_t r = 0; r < tokens->size(); ++r) ranks.emplace((*tokens)[r], static_cast<int>(r));
  for (size_t r = 0; r < tokens->size(); ++r) {
    const std::string& token = (*tokens)[r];
    files.vocab[bytes_to_byte_level(token)] = r;
    if (token.size() == 1) continue;
    const std::vector<std::string> merged = bpe_below(ranks, token, static_cast<int>(r));
    if (merged.size() == 2)
      files.merges.push_back(bytes_to_byte_level(merged[0]) + " " + bytes_to_byte_level(merged[1]));
  }
  for (int32_t id = reference.eot(); id < reference.vocab_size(); ++id) {
    files.specials.emplace_back(reference.id_to_token(id).value(), id);
  }
  return files;
}

// Built once per vocabulary (deriving the merges takes a moment).
const HfFiles& cached_hf_files(bool multilingual) {
  static const HfFiles m = hf_files(testing::kMultilingualPath, *testing::vocabularies().multilingual);
  static const HfFiles g = hf_files(testing::kGpt2Path, *testing::vocabularies().gpt2);
  return multilingual ? m : g;
}

void write_vocab_merges_dir(const fs::path& dir, const HfFiles& files) {
  write(dir / "vocab.json", files.vocab.dump());
  std::string merges = "#version: 0.2\n";
  for (const std::string& m : files.merges) merges += m + "\n";
  write(dir / "merges.txt", merges);
  json added = json::object();
  json additional = json::array();
  for (const auto& [content, id] : files.specials) {
    added[content] = id;
    if (content.find('.') == std::string::npos) additional.push_back(content);  // not the timestamps
  }
  write(dir / "added_tokens.json", added.dump());
  write(dir / "special_tokens_map.json", json{{"bos_token", "<|endoftext|>"},
                                              {"eos_token", "<|endoftext|>"},
                                              {"unk_token", "<|endoftext|>"},
                                              {"pad_token", "<|endoftext|>"},
                                              {"additional_special_tokens", additional}}
                                             .dump());
}

void write_tokenizer_json_dir(const fs::path& dir, const HfFiles& files) {
  json added = json::array();
  for (const auto& [content, id] : files.specials) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<|endoftext|>"},  // an added token, not in the BPE vocabulary (HF's files do this)
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", files.vocab},
        {"merges", files.merges}}}};
  write(dir / "tokenizer.json", tokenizer.dump());
}

void expect_same_tokenizer(const WhisperTokenizer& hf, const WhisperTokenizer& tiktoken) {
  EXPECT_EQ(hf.vocab_size(), tiktoken.vocab_size());
  EXPECT_EQ(hf.eot(), tiktoken.eot());
  EXPECT_EQ(hf.sot(), tiktoken.sot());
  EXPECT_EQ(hf.no_speech(), tiktoken.no_speech());
  EXPECT_EQ(hf.no_timestamps(), tiktoken.no_timestamps());
  EXPECT_EQ(hf.timestamp_begin(), tiktoken.timestamp_begin());
  EXPECT_EQ(hf.language_ids(), tiktoken.language_ids());
  int mismatches = 0;
  for (const std::string& text : testing::corpus()) {
    for (const AllowSpecial allow : {AllowSpecial::kNone, AllowSpecial::kAll}) {
      const auto a = hf.encode(text, allow);
      const auto b = tiktoken.encode(text, allow);
      ASSERT_TRUE(a.ok() && b.ok()) << text;
      if (*a != *b && ++mismatches <= 5) ADD_FAILURE() << "encodings differ for \"" << text << "\"";
      EXPECT_EQ(hf.decode_with_timestamps(*a).value(), tiktoken.decode_with_timestamps(*b).value());
    }
  }
  const Ids mixed = {tiktoken.sot(), tiktoken.transcribe(), 40, tiktoken.timestamp_begin() + 7, tiktoken.eot()};
  EXPECT_EQ(hf.decode(mixed).value(), tiktoken.decode(mixed).value());
  EXPECT_EQ(hf.decode(mixed, true).value(), tiktoken.decode(mixed, true).value());
  EXPECT_EQ(mismatches, 0);
}

class WhisperHfDirectory : public ::testing::TestWithParam<bool> {  // true: the multilingual vocabulary
 protected:
  const WhisperTokenizer& reference() const {
    return GetParam() ? *testing::vocabularies().multilingual : *testing::vocabularies().gpt2;
  }
  const HfFiles& files() const { return cached_hf_files(GetParam()); }
  std::string name() const { return GetParam() ? "multilingual" : "gpt2"; }
};

TEST_P(WhisperHfDirectory, VocabMergesAddedTokensEqualTiktoken) {
  // 50000 merges for both vocabularies, as HF's Whisper files have.
  EXPECT_EQ(files().merges.size(), 50000u);
  const fs::path dir = scratch_dir("vm_" + name());
  write_vocab_merges_dir(dir, files());
  auto hf = WhisperTokenizer::from_model_dir(dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  expect_same_tokenizer(**hf, reference());
  fs::remove_all(dir);
}

TEST_P(WhisperHfDirectory, TokenizerJsonEqualsTiktoken) {
  const fs::path dir = scratch_dir("tj_" + name());
  write_tokenizer_json_dir(dir, files());
  auto hf = WhisperTokenizer::from_model_dir(dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  expect_same_tokenizer(**hf, reference());
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(BothVocabularies, WhisperHfDirectory, ::testing::Bool());

TEST(WhisperHfDirectoryOld, NocaptionsAndNoTimestampTokens) {
  // HF's first Whisper files: "<|nocaptions|>" for <|nospeech|> and no timestamp tokens; timestamp ids follow
  // <|notimestamps|>, as HF's timestamp_begin = last special + 1 assumes.
  const WhisperTokenizer& reference = *testing::vocabularies().multilingual;
  HfFiles files = cached_hf_files(true);
  std::vector<std::pair<std::string, int32_t>> specials;
  for (auto [content, id] : files.specials) {
    if (id >= reference.timestamp_begin()) continue;
    if (content == "<|nospeech|>") content = "<|nocaptions|>";
    specials.emplace_back(content, id);
  }
  files.specials = specials;
  const fs::path dir = scratch_dir("old");
  write_vocab_merges_dir(dir, files);
  auto hf = WhisperTokenizer::from_model_dir(dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const WhisperTokenizer& t = **hf;
  EXPECT_EQ(t.no_speech(), 50362);
  EXPECT_EQ(t.timestamp_begin(), 50364);
  EXPECT_EQ(t.vocab_size(), 51865);
  EXPECT_EQ(t.decode_with_timestamps({50364, 50418}).value(), "<|0.00|><|1.08|>");
  EXPECT_EQ(t.decode({50364, 50418}).value(), "");
  // "<|0.00|>" is not a token here: it is ordinary text even when special tokens are allowed.
  EXPECT_EQ(t.encode("<|0.00|>", AllowSpecial::kAll).value(), t.encode("<|0.00|>").value());
  EXPECT_EQ(t.decode_with_timestamps({51865}).status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(WhisperHfDirectoryOld, PrefixSettingsAndErrors) {
  const HfFiles& files = cached_hf_files(true);
  const fs::path dir = scratch_dir("prefix");
  write_vocab_merges_dir(dir, files);

  auto plain = WhisperTokenizer::from_model_dir(dir.string());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->hf_prefix_tokens().value(), (Ids{50258, 50363}));  // HF's default: sot, notimestamps

  write(dir / "tokenizer_config.json",
        json{{"language", "English"}, {"task", "translate"}, {"predict_timestamps", true}}.dump());
  auto configured = WhisperTokenizer::from_model_dir(dir.string());
  ASSERT_TRUE(configured.ok()) << configured.status().to_string();
  EXPECT_EQ((*configured)->hf_prefix().language, "en");
  EXPECT_EQ((*configured)->hf_prefix_tokens().value(), (Ids{50258, 50259, 50358}));

  write(dir / "tokenizer_config.json", json{{"language", "elvish"}}.dump());
  auto bad_language = WhisperTokenizer::from_model_dir(dir.string());
  EXPECT_EQ(bad_language.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_language.status().message().find("'elvish'"), std::string::npos);
  write(dir / "tokenizer_config.json", json{{"task", "summarize"}}.dump());
  EXPECT_EQ(WhisperTokenizer::from_model_dir(dir.string()).status().code(), StatusCode::kInvalidArgument);
  fs::remove(dir / "tokenizer_config.json");

  // An added-token id far past any vocabulary, a directory without the Whisper specials, broken merges, no files.
  write(dir / "special_tokens_map.json", "{}");
  write(dir / "added_tokens.json", json{{"<|endoftext|>", 2147483647}}.dump());
  auto huge = WhisperTokenizer::from_model_dir(dir.string());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("2147483647"), std::string::npos) << huge.status().message();
  write(dir / "added_tokens.json", json{{"<|endoftext|>", 50257}}.dump());
  auto no_specials = WhisperTokenizer::from_model_dir(dir.string());
  EXPECT_EQ(no_specials.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_specials.status().message().find("<|startoftranscript|>"), std::string::npos);
  write(dir / "merges.txt", "#version: 0.2\nnot_a_token also_not\n");
  auto bad_merges = WhisperTokenizer::from_model_dir(dir.string());
  EXPECT_EQ(bad_merges.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_merges.status().message().find("merge 1"), std::string::npos) << bad_merges.status().message();
  write(dir / "vocab.json", "{\"a\": ");
  EXPECT_FALSE(WhisperTokenizer::from_model_dir(dir.string()).ok());
  fs::remove(dir / "vocab.json");
  EXPECT_EQ(WhisperTokenizer::from_model_dir(dir.string()).status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

// ---- goldens from the reference implementations ----

TEST(WhisperGolden, MatchesTiktokenAndHf) {
  // Written on the GPU host by tools/reference/make_whisper_tokens.py: entries {"text", "allowed_special",
  // "tiktoken_multilingual", "tiktoken_gpt2", "hf_multilingual"} with tiktoken's encode(text,
  // allowed_special="all") (or as plain text when allowed_special is false) and HF's
  // tokenizer(text, add_special_tokens=False).input_ids; a top-level array or {"entries": [...]}.
  const std::string path = MMSERVE_FIXTURES_DIR + "/whisper/whisper_tokens.json";
  if (!fs::exists(path))
    GTEST_SKIP() << "golden not generated yet: run tools/reference/make_whisper_tokens.py on the GPU host";
  json golden = json::parse(testing::read_file(path), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(golden.is_discarded()) << path << " is not JSON";
  if (golden.is_object() && golden.contains("entries")) golden = golden["entries"];
  ASSERT_TRUE(golden.is_array()) << path;
  ASSERT_FALSE(golden.empty());
  // An HF directory saved next to the goldens (save_pretrained), when the script writes one.
  std::unique_ptr<WhisperTokenizer> hf_dir;
  if (fs::exists(MMSERVE_FIXTURES_DIR + "/whisper/whisper_tokenizer_hf")) {
    auto loaded = WhisperTokenizer::from_model_dir(MMSERVE_FIXTURES_DIR + "/whisper/whisper_tokenizer_hf");
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    hf_dir = std::move(loaded).value();
  }
  const auto& v = testing::vocabularies();
  int compared = 0;
  for (const json& entry : golden) {
    ASSERT_TRUE(entry.is_object() && entry.contains("text") && entry["text"].is_string()) << entry.dump();
    const std::string text = entry["text"].get<std::string>();
    // allowed_special false: the script encoded special-token text as ordinary text (disallowed_special=()).
    const bool allowed = !entry.contains("allowed_special") || entry["allowed_special"] != false;
    const auto check = [&](const char* key, const WhisperTokenizer& t) {
      if (!entry.contains(key) || entry[key].is_null()) return;  // null: that reference could not run
      const Ids expected = entry[key].get<Ids>();
      auto ids = t.encode(text, allowed ? AllowSpecial::kAll : AllowSpecial::kNone);
      ASSERT_TRUE(ids.ok()) << key << " " << text << ": " << ids.status().to_string();
      EXPECT_EQ(*ids, expected) << key << " text: " << entry["text"].dump();
      ++compared;
    };
    check("tiktoken_multilingual", *v.multilingual);
    check("tiktoken_gpt2", *v.gpt2);
    check("hf_multilingual", *v.multilingual);
    if (hf_dir) check("hf_multilingual", *hf_dir);
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace mmserve::text
