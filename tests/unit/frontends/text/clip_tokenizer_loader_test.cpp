// The loaders: a small tokenizer.json written here (10-token vocabulary, one merge "h i</w>") exercises the
// tokenizer.json path - normalizer, Split + ByteLevel, BPE with an unknown token, added-token flags
// (normalized, single_word, lstrip), Roberta and Template post-processors - with every expected id derived by
// hand from that vocabulary; from_model_dir's transformers-5 precedence (tokenizer_config.json over
// tokenizer.json); and each malformed-input error (missing files, bad JSON, bad merges, absent special tokens).
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frontends/text/clip_tokenizer.h"

namespace mmserve::text {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr EncodeOptions kPlain{.add_special_tokens = false, .max_length = 0};

// A per-test scratch directory, removed afterwards.
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mmserve_text_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) const {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }

  static json small_tokenizer_json() {
    json vocab = {{"<|startoftext|>", 0}, {"<|endoftext|>", 1}, {"h", 2},     {"i", 3}, {"h</w>", 4},
                  {"i</w>", 5},           {"hi</w>", 6},        {"!</w>", 7}, {"x", 8}, {"x</w>", 9}};
    const auto added = [](int id, const char* content, bool normalized, bool special, bool single_word, bool lstrip) {
      return json{{"id", id},        {"content", content},       {"single_word", single_word}, {"lstrip", lstrip},
                  {"rstrip", false}, {"normalized", normalized}, {"special", special}};
    };
    return json{
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens",
         {added(0, "<|startoftext|>", true, true, false, false), added(1, "<|endoftext|>", false, true, false, false),
          added(10, "[MASK]", false, false, true, true)}},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers",
           {{{"type", "NFC"}},
            {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
            {{"type", "Lowercase"}}}}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+"}}},
             {"behavior", "Removed"},
             {"invert", true}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}}},
        {"post_processor",
         {{"type", "RobertaProcessing"},
          {"sep", {"<|endoftext|>", 1}},
          {"cls", {"<|startoftext|>", 0}},
          {"trim_offsets", false},
          {"add_prefix_space", false}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", "<|endoftext|>"},
          {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", "</w>"},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", {"h i</w>"}}}}};
  }

  static Ids encode(const ClipTokenizer& tokenizer, std::string_view text, EncodeOptions options = {}) {
    auto ids = tokenizer.encode(text, options);
    EXPECT_TRUE(ids.ok()) << ids.status().to_string();
    return ids.ok() ? *ids : Ids{};
  }

  fs::path dir_;
};

TEST_F(LoaderTest, TokenizerJsonPipeline) {
  auto t = ClipTokenizer::from_tokenizer_json(write("tokenizer.json", small_tokenizer_json().dump()));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // hi -> h i</w> -> hi</w> (6); "!" -> !</w> (7); BOS 0 / EOS 1 from RobertaProcessing.
  EXPECT_EQ(encode(**t, "HI  hi!"), (Ids{0, 6, 6, 7, 1}));
  EXPECT_EQ(encode(**t, "Hi<|endoftext|>"), (Ids{0, 6, 1, 1}));
  // y is unknown -> <|endoftext|> (1); h stays h (2) when followed by an unknown y</w>.
  EXPECT_EQ(encode(**t, "hy", kPlain), (Ids{2, 1}));
  EXPECT_EQ((*t)->vocab_size(), 11);
  EXPECT_EQ((*t)->decode({0, 6, 1}), "<|startoftext|>hi <|endoftext|>");
}

TEST_F(LoaderTest, AddedTokenFlags) {
  auto t = ClipTokenizer::from_tokenizer_json(write("tokenizer.json", small_tokenizer_json().dump()));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // <|startoftext|> is normalized=true: matched after lower-casing.
  EXPECT_EQ(encode(**t, "<|STARTOFTEXT|>", kPlain), (Ids{0}));
  // <|endoftext|> is normalized=false: upper case stays text. "<|" -> < and |</w> unknown (1 1); "endoftext":
  // only x is in the vocabulary (8), the other eight characters are unknown; "|>" -> 1 1.
  EXPECT_EQ(encode(**t, "<|ENDOFTEXT|>", kPlain), (Ids{1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 1, 1, 1}));
  // [MASK]: single_word + lstrip - after a space it matches and swallows the space; glued to "hi" it does not,
  // and "hi[mask]" is hi</w> (6), [ (1), m a s k</w> (1 1 1 1), ] (1).
  EXPECT_EQ(encode(**t, "hi [MASK]", kPlain), (Ids{6, 10}));
  EXPECT_EQ(encode(**t, "hi[MASK]", kPlain), (Ids{6, 1, 1, 1, 1, 1, 1}));
}

