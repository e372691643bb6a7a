// PEFT LoRA adapters (issue 16): adapter_config.json as PEFT reads it (r / lora_alpha / rsLoRA scales, rank_pattern
// and alpha_pattern matched as get_pattern_key in the file's order, target_modules as a list or a regex,
// exclude_modules) and its refusals naming the field; adapter_model.safetensors read per (layer, linear) with its
// shape, rank and target checks; and the decoder under an adapter: its logits equal the base model with the deltas
// merged into the weights (W + scale B A, a separate checkpoint), and a step mixing sequences with two adapters and
// none equals each sequence alone. PEFT's own outputs are tests/conformance/lora_hf_test.cpp.
#include <gtest/gtest.h>

#include <chrono>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/safetensors.h"
#include "models/common/decoder_step.h"
#include "models/llama/llama.h"
#include "models/lora/lora_adapter.h"
#include "models/lora/peft_config.h"
#include "lora_decoder_check.h"
#include "peft_adapter_writer.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;
using testing::prefill_step;
using testing::run_step;
using testing::write_adapter;

const fs::path kBase = fs::path(MMSERVE_FIXTURES_DIR) / "llama/llama-gqa-f32";

StatusOr<PeftLoraConfig> parse(const std::string& text) { return parse_peft_lora_config(text, "adapter_config.json"); }

// target_modules patterns as Python's re reads them (PCRE2): the fuzzer's `q_pr****...` (on which std::regex
// backtracked for minutes) is refused at parse as Python refuses it ("multiple repeat"); a pattern that compiles but
// backtracks exponentially on a module name is refused at its match in bounded time, naming it; a named group
// (Python's syntax, not ECMAScript's) reads as PEFT's.
TEST(PeftConfig, CostlyPatternsAreRefusedInBoundedTime) {
  auto repeat = parse(R"J({"peft_type": "LORA", "r": 4, "target_modules": ".*\\.(q_pr*****olude_j|o_proj)$"})J");
  ASSERT_FALSE(repeat.ok());
  EXPECT_EQ(repeat.status().code(), StatusCode::kInvalidArgument);
  auto c = parse(R"J({"peft_type": "LORA", "r": 4, "target_modules": "(.*\\.)?((q|q)+)+_proj"})J");
  ASSERT_TRUE(c.ok()) << c.status().to_string();  // it compiles: what costs is matching it
  const auto t0 = std::chrono::steady_clock::now();
  auto t = c->targets("model.layers.0.self_attn_proj." + std::string(30, 'q') + "_prok");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("too long to match"), std::string::npos) << t.status().to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_TRUE(*c->targets("model.layers.0.self_attn.q_proj"));  // the same pattern matches an ordinary name
  auto named = parse(R"J({"peft_type": "LORA", "r": 4, "target_modules": ".*\\.(?P<name>q_proj|v_proj)$"})J");
  ASSERT_TRUE(named.ok()) << named.status().to_string();
  EXPECT_TRUE(*named->targets("model.layers.0.self_attn.v_proj"));
  EXPECT_FALSE(*named->targets("model.layers.0.self_attn.k_proj"));
}

