// HfTokenizer on small hand-made tokenizer.json fixtures (tests/fixtures/hf_tokenizers, written by
// tools/reference/make_hf_tokenizer_fixtures.py) against HF's goldens, plus the refusals: malformed JSON types,
// unknown component types (named), ids out of range. The real Llama 3.1 / Mistral tokenizers are in
// hf_tokenizer_real_test.cpp.
#include "frontends/text/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/json_config.h"
#include "hf_golden_support.h"
#include "test_paths.h"

namespace mmserve::text {
namespace {

using nlohmann::json;
using testing_hf::check_config_variants;
using testing_hf::check_goldens;
using testing_hf::load_golden;
using testing_hf::or_error;

const std::string kFixtures = MMSERVE_FIXTURES_DIR + "/hf_tokenizers/";

class HfFixtureGoldens : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixtureGoldens, MatchHf) {
  const std::string name = GetParam();
  const std::string dir = kFixtures + name;
  auto auto_tok = HfTokenizer::from_model_dir(dir);
  ASSERT_TRUE(auto_tok.ok()) << auto_tok.status().to_string();
  auto raw = HfTokenizer::from_tokenizer_json(dir + "/tokenizer.json");
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  const json golden = load_golden(name);
  ASSERT_TRUE(golden.is_object());
  const auto n = check_goldens(golden, **auto_tok, **raw);
  EXPECT_GT(n.entries, 100);
  EXPECT_GT(n.streams, 50);
  EXPECT_GT(n.decodes, 40);
  auto tokenizer_json = read_json_file(dir + "/tokenizer.json");
  auto config_json = read_json_file(dir + "/tokenizer_config.json");
  ASSERT_TRUE(tokenizer_json.ok() && config_json.ok());
  check_config_variants(golden, *tokenizer_json, *config_json);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixtureGoldens,
                         ::testing::Values("sp_metaspace", "metaspace_legacy", "subword_prefix", "byte_level_split"));

// A minimal valid tokenizer.json to break one key at a time.
json small() {
  return json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null,
    "decoder": {"type": "Fuse"},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3}, "merges": ["a b"]}
  })");
}

Status load(const json& j) {
  return HfTokenizer::from_json(j, json(), "t.json").status();
}

TEST(HfTokenizer, SmallEncodesAndDecodes) {
  auto t = HfTokenizer::from_json(small(), json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(or_error((*t)->encode("ab a<s>b")), (std::vector<int32_t>{3, 1, 0, 2}));
  EXPECT_EQ(or_error((*t)->decode({3, 1, 0, 2})), "aba<s>b");
  EXPECT_EQ(or_error((*t)->decode({3, 1, 0, 2}, true)), "abab");
  EXPECT_EQ((*t)->vocab_size(), 4);
  EXPECT_TRUE((*t)->is_special(0));
  EXPECT_FALSE((*t)->is_special(3));
}

TEST(HfTokenizer, RefusesMalformedAndUnknown) {
  const auto expect = [](json j, StatusCode code, const std::string& needle) {
    const Status s = load(j);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  json j = small();
  j["normalizer"] = {{"type", "Precompiled"}};
  expect(j, StatusCode::kUnimplemented, "\"Precompiled\"");
  j = small();
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  expect(j, StatusCode::kUnimplemented, "\"UnicodeScripts\"");
  j = small();
  j["decoder"] = {{"type", "CTC"}};
  expect(j, StatusCode::kUnimplemented, "\"CTC\"");
  j = small();
  j["post_processor"] = {{"type", "Nope"}};
  expect(j, StatusCode::kUnimplemented, "\"Nope\"");
  j = small();
  j["model"]["type"] = "Unigram";
  expect(j, StatusCode::kUnimplemented, "Unigram");
  j = small();
  j["model"]["byte_fallback"] = "yes";
  expect(j, StatusCode::kInvalidArgument, "byte_fallback");
  j = small();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", 5}};
  expect(j, StatusCode::kInvalidArgument, "replacement");
  j = small();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  expect(j, StatusCode::kInvalidArgument, "one character");
  j = small();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
  expect(j, StatusCode::kInvalidArgument, "prepend_scheme");
  j = small();
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", 1}};
  expect(j, StatusCode::kInvalidArgument, "individual_digits");
  j = small();
  j["normalizer"] = {{"type", "Strip"}, {"strip_left", "x"}};
  expect(j, StatusCode::kInvalidArgument, "strip_left");
  j = small();
  j["normalizer"] = {{"type", "Prepend"}};
  expect(j, StatusCode::kInvalidArgument, "prepend");
  j = small();
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}};
  expect(j, StatusCode::kInvalidArgument, "start");
  j = small();
  j["decoder"] = {{"type", "Replace"}, {"pattern", {{"Regex", "(unclosed"}}}, {"content", ""}};
  expect(j, StatusCode::kInvalidArgument, "does not compile");
  j = small();
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}}]})");
  expect(j, StatusCode::kInvalidArgument, "<x>");
  j = small();
  j["post_processor"] =
      json::parse(R"({"type": "TemplateProcessing", "single": "<s> $A", "special_tokens": {"<s>": {"ids": [99]}}})");
  expect(j, StatusCode::kInvalidArgument, "99");
  j = small();
  j["added_tokens"][0]["id"] = -3;
  expect(j, StatusCode::kInvalidArgument, "id");
  j = small();
  j["model"]["merges"] = {"a z"};
  expect(j, StatusCode::kInvalidArgument, "\"z\"");
  expect(json::array(), StatusCode::kInvalidArgument, "object");
  j = small();
  j.erase("model");
  expect(j, StatusCode::kInvalidArgument, "model");
  EXPECT_EQ(HfTokenizer::from_model_dir("/nonexistent").status().code(), StatusCode::kNotFound);
}

