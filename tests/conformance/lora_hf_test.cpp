// PEFT LoRA adapters against PEFT itself (issue 16): tests/fixtures/lora/* (tools/reference/make_lora_fixtures.py:
// adapters on q/v, on every linear with rsLoRA, and with a regex target_modules plus rank_pattern / alpha_pattern,
// over the tiny HF Llama fixture; one on the tiny Mixtral's attention and one on its experts, through
// target_parameters, skipped until generated; saved by PEFT's save_pretrained). Each adapter as PEFT wrote it, through
// load_lora_adapter and LlamaModel's step: the prompt's logits and the cached decode's step logits within 1e-4 of
// PEFT's (f32), the greedy ids exact, the per-module scales as PEFT's LoraLayer.scaling; and one step mixing the three
// adapters and the base model gives each sequence its own answer (its last prompt row as PEFT's). LLaVA's decoder under
// an adapter: tests/e2e/cli_test.cpp (the image path runs through the CLI there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden.h"
#include "models/common/decoder_step.h"
#include "models/llama/llama.h"
#include "models/lora/lora_adapter.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kVariants[] = {"llama-qv-r4", "llama-all-r8-rslora", "llama-patterns-regex"};

struct Decoded {
  std::vector<float> prompt_logits, step_logits;  // [P, V], [N, V]
  std::vector<int64_t> greedy;
};