TEST(PeftConfig, ScalesAndPatternsAreLikePefts) {
  auto c = parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
      "rank_pattern": {"layers.1.self_attn.q_proj": 4, "q_proj": 2}, "alpha_pattern": {"v_proj": 3},
      "bias": "none", "modules_to_save": null, "use_dora": false, "lora_dropout": 0.05, "task_type": "CAUSAL_LM"})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // The first key in the file's order whose (.*\.)?(KEY)$ matches wins.
  EXPECT_EQ(*c->rank_for("model.layers.1.self_attn.q_proj"), 4);
  EXPECT_EQ(*c->rank_for("model.layers.0.self_attn.q_proj"), 2);
  EXPECT_EQ(*c->rank_for("model.layers.11.self_attn.q_proj"), 2);  // "layers.1." must not match layers.11
  EXPECT_EQ(*c->rank_for("model.layers.0.self_attn.v_proj"), 8);
  EXPECT_DOUBLE_EQ(*c->scale_for("model.layers.0.self_attn.q_proj"), 16.0 / 2);
  EXPECT_DOUBLE_EQ(*c->scale_for("model.layers.0.self_attn.v_proj"), 3.0 / 8);
  EXPECT_TRUE(*c->targets("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(*c->targets("q_proj"));
  EXPECT_FALSE(*c->targets("model.layers.0.self_attn.xq_proj"));  // a suffix after a dot only
  EXPECT_FALSE(*c->targets("model.layers.0.self_attn.k_proj"));

  auto rs = parse(R"J({"peft_type": "LORA", "r": 16, "lora_alpha": 8, "use_rslora": true,
      "target_modules": ".*\\.(q_proj|down_proj)$", "exclude_modules": ["layers.0.mlp.down_proj"]})J");
  ASSERT_TRUE(rs.ok()) << rs.status().to_string();
  EXPECT_DOUBLE_EQ(*rs->scale_for("model.layers.0.self_attn.q_proj"), 8.0 / 4.0);  // alpha / sqrt(r)
  EXPECT_TRUE(*rs->targets("model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(*rs->targets("model.layers.0.mlp.down_proj"));  // excluded
  EXPECT_FALSE(*rs->targets("model.layers.0.mlp.up_proj"));
}

TEST(PeftConfig, WhatMmserveDoesNotApplyIsRefusedNamingTheField) {
  struct Case {
    const char* json;
    StatusCode code;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "use_dora": true})", StatusCode::kUnimplemented,
       "use_dora"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "modules_to_save": ["lm_head"]})",
       StatusCode::kUnimplemented, "modules_to_save"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "bias": "all"})", StatusCode::kUnimplemented,
       "bias"},
      {R"({"peft_type": "IA3", "target_modules": ["q_proj"]})", StatusCode::kUnimplemented, "IA3"},
      {R"({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]})", StatusCode::kInvalidArgument, "r must"},
      {R"({"peft_type": "LORA", "r": 2.5, "target_modules": ["q_proj"]})", StatusCode::kInvalidArgument, "r must"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": "(q_proj"})", StatusCode::kInvalidArgument, "regular"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": -1}})",
       StatusCode::kInvalidArgument, "rank_pattern"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 1.5}})",
       StatusCode::kInvalidArgument, "integer"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": [3]})", StatusCode::kInvalidArgument, "strings"},
      {R"({"peft_type": "LORA", "r": 8})", StatusCode::kInvalidArgument, "target_modules"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "use_rslora": "yes"})",
       StatusCode::kInvalidArgument, "use_rslora"},
      {R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"],)", StatusCode::kInvalidArgument, "JSON"},
      {R"([1, 2])", StatusCode::kInvalidArgument, "object"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), c.code) << c.json << ": " << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
}

LlamaConfig base_config() {
  auto j = nlohmann::json::parse(std::ifstream(kBase / "config.json"));
  auto c = parse_llama_config(j, "config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

using LoraAdapterTest = testing::AdapterDirTest;

const char* kQvDown = R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj",
    "down_proj"], "rank_pattern": {"down_proj": 2}, "bias": "none"})";

TEST_F(LoraAdapterTest, ReadsEveryModuleWithItsRankAndScale) {
  const LlamaConfig c = base_config();
  write_adapter(root_ / "a", c, kQvDown, {{"self_attn.q_proj", 4}, {"self_attn.v_proj", 4}, {"mlp.down_proj", 2}}, 1);
  auto a = load_lora_adapter((root_ / "a").string(), "a", c);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ((*a)->max_rank, 4);
  EXPECT_EQ((*a)->target_names(), (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
  const LoraModule& down = (*a)->module(1, LoraTarget::kDown);
  EXPECT_EQ(down.rank, 2);
  EXPECT_EQ(down.in, c.intermediate_size);
  EXPECT_EQ(down.out, c.hidden_size);
  EXPECT_FLOAT_EQ(down.scale, 8.0f / 2);
  EXPECT_FLOAT_EQ((*a)->module(0, LoraTarget::kQ).scale, 8.0f / 4);
  EXPECT_FALSE((*a)->module(0, LoraTarget::kK).present());
}

TEST_F(LoraAdapterTest, BrokenAdaptersAreRefusedNamingTheTensor) {
  const LlamaConfig c = base_config();
  // The rank disagrees with rank_pattern (down_proj written with rank 4).
  write_adapter(root_ / "rank", c, kQvDown, {{"self_attn.q_proj", 4}, {"mlp.down_proj", 4}}, 1);
  auto rank = load_lora_adapter((root_ / "rank").string(), "rank", c);
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("down_proj"), std::string::npos) << rank.status().message();
  // A module the config does not target.
  write_adapter(root_ / "untargeted", c, kQvDown, {{"self_attn.k_proj", 4}}, 1);
  auto untargeted = load_lora_adapter((root_ / "untargeted").string(), "u", c);
  ASSERT_FALSE(untargeted.ok());
  EXPECT_NE(untargeted.status().message().find("target_modules"), std::string::npos);
  // A module mmserve does not adapt.
  fs::create_directories(root_ / "head");
  std::ofstream(root_ / "head/adapter_config.json")
      << R"({"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["lm_head"]})";
  std::vector<float> a(2 * 64), b(256 * 2);
  ASSERT_TRUE(write_safetensors((root_ / "head/adapter_model.safetensors").string(),
                                {{"base_model.model.lm_head.lora_A.weight", DType::kF32, {2, 64}, a.data()},
                                 {"base_model.model.lm_head.lora_B.weight", DType::kF32, {256, 2}, b.data()}})
                  .ok());
  auto head = load_lora_adapter((root_ / "head").string(), "h", c);
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(head.status().message().find("lm_head"), std::string::npos);
  // Only lora_A of a module; no weights file; no config.
  fs::create_directories(root_ / "half");
  std::ofstream(root_ / "half/adapter_config.json") << kQvDown;
  std::vector<float> qa(4 * 64);
  ASSERT_TRUE(write_safetensors((root_ / "half/adapter_model.safetensors").string(),
                                {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", DType::kF32,
                                  {4, 64}, qa.data()}})
                  .ok());
  auto half = load_lora_adapter((root_ / "half").string(), "half", c);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("only one of"), std::string::npos) << half.status().message();
  fs::remove(root_ / "half/adapter_model.safetensors");
  EXPECT_EQ(load_lora_adapter((root_ / "half").string(), "half", c).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(load_lora_adapter((root_ / "nowhere").string(), "x", c).status().code(), StatusCode::kNotFound);
  // A truncated weights file is the safetensors reader's error.
  std::ofstream(root_ / "half/adapter_model.safetensors") << "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":";
  EXPECT_FALSE(load_lora_adapter((root_ / "half").string(), "half", c).ok());
}