TEST(HfTokenizer, IdsOutOfRangeAreErrors) {
  auto t = HfTokenizer::from_json(small(), json(), "t.json");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->decode({1, 4}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->decode({-1}).status().code(), StatusCode::kInvalidArgument);
  IncrementalDetokenizer d(**t, false);
  EXPECT_EQ(d.step(1000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(or_error(d.step(1)), "a");  // a bad id leaves the stream usable
  EXPECT_EQ((*t)->encode("\xC3").status().code(), StatusCode::kInvalidArgument);
}

TEST(HfTokenizer, TemplateStringFormAndBertRoberta) {
  json j = small();
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": "<s> $A:0 <s>:0",
      "pair": ["<s>", "$A", "$B:1", "<s>:1"], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}})");
  auto t = HfTokenizer::from_json(j, json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(or_error((*t)->encode("ab")), (std::vector<int32_t>{0, 3, 0}));
  EXPECT_EQ(or_error((*t)->encode_pair("a", "b")), (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(or_error((*t)->encode_pair("a", "b", false)), (std::vector<int32_t>{1, 2}));
  j["post_processor"] = json::parse(R"({"type": "RobertaProcessing", "sep": ["b", 2], "cls": ["a", 1]})");
  t = HfTokenizer::from_json(j, json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(or_error((*t)->encode_pair("ab", "ab")), (std::vector<int32_t>{1, 3, 2, 2, 3, 2}));
}

TEST(HfTokenizer, DecoderQuirks) {
  json j = small();
  j["model"]["vocab"] = {{"<s>", 0}, {"<0xE2>", 1}, {"<0x82>", 2}, {"<0xAC>", 3}, {"__x_", 4}, {"<0x+A>", 5}};
  j["model"]["merges"] = json::array();
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"},
      {"type": "Strip", "content": "_", "start": 5, "stop": 1}]})");
  auto t = HfTokenizer::from_json(j, json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(or_error((*t)->decode({1, 2, 3})), "\u20ac");     // one valid run: its text
  EXPECT_EQ(or_error((*t)->decode({1, 2})), "\uFFFD\uFFFD");  // invalid: one U+FFFD per byte token
  EXPECT_EQ(or_error((*t)->decode({4})), "x");                // Strip: 2 leading, 1 trailing
  EXPECT_EQ(or_error((*t)->decode({5})), "\n");               // Rust's from_str_radix takes "+A"
}

// The incremental detokenizer never emits a string ending in a partial character, and its pieces add up to
// the full decode, for every way of cutting a byte-fallback emoji.
TEST(HfTokenizer, IncrementalHoldsPartialUtf8) {
  json j = small();
  j["model"]["vocab"] = {{"<s>", 0}, {"<0xF0>", 1}, {"<0x9F>", 2}, {"<0x98>", 3}, {"<0x80>", 4}, {"a", 5}};
  j["model"]["merges"] = json::array();
  j["model"]["byte_fallback"] = true;
  j["pre_tokenizer"] = nullptr;
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]})");
  auto t = HfTokenizer::from_json(j, json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<int32_t> ids = or_error((*t)->encode("a\U0001F600a"));
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 1, 2, 3, 4, 5}));
  IncrementalDetokenizer d(**t, false);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(or_error(d.step(id)));
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "", "", "\U0001F600", "a"}));
  IncrementalDetokenizer cut(**t, false);
  EXPECT_EQ(or_error(cut.step(1)), "");
  EXPECT_EQ(or_error(cut.step(2)), "");
  EXPECT_EQ(or_error(cut.finish()), "\uFFFD\uFFFD");  // the stream ended inside the character
}