// One sequence through forward_step: the prompt as one chunk (every row's logits), then greedy steps of one token
// over the cache, under `adapter` (or none).
Decoded decode(const LlamaModel& model, const std::vector<int32_t>& prompt, int64_t new_tokens,
               const LoraAdapter* adapter, const LoraAdapter* second = nullptr, std::vector<float> weights = {}) {
  const int64_t vocab = model.config().vocab_size, block = 64;
  auto pool = model.new_pool(1, block);
  EXPECT_TRUE(pool.ok());
  Decoded out;
  std::vector<int32_t> tokens = prompt;
  int64_t done = 0;
  while (static_cast<int64_t>(out.greedy.size()) < new_tokens) {
    DecoderStep step;
    for (int64_t p = done; p < static_cast<int64_t>(tokens.size()); ++p) {
      step.logit_rows.push_back(static_cast<int32_t>(step.tokens.size()));
      step.tokens.push_back(tokens[p]);
      step.positions.push_back(static_cast<int32_t>(p));
      step.slots.push_back(static_cast<int32_t>(p));
    }
    step.query_start = {0, static_cast<int32_t>(step.tokens.size())};
    step.seq_lens = {static_cast<int32_t>(tokens.size())};
    step.block_tables = {0};
    step.table_ld = 1;
    step.max_seq_len = static_cast<int64_t>(tokens.size());
    step.max_query_len = step.num_tokens();
    step.loras = {adapter};
    if (second != nullptr) step.loras_second = {second}, step.lora_weights = weights;
    std::vector<float> logits(step.logit_rows.size() * static_cast<size_t>(vocab));
    const Status st = model.forward_step(step, *pool, logits.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return out;
    if (done == 0) out.prompt_logits = logits;
    const float* last = logits.data() + (step.logit_rows.size() - 1) * vocab;
    out.step_logits.insert(out.step_logits.end(), last, last + vocab);
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    out.greedy.push_back(next);
    done = static_cast<int64_t>(tokens.size());
    tokens.push_back(next);
  }
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

std::unique_ptr<LlamaModel> base_model() {
  auto model = LlamaModel::load(testing::fixture("llama/llama-gqa-f32"));
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(*model) : nullptr;
}

// The decode of golden.json's prompt under `adapter` as PEFT's: the prompt's and the steps' logits within 1e-4, the
// greedy ids exact, and the base model's ids other (the adapter matters).
void expect_goldens(const LlamaModel& model, const json& meta, const testing::Golden& golden,
                    const LoraAdapter& adapter, const char* name) {
  const std::vector<int32_t> prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int64_t> want = golden.i64("greedy_ids");
  const Decoded got = decode(model, prompt, static_cast<int64_t>(want.size()), &adapter);
  const float prompt_diff = max_abs_diff(got.prompt_logits, golden.f32("prompt_logits"));
  const float step_diff = max_abs_diff(got.step_logits, golden.f32("step_logits"));
  std::printf("%s: prompt logits %.2e, step logits %.2e from PEFT's\n", name, prompt_diff, step_diff);
  EXPECT_LE(prompt_diff, 1e-4f);
  EXPECT_LE(step_diff, 1e-4f);
  EXPECT_EQ(got.greedy, want);
  EXPECT_EQ(meta["greedy_ids"].get<std::vector<int64_t>>(), want);
  EXPECT_NE(meta["base_greedy_ids"].get<std::vector<int64_t>>(), want);
}

// One fixture adapter over `model` (its base): the scales as PEFT's, every module PEFT adapted present, and the
// decode as PEFT's.
void expect_decodes_as_peft(const LlamaModel& model, const char* name) {
  SCOPED_TRACE(name);
  const std::string dir = testing::fixture(std::string("lora/") + name);
  const json meta = json::parse(std::ifstream(dir + "/golden.json"));
  testing::Golden golden(dir + "/golden.safetensors");
  auto adapter = load_lora_adapter(dir, name, model.config());
  ASSERT_TRUE(adapter.ok()) << adapter.status().to_string();
  // The scale of every module is PEFT's LoraLayer.scaling; nothing PEFT adapted is missing.
  int64_t modules = 0;
  for (const auto& [module, scale] : meta["lora"]["scaling"].items()) {
    const int64_t layer = std::stoll(module.substr(std::string("model.layers.").size()));
    const std::string leaf = module.substr(module.rfind('.') + 1);
    const LoraModule* m = nullptr;
    for (int t = 0; t < kLoraTargets; ++t) {
      if (leaf == lora_target_name(static_cast<LoraTarget>(t))) m = &(*adapter)->module(layer, static_cast<LoraTarget>(t));
    }
    ASSERT_NE(m, nullptr) << module;
    EXPECT_EQ(m->rank, meta["lora"]["ranks"][module].get<int64_t>()) << module;
    EXPECT_NEAR(m->scale, scale.get<double>(), 1e-6) << module;
    ++modules;
  }
  int64_t present = 0;
  for (const auto& layer : (*adapter)->layers) {
    for (const LoraModule& m : layer) present += m.present();
  }
  EXPECT_EQ(present, modules);
  expect_goldens(model, meta, golden, **adapter, name);
}

TEST(LoraHf, EachAdapterDecodesAsPeft) {
  std::unique_ptr<LlamaModel> model = base_model();
  ASSERT_NE(model, nullptr);
  for (const char* name : kVariants) expect_decodes_as_peft(*model, name);
}

// Mixtral's attention under an adapter (tools/reference/make_lora_fixtures.py mixtral-attn-r4, over the tiny HF
// Mixtral of tests/fixtures/mixtral): the routed experts see the adapted attention's output, so the routing and the
// text follow PEFT's.
TEST(LoraHf, AnAdapterOnMixtralsAttentionDecodesAsPeft) {
  auto model = LlamaModel::load(testing::fixture("mixtral/mixtral-5x-top2-f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  expect_decodes_as_peft(**model, "mixtral-attn-r4");
}

// Mixtral's experts under an adapter (make_lora_fixtures.py's PARAM_VARIANTS mixtral-experts-r4: PEFT's
// target_parameters over transformers 5's fused experts, every expert of both layers, r 4, alpha 8): every expert of
// each layer adapted for both parameters with PEFT's ParamWrapper scaling, and the decode as PEFT's.
TEST(LoraHf, AnAdapterOnMixtralsExpertsDecodesAsPeft) {
  const std::string dir = testing::fixture("lora/mixtral-experts-r4");
  if (!fs::exists(dir)) {
    GTEST_SKIP() << "tests/fixtures/lora/mixtral-experts-r4 not generated yet (tools/reference/make_lora_fixtures.py "
                    "--only mixtral-experts-r4 on the GPU host)";
  }
  auto model = LlamaModel::load(testing::fixture("mixtral/mixtral-5x-top2-f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const LlamaConfig& c = (*model)->config();
  const json meta = json::parse(std::ifstream(dir + "/golden.json"));
  testing::Golden golden(dir + "/golden.safetensors");
  auto adapter = load_lora_adapter(dir, "mixtral-experts-r4", c);
  ASSERT_TRUE(adapter.ok()) << adapter.status().to_string();
  EXPECT_EQ((*adapter)->target_names(), (std::vector<std::string>{"experts.gate_up_proj", "experts.down_proj"}));
  const double scaling = meta["lora"]["scaling"].get<double>();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const LoraExpertParam p : {LoraExpertParam::kGateUp, LoraExpertParam::kDown}) {
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const LoraModule* m = (*adapter)->expert_module(l, p, e);
        ASSERT_NE(m, nullptr) << l << " " << lora_expert_param_name(p) << " " << e;
        EXPECT_EQ(m->rank, meta["lora"]["r"].get<int64_t>());
        EXPECT_NEAR(m->scale, scaling, 1e-6);
      }
    }
  }
  expect_goldens(**model, meta, golden, **adapter, "mixtral-experts-r4");
}

TEST(LoraHf, OneStepOfEveryAdapterAndNoneIsEachAlone) {
  std::unique_ptr<LlamaModel> model = base_model();
  ASSERT_NE(model, nullptr);
  const int64_t vocab = model->config().vocab_size, block = 64;
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  std::vector<std::vector<float>> want_last;
  std::vector<int32_t> prompt;
  for (const char* name : kVariants) {
    const std::string dir = testing::fixture(std::string("lora/") + name);
    auto adapter = load_lora_adapter(dir, name, model->config());
    ASSERT_TRUE(adapter.ok()) << adapter.status().to_string();
    adapters.push_back(*adapter);
    const json meta = json::parse(std::ifstream(dir + "/golden.json"));
    prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<float> logits = testing::Golden(dir + "/golden.safetensors").f32("prompt_logits");
    want_last.emplace_back(logits.end() - vocab, logits.end());
  }
  const testing::Golden base(testing::fixture("llama/llama-gqa-f32/golden.safetensors"));
  const std::vector<float> base_logits = base.f32("prompt_logits");
  want_last.emplace_back(base_logits.end() - vocab, base_logits.end());
  // Four sequences of the same prompt: the three adapters and the base, each in its own block.
  const int64_t seqs = 4, p = static_cast<int64_t>(prompt.size());
  auto pool = model->new_pool(seqs, block);
  ASSERT_TRUE(pool.ok());
  DecoderStep step;
  step.table_ld = 1;
  step.query_start.push_back(0);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t i = 0; i < p; ++i) {
      step.tokens.push_back(prompt[i]);
      step.positions.push_back(static_cast<int32_t>(i));
      step.slots.push_back(static_cast<int32_t>(s * block + i));
    }
    step.query_start.push_back(static_cast<int32_t>(step.tokens.size()));
    step.seq_lens.push_back(static_cast<int32_t>(p));
    step.block_tables.push_back(static_cast<int32_t>(s));
    step.logit_rows.push_back(static_cast<int32_t>(step.tokens.size() - 1));
    step.loras.push_back(s < 3 ? adapters[s].get() : nullptr);
  }
  step.max_seq_len = step.max_query_len = p;
  std::vector<float> logits(static_cast<size_t>(seqs * vocab));
  ASSERT_TRUE(model->forward_step(step, *pool, logits.data()).ok());
  for (int64_t s = 0; s < seqs; ++s) {
    const std::vector<float> got(logits.begin() + s * vocab, logits.begin() + (s + 1) * vocab);
    EXPECT_LE(max_abs_diff(got, want_last[s]), 1e-4f) << "sequence " << s;
  }
}

// Gate routing's two adapters at once (tests/fixtures/lora_gate, tools/reference/make_gate_fixtures.py): PEFT's
// add_weighted_adapter(combination_type="cat") with the router's weights, checked there to be w1 * delta1 +
// w2 * delta2 of every module, against our step with loras_second and lora_weights.
TEST(LoraHf, TwoAdaptersWithTheRoutersWeightsArePeftsWeightedCombination) {
  std::unique_ptr<LlamaModel> model = base_model();
  ASSERT_NE(model, nullptr);
  const std::string dir = testing::fixture("lora_gate");
  const json meta = json::parse(std::ifstream(dir + "/golden.json"));
  testing::Golden golden(dir + "/golden.safetensors");
  const json& mix = meta["mix"];
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  for (const auto& name : mix["adapters"]) {
    auto a = load_lora_adapter(testing::fixture("lora/" + name.get<std::string>()), name, model->config());
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    adapters.push_back(*a);
  }
  const std::vector<int32_t> prompt = meta["prompts"][mix["prompt"].get<size_t>()].get<std::vector<int32_t>>();
  const std::vector<int64_t> want = golden.i64("mix_greedy_ids");
  const Decoded got = decode(*model, prompt, static_cast<int64_t>(want.size()), adapters[0].get(), adapters[1].get(),
                             mix["weights"].get<std::vector<float>>());
  const float prompt_diff = max_abs_diff(got.prompt_logits, golden.f32("mix_prompt_logits"));
  const float step_diff = max_abs_diff(got.step_logits, golden.f32("mix_step_logits"));
  std::printf("gate mix: prompt logits %.2e, step logits %.2e from PEFT's\n", prompt_diff, step_diff);
  EXPECT_LE(prompt_diff, 1e-4f);
  EXPECT_LE(step_diff, 1e-4f);
  EXPECT_EQ(got.greedy, want);
}

}  // namespace
}  // namespace mmserve::models
