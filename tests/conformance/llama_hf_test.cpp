// LlamaModel against HF transformers on tiny random decoders of every supported variant (tests/fixtures/llama,
// made by tools/reference/make_llama_fixtures.py on the GPU host): Llama with grouped-query and multi-query
// attention and each RoPE scaling (default, llama3 bands, linear, dynamic NTK past the trained length), Mistral's
// sliding window, Qwen2's q/k/v biases, Qwen3's q/k norm with an explicit head_dim, tied and untied embeddings,
// F32 / BF16 / F16 storage, and config.json in transformers 5's keys and 4.x's. For each: the prompt's logits from
// one forward, the logits of every greedy step over the KV cache (both within 1e-4 of the row's largest |logit|,
// f32), and the greedy ids exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../conformance/golden.h"
#include "models/llama/llama.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

void expect_rows_near(const float* got, const std::vector<float>& want, int64_t row, int64_t vocab,
                      const std::string& what) {
  float scale = 0;
  for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(want[row * vocab + v]));
  float worst = 0;
  for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(got[v] - want[row * vocab + v]));
  EXPECT_LE(worst, 1e-4f * std::max(scale, 1.0f)) << what << " row " << row << " (max |logit| " << scale << ")";
}

TEST(LlamaHf, EveryVariantMatchesTransformers) {
  const fs::path root = testing::fixture("llama");
  ASSERT_TRUE(fs::is_directory(root)) << root << ": run tools/reference/make_llama_fixtures.py";
  int variants = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "golden.json")) continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const nlohmann::json meta = nlohmann::json::parse(std::ifstream(entry.path() / "golden.json"));
    testing::Golden golden((entry.path() / "golden.safetensors").string());
    auto model = LlamaModel::load(entry.path().string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const int64_t vocab = (*model)->config().vocab_size;
    const std::vector<int32_t> prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int64_t> want_ids = golden.i64("greedy_ids");
    const std::vector<float> prompt_logits = golden.f32("prompt_logits"), step_logits = golden.f32("step_logits");
    const int64_t p = static_cast<int64_t>(prompt.size()), steps = static_cast<int64_t>(want_ids.size());
    ASSERT_EQ(static_cast<int64_t>(prompt_logits.size()), p * vocab);

    auto cache = (*model)->new_cache(p + steps);
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    std::vector<float> all(static_cast<size_t>(p * vocab)), last(static_cast<size_t>(vocab));
    ASSERT_TRUE((*model)->forward(prompt.data(), p, *cache, last.data(), all.data()).ok());
    for (int64_t r = 0; r < p; ++r) expect_rows_near(all.data() + r * vocab, prompt_logits, r, vocab, "prompt");
    std::vector<int32_t> ids;
    for (int64_t s = 0; s < steps; ++s) {
      expect_rows_near(last.data(), step_logits, s, vocab, "step");
      const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      ids.push_back(next);
      if (s + 1 < steps) ASSERT_TRUE((*model)->forward(&next, 1, *cache, last.data()).ok());
    }
    EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), want_ids);
    // The same ids through greedy().
    auto greedy = (*model)->greedy(prompt, steps, /*ignore_eos=*/true);
    ASSERT_TRUE(greedy.ok());
    EXPECT_EQ(std::vector<int64_t>(greedy->begin(), greedy->end()), want_ids);
    ++variants;
  }
  EXPECT_GE(variants, 7);
}

}  // namespace
}  // namespace mmserve::models