// Components no golden reaches, against expectations worked out by hand from tokenizers' source: Digits without
// individual_digits (runs stay whole), CharDelimiterSplit, BPEDecoder, BertProcessing, NFKC.
TEST(HfTokenizer, ComponentsWithoutGoldens) {
  json j = small();
  j["model"]["vocab"] = {{"<s>", 0}, {"1", 1}, {"2", 2}, {"12", 3}, {"x", 4}, {"x</w>", 5}, {"fi", 6}, {"f", 7}, {"i", 8}};
  j["model"]["merges"] = {"1 2", "f i"};
  j["normalizer"] = {{"type", "NFKC"}};
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "CharDelimiterSplit", "delimiter": "-"}, {"type": "Digits", "individual_digits": false}]})");
  j["decoder"] = json::parse(R"({"type": "BPEDecoder", "suffix": "</w>"})");
  j["post_processor"] = json::parse(R"({"type": "BertProcessing", "sep": ["<s>", 0], "cls": ["x", 4]})");
  auto t = HfTokenizer::from_json(j, json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(or_error((*t)->encode("x12-12x", false)), (std::vector<int32_t>{4, 3, 3, 4}));
  EXPECT_EQ(or_error((*t)->encode("\uFB01", false)), (std::vector<int32_t>{6}));  // NFKC: the ligature is "fi"
  EXPECT_EQ(or_error((*t)->encode("12")), (std::vector<int32_t>{4, 3, 0}));
  EXPECT_EQ(or_error((*t)->encode_pair("1", "2")), (std::vector<int32_t>{4, 1, 0, 2, 0}));
  EXPECT_EQ(or_error((*t)->decode({5, 3, 5})), "x 12x");  // the suffix is a space, except on the last token
}

// A byte run that turns invalid after part of it was emitted: ByteFallback then gives U+FFFD for the whole run,
// which does not extend the emitted text. Strict (DecodeStream's way): FailedPrecondition; resync: go on.
TEST(HfTokenizer, IncrementalDivergence) {
  json j = small();
  j["model"]["vocab"] = {{"<s>", 0}, {"<0x1E>", 1}, {"<0xE5>", 2}, {"a", 3}};
  j["model"]["merges"] = json::array();
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]})");
  auto t = HfTokenizer::from_json(j, json(), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(or_error((*t)->decode({1, 2, 3})), "\uFFFD\uFFFDa");
  IncrementalDetokenizer strict(**t, false);
  EXPECT_EQ(or_error(strict.step(1)), "\x1E");
  EXPECT_EQ(or_error(strict.step(2)), "");
  EXPECT_EQ(strict.step(3).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(strict.finish().status().code(), StatusCode::kFailedPrecondition);
  IncrementalDetokenizer resync(**t, false, IncrementalDetokenizer::Divergence::kResync);
  EXPECT_EQ(or_error(resync.step(1)), "\x1E");
  EXPECT_EQ(or_error(resync.step(2)), "");
  EXPECT_EQ(or_error(resync.step(3)), "\uFFFD\uFFFDa");
  EXPECT_EQ(or_error(resync.step(3)), "a");
  EXPECT_EQ(or_error(resync.finish()), "");
}

}  // namespace
}  // namespace mmserve::text
