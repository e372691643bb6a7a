// Conformance of ClipTokenizer with HF transformers' CLIPTokenizer on the golden corpus
// tests/fixtures/clip_tokens.json (made by tools/reference/make_clip_fixtures.py; 200+ strings: Unicode, CJK,
// emoji, odd whitespace, long text, special-token text), for each case checking exactly
//   ids            = tok(text)                                   -> encode(text, {specials, no truncation})
//   ids_truncated  = tok(text, truncation=True, max_length=77)   -> encode(text, {specials, max_length 77})
//   ids_no_special = tok(text, add_special_tokens=False)         -> encode(text, {no specials, no truncation})
// with three loaders: HF's saved directory (from_model_dir, and from_tokenizer_json on its tokenizer.json) and
// the vocab.json + merges.txt the goldens were built from (assets/clip_tokenizer). Every mismatch is printed
// with its text and both id lists.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontends/text/clip_tokenizer.h"
#include "test_paths.h"

namespace mmserve::text {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const json& goldens() {
  static const json g = [] {
    std::ifstream in(MMSERVE_FIXTURES_DIR + "/clip_tokens.json", std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  }();
  return g;
}

std::string format(const Ids& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Encodes every golden case three ways and counts the cases (and lists) that differ.
void check_all(const ClipTokenizer& tokenizer, const std::string& loader) {
  const json& g = goldens();
  ASSERT_TRUE(g.is_object() && g.contains("cases") && g["cases"].is_array()) << "bad clip_tokens.json";
  const json& cases = g["cases"];
  ASSERT_GE(cases.size(), 200u);
  const struct {
    const char* key;
    EncodeOptions options;
  } kinds[] = {{"ids", {.add_special_tokens = true, .max_length = 0}},
               {"ids_truncated", {.add_special_tokens = true, .max_length = 77}},
               {"ids_no_special", {.add_special_tokens = false, .max_length = 0}}};
  int mismatched_cases = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string text = c["text"].get<std::string>();
    bool case_ok = true;
    for (const auto& kind : kinds) {
      const Ids expected = c[kind.key].get<Ids>();
      const auto got = tokenizer.encode(text, kind.options);
      if (got.ok() && *got == expected) continue;
      case_ok = false;
      ADD_FAILURE() << loader << " case " << i << " " << kind.key << "\n  text: " << json(text).dump()
                    << "\n  HF:   " << format(expected)
                    << "\n  ours: " << (got.ok() ? format(*got) : got.status().to_string());
    }
    if (!case_ok) ++mismatched_cases;
  }
  EXPECT_EQ(mismatched_cases, 0) << loader << ": " << mismatched_cases << " of " << cases.size() << " cases differ";
}

TEST(ClipTokenizerConformanceTest, HfSavedDirectory) {
  const std::string dir = MMSERVE_FIXTURES_DIR + "/" + goldens().value("tokenizer_dir", "clip_tokenizer_hf");
  auto tokenizer = ClipTokenizer::from_model_dir(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  EXPECT_EQ((*tokenizer)->model_max_length(), 77);
  check_all(**tokenizer, "from_model_dir(" + dir + ")");
}

TEST(ClipTokenizerConformanceTest, HfTokenizerJson) {
  const std::string path =
      MMSERVE_FIXTURES_DIR + "/" + goldens().value("tokenizer_dir", "clip_tokenizer_hf") + "/tokenizer.json";
  auto tokenizer = ClipTokenizer::from_tokenizer_json(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  check_all(**tokenizer, "from_tokenizer_json(" + path + ")");
}

TEST(ClipTokenizerConformanceTest, VocabAndMerges) {
  auto tokenizer = ClipTokenizer::from_model_dir(MMSERVE_SOURCE_DIR + "/assets/clip_tokenizer");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  check_all(**tokenizer, "from_model_dir(assets/clip_tokenizer)");
}

}  // namespace
}  // namespace mmserve::text