TEST_F(LoaderTest, TemplatePostProcessor) {
  json j = small_tokenizer_json();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|startoftext|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|startoftext|>", {{"id", "<|startoftext|>"}, {"ids", {0}}, {"tokens", {"<|startoftext|>"}}}},
        {"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {1}}, {"tokens", {"<|endoftext|>"}}}}}}};
  auto t = ClipTokenizer::from_tokenizer_json(write("tokenizer.json", j.dump()));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(encode(**t, "hi"), (Ids{0, 6, 1}));
}

TEST_F(LoaderTest, ModelDirPrefersTokenizerConfig) {
  write("tokenizer.json", small_tokenizer_json().dump());
  write("tokenizer_config.json", json{{"model_max_length", 64}, {"tokenizer_class", "CLIPTokenizer"}}.dump());
  auto t = ClipTokenizer::from_model_dir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->model_max_length(), 64);
  EXPECT_EQ(encode(**t, "HI hi!"), (Ids{0, 6, 6, 7, 1}));
  EXPECT_EQ(encode(**t, "<|ENDOFTEXT|>", kPlain).size(), 13u);  // tokenizer.json's flags: not matched

  // added_tokens_decoder in tokenizer_config.json takes precedence (transformers 5): <|endoftext|> now
  // normalized=true, so the upper-case spelling matches after lower-casing.
  write("tokenizer_config.json",
        json{{"model_max_length", 1e30},
             {"added_tokens_decoder",
              {{"0", {{"content", "<|startoftext|>"}, {"normalized", false}, {"special", true}}},
               {"1", {{"content", "<|endoftext|>"}, {"normalized", true}, {"special", true}}}}}}
            .dump());
  auto t2 = ClipTokenizer::from_model_dir(dir_.string());
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  EXPECT_EQ((*t2)->model_max_length(), INT_MAX);
  EXPECT_EQ(encode(**t2, "<|ENDOFTEXT|>", kPlain), (Ids{1}));
  EXPECT_EQ(encode(**t2, "hi [MASK]", kPlain), (Ids{6, 1, 1, 1, 1, 1, 1}));  // [MASK] no longer added
}

TEST_F(LoaderTest, MissingFiles) {
  EXPECT_EQ(ClipTokenizer::from_model_dir((dir_ / "absent").string()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ClipTokenizer::from_model_dir(dir_.string()).status().code(), StatusCode::kNotFound);
  const std::string merges = write("merges.txt", "#version: 0.2\n");
  EXPECT_EQ(ClipTokenizer::from_vocab_merges((dir_ / "vocab.json").string(), merges).status().code(),
            StatusCode::kNotFound);
  const std::string vocab = write("vocab.json", json{{"<|startoftext|>", 0}, {"<|endoftext|>", 1}}.dump());
  EXPECT_EQ(ClipTokenizer::from_vocab_merges(vocab, (dir_ / "nope.txt").string()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ClipTokenizer::from_tokenizer_json((dir_ / "tokenizer.json").string()).status().code(),
            StatusCode::kNotFound);
}

TEST_F(LoaderTest, CorruptVocabAndMerges) {
  const auto code = [&](const std::string& vocab_text, const std::string& merges_text) {
    return ClipTokenizer::from_vocab_merges(write("v.json", vocab_text), write("m.txt", merges_text)).status();
  };
  const std::string good_vocab =
      json{{"<|startoftext|>", 0}, {"<|endoftext|>", 1}, {"a", 2}, {"b</w>", 3}, {"ab</w>", 4}}.dump();
  EXPECT_TRUE(code(good_vocab, "#version: 0.2\na b</w>\n").ok());
  EXPECT_EQ(code("{\"a\": 1,", "").code(), StatusCode::kInvalidArgument);
  const Status not_int = code(R"({"<|startoftext|>": 0, "<|endoftext|>": 1, "a": "x"})", "");
  EXPECT_EQ(not_int.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_int.message().find("\"a\""), std::string::npos);
  const Status unknown = code(good_vocab, "#version: 0.2\nq b</w>\n");
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("merge 1"), std::string::npos);
  EXPECT_NE(unknown.message().find("\"q\""), std::string::npos);
  const Status bad_line = code(good_vocab, "#version: 0.2\na b</w> c\n");
  EXPECT_EQ(bad_line.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_line.message().find("line 2"), std::string::npos);
  EXPECT_EQ(code(good_vocab, "#version: 0.2\n\xFF \xFE\n").code(), StatusCode::kInvalidArgument);
  const Status no_bos = code(json{{"<|endoftext|>", 0}}.dump(), "");
  EXPECT_EQ(no_bos.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_bos.message().find("<|startoftext|>"), std::string::npos);
}

TEST_F(LoaderTest, SpecialTokenNamedInConfigMustExist) {
  write("vocab.json", json{{"<|startoftext|>", 0}, {"<|endoftext|>", 1}}.dump());
  write("merges.txt", "#version: 0.2\n");
  write("tokenizer_config.json", json{{"bos_token", "<|bos|>"}}.dump());
  const Status s = ClipTokenizer::from_model_dir(dir_.string()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("<|bos|>"), std::string::npos);
  EXPECT_NE(s.message().find("bos_token"), std::string::npos);
  write("tokenizer_config.json", "{ not json");
  EXPECT_EQ(ClipTokenizer::from_model_dir(dir_.string()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LoaderTest, CorruptTokenizerJson) {
  const auto load = [&](const std::string& text) {
    return ClipTokenizer::from_tokenizer_json(write("tokenizer.json", text)).status();
  };
  EXPECT_EQ(load("{\"model\": ").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("[]").code(), StatusCode::kInvalidArgument);
  json j = small_tokenizer_json();
  j["model"]["merges"] = {"h zz"};
  const Status bad_merge = load(j.dump());
  EXPECT_EQ(bad_merge.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_merge.message().find("\"zz\""), std::string::npos);
  j = small_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  EXPECT_EQ(load(j.dump()).code(), StatusCode::kUnimplemented);
  j = small_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_EQ(load(j.dump()).code(), StatusCode::kUnimplemented);
  j = small_tokenizer_json();
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "(unclosed"}};
  EXPECT_EQ(load(j.dump()).code(), StatusCode::kInvalidArgument);
  j = small_tokenizer_json();
  j["model"].erase("vocab");
  EXPECT_EQ(load(j.dump()).code(), StatusCode::kInvalidArgument);
  j = small_tokenizer_json();
  j["added_tokens"][0].erase("id");
  EXPECT_EQ(load(j.dump()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::text
