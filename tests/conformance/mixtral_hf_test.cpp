// Mixtral (LlamaModel with a sparse MoE MLP) against HF transformers on tiny random MixtralForCausalLM models
// (tests/fixtures/mixtral, made by tools/reference/make_mixtral_fixtures.py on the GPU host): 5 experts with top-2
// (an odd count), 7 experts with top-3, multi-query attention with a sliding window, F32 and BF16 storage. For each:
// the prompt's logits (1e-4 of the row's largest |logit|), the cached greedy steps' logits and ids, and the
// router's decisions of every token fed and every layer: the chosen experts exactly, in HF's order, and their
// renormalised weights within 1e-5.
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

using testing::worst_relative_error;

TEST(MixtralHf, LogitsGreedyIdsAndRoutingMatchTransformers) {
  const fs::path root = testing::fixture("mixtral");
  ASSERT_TRUE(fs::is_directory(root)) << root << ": run tools/reference/make_mixtral_fixtures.py";
  int variants = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "golden.json")) continue;
    SCOPED_TRACE(entry.path().filename().string());
    const nlohmann::json meta = nlohmann::json::parse(std::ifstream(entry.path() / "golden.json"));
    testing::Golden golden((entry.path() / "golden.safetensors").string());
    auto model = LlamaModel::load(entry.path().string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const LlamaConfig& c = (*model)->config();
    ASSERT_GT(c.num_experts, 0);
    const int64_t vocab = c.vocab_size, k = c.experts_per_token, layers = c.num_hidden_layers;
    const std::vector<int32_t> prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int64_t> want_ids = golden.i64("greedy_ids"), want_topk = golden.i64("router_topk");
    const std::vector<float> prompt_logits = golden.f32("prompt_logits"), step_logits = golden.f32("step_logits"),
                             want_weights = golden.f32("router_weights");
    const int64_t p = static_cast<int64_t>(prompt.size()), steps = static_cast<int64_t>(want_ids.size());
    const int64_t fed = p + steps - 1;  // the prompt, then every greedy token but the last
    ASSERT_EQ(static_cast<int64_t>(want_topk.size()), layers * fed * k);

    auto cache = (*model)->new_cache(p + steps);
    ASSERT_TRUE(cache.ok());
    std::vector<float> all(static_cast<size_t>(p * vocab)), last(static_cast<size_t>(vocab));
    MoeRoutingTrace trace;
    LlamaForwardExtras traced;
    traced.routing = &trace;
    std::vector<int32_t> got_topk(static_cast<size_t>(layers * fed * k));
    std::vector<float> got_weights(got_topk.size());
    // trace [layers, n, k] of a call feeding tokens [first, first + n) -> [layers, fed, k]
    auto keep = [&](int64_t first) {
      ASSERT_EQ(trace.layers, layers);
      for (int64_t l = 0; l < layers; ++l) {
        for (int64_t t = 0; t < trace.tokens; ++t) {
          for (int64_t j = 0; j < k; ++j) {
            got_topk[(l * fed + first + t) * k + j] = trace.experts[(l * trace.tokens + t) * k + j];
            got_weights[(l * fed + first + t) * k + j] = trace.weights[(l * trace.tokens + t) * k + j];
          }
        }
      }
    };
    ASSERT_TRUE((*model)->forward(prompt.data(), p, *cache, last.data(), all.data(), traced).ok());
    keep(0);
    EXPECT_LE(worst_relative_error(all.data(), prompt_logits.data(), p, vocab), 1e-4f) << "prompt logits";
    float worst = 0;
    std::vector<int64_t> ids;
    for (int64_t s = 0; s < steps; ++s) {
      worst = std::max(worst, worst_relative_error(last.data(), step_logits.data() + s * vocab, 1, vocab));
      const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      ids.push_back(next);
      if (s + 1 < steps) {
        ASSERT_TRUE((*model)->forward(&next, 1, *cache, last.data(), nullptr, traced).ok());
        keep(p + s);
      }
    }
    EXPECT_LE(worst, 1e-4f) << "step logits";
    EXPECT_EQ(ids, want_ids);
    EXPECT_EQ(std::vector<int64_t>(got_topk.begin(), got_topk.end()), want_topk);
    float worst_weight = 0;
    for (size_t i = 0; i < got_weights.size(); ++i) {
      worst_weight = std::max(worst_weight, std::fabs(got_weights[i] - want_weights[i]));
    }
    EXPECT_LE(worst_weight, 1e-5f) << "router weights";
    ++variants;
  }
  EXPECT_GE(variants, 2);
}

TEST(MixtralHf, BadExpertSettingsAreRefusedNamingTheKey) {
  nlohmann::json cfg = {{"architectures", {"MixtralForCausalLM"}},
                        {"hidden_size", 64},
                        {"num_attention_heads", 4},
                        {"num_local_experts", 4},
                        {"num_experts_per_tok", 5}};
  auto c = parse_llama_config(cfg, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_experts_per_tok"), std::string::npos) << c.status().message();
  cfg["num_experts_per_tok"] = 0;
  EXPECT_FALSE(parse_llama_config(cfg, "config.json").ok());
  cfg["num_experts_per_tok"] = 2;
  cfg["num_local_experts"] = 0;
  c = parse_llama_config(cfg, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_local_experts"), std::string::npos);
  cfg["num_local_experts"] = 4;
  c = parse_llama_config(cfg, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_experts, 4);
  EXPECT_EQ(c->experts_per_token, 2);
}

}  // namespace
}  // namespace mmserve::models