// A GPU model's load (a LoraImagePacker): every check before the packer (a broken adapter never reaches it), which
// gets each module's matrices as the file stores them (shape, dtype, bytes) with the ranks and scales already set;
// the adapter keeps its image and no f32 copy, bytes() reports the image, the packer's own error is the load's, and
// the CPU forward refuses such an adapter rather than read matrices it does not hold.
TEST_F(LoraAdapterTest, APackerTakesTheFilesMatricesAndNoF32CopyIsKept) {
  auto base = LlamaModel::load(kBase.string());
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  const LlamaConfig& c = (*base)->config();
  write_adapter(root_ / "a", c, kQvDown, {{"self_attn.q_proj", 4}, {"self_attn.v_proj", 4}, {"mlp.down_proj", 2}}, 1,
                DType::kBF16);
  auto file = SafetensorsFile::open((root_ / "a/adapter_model.safetensors").string());
  ASSERT_TRUE(file.ok());
  int calls = 0;
  LoraImagePacker pack = [&](const LoraAdapter& a,
                             const LoraFileModules& stored) -> StatusOr<std::shared_ptr<const LoraSlotImage>> {
    ++calls;
    EXPECT_EQ(stored.size(), static_cast<size_t>(c.num_hidden_layers));
    const LoraFileModule& down = stored[1][static_cast<int>(LoraTarget::kDown)];
    EXPECT_EQ(a.module(1, LoraTarget::kDown).rank, 2);
    EXPECT_FLOAT_EQ(a.module(1, LoraTarget::kDown).scale, 8.0f / 2);
    EXPECT_EQ(down.a->shape, (std::vector<int64_t>{2, c.intermediate_size}));
    EXPECT_EQ(down.b->shape, (std::vector<int64_t>{c.hidden_size, 2}));
    EXPECT_EQ(down.a->dtype, DType::kBF16);
    const TensorInfo* want = (*file)->find("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
    EXPECT_EQ(std::memcmp(down.a->data, want->data, want->nbytes), 0);
    EXPECT_EQ(stored[0][static_cast<int>(LoraTarget::kK)].a, nullptr);  // not adapted
    auto image = std::make_shared<LoraSlotImage>();
    image->bytes = 12345;
    return std::shared_ptr<const LoraSlotImage>(image);
  };
  auto a = load_lora_adapter((root_ / "a").string(), "a", c, {"model."}, pack);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE((*a)->holds_f32());
  EXPECT_TRUE((*a)->module(0, LoraTarget::kQ).a.empty());
  EXPECT_EQ((*a)->bytes(), 12345);
  EXPECT_EQ((*a)->max_rank, 4);
  // Refused before the packer, as without one.
  write_adapter(root_ / "rank", c, kQvDown, {{"self_attn.q_proj", 4}, {"mlp.down_proj", 4}}, 1, DType::kBF16);
  auto rank = load_lora_adapter((root_ / "rank").string(), "rank", c, {"model."}, pack);
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().message(), load_lora_adapter((root_ / "rank").string(), "rank", c).status().message());
  EXPECT_EQ(calls, 1);
  auto refused = load_lora_adapter(
      (root_ / "a").string(), "a", c, {"model."},
      [](const LoraAdapter&, const LoraFileModules&) -> StatusOr<std::shared_ptr<const LoraSlotImage>> {
        return resource_exhausted("no pinned memory");
      });
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  // The CPU forward: the step is refused naming the adapter.
  auto pool = (*base)->new_pool(1, testing::kStepBlock);
  ASSERT_TRUE(pool.ok());
  const DecoderStep step = prefill_step({{1, 17, 93}}, {a->get()});
  std::vector<float> logits(3 * static_cast<size_t>(c.vocab_size));
  const Status st = (*base)->forward_step(step, *pool, logits.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GPU model"), std::string::npos) << st.to_string();
}

// The base checkpoint with W += scale * B @ A for every module of `adapter` (the merge PEFT's merge_and_unload does).
void write_merged(const fs::path& dir, const LoraAdapter& adapter) {
  testing::write_edited_checkpoint(kBase, dir, [&](testing::WeightValues& v) { testing::merge_dense(v, adapter); });
}

TEST_F(LoraAdapterTest, TheDecoderUnderAnAdapterIsTheMergedModelAndBatchesMix) {
  auto base = LlamaModel::load(kBase.string());
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  const LlamaConfig& c = (*base)->config();
  write_adapter(root_ / "a", c, kQvDown,
                                   {{"self_attn.q_proj", 4}, {"self_attn.v_proj", 4}, {"mlp.down_proj", 2}}, 1);
  const char* all = R"J({"peft_type": "LORA", "r": 3, "lora_alpha": 5, "use_rslora": true,
      "target_modules": "model\\.layers\\.\\d+\\.(self_attn\\.(k|o)_proj|mlp\\.(gate|up)_proj)"})J";
  write_adapter(root_ / "b", c, all,
                                   {{"self_attn.k_proj", 3}, {"self_attn.o_proj", 3}, {"mlp.gate_proj", 3},
                                    {"mlp.up_proj", 3}},
                                   100);
  auto a = load_lora_adapter((root_ / "a").string(), "a", c);
  auto b = load_lora_adapter((root_ / "b").string(), "b", c);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  write_merged(root_ / "merged_a", **a);
  write_merged(root_ / "merged_b", **b);
  auto merged_a = LlamaModel::load((root_ / "merged_a").string());
  auto merged_b = LlamaModel::load((root_ / "merged_b").string());
  ASSERT_TRUE(merged_a.ok() && merged_b.ok());
  const std::vector<int32_t> p1 = {1, 17, 93, 5, 200, 41, 8}, p2 = {1, 3, 250, 77, 9}, p3 = {1, 64, 64, 12};
  const auto alone_a = run_step(**base, {p1}, {a->get()});
  const auto alone_b = run_step(**base, {p2}, {b->get()});
  const auto alone_none = run_step(**base, {p3}, {});
  expect_close(alone_a, run_step(**merged_a, {p1}, {}), 2e-4f, "adapter a vs a merged");
  expect_close(alone_b, run_step(**merged_b, {p2}, {}), 2e-4f, "adapter b vs b merged");
  // The adapters matter (else the test above proves nothing).
  const auto base_p1 = run_step(**base, {p1}, {});
  float moved = 0;
  for (size_t r = 0; r < base_p1.size(); ++r) {
    for (size_t v = 0; v < base_p1[r].size(); ++v) moved = std::max(moved, std::fabs(base_p1[r][v] - alone_a[r][v]));
  }
  EXPECT_GT(moved, 0.05f);
  // One step of the three: each sequence's rows as alone.
  const auto mixed = run_step(**base, {p1, p2, p3}, {a->get(), b->get(), nullptr});
  ASSERT_EQ(mixed.size(), p1.size() + p2.size() + p3.size());
  const std::vector<std::vector<float>> m1(mixed.begin(), mixed.begin() + 7), m2(mixed.begin() + 7, mixed.begin() + 12),
      m3(mixed.begin() + 12, mixed.end());
  expect_close(m1, alone_a, 1e-5f, "mixed: a");
  expect_close(m2, alone_b, 1e-5f, "mixed: b");
  expect_close(m3, alone_none, 1e-5f, "mixed: none");
}

}  // namespace
}  // namespace mmserve::models
