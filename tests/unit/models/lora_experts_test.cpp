// LoRA on Mixtral's experts (issue 16 item 1): PEFT's target_parameters over transformers 5's fused experts
// (ParamWrapper: lora_A [E r, in] expert-major rows, lora_B [out, E r] with expert e's rank j in column j E + e, two
// parameters' pairs nested under "experts." and "experts.base_layer."), read into per-expert modules and applied by
// the CPU forward after each expert's GEMMs. Checked against checkpoints the test merges itself from the saved layout
// (W_e + scale B_e A_e in double): the prompt's logits and the greedy ids; B's columns permuted expert-major give
// other logits (the layout is exercised); one step mixing two adapters, none, and a gate-routed pair equals each
// alone; the refusals. PEFT's own outputs: tests/conformance/lora_hf_test.cpp (mixtral-experts-r4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/safetensors.h"
#include "lora_decoder_check.h"
#include "models/common/decoder_step.h"
#include "models/llama/llama.h"
#include "models/lora/lora_adapter.h"
#include "models/lora/peft_config.h"
#include "models/lora/peft_lora_file.h"
#include "peft_adapter_writer.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using testing::SavedMatrix;

const fs::path kMixtral = fs::path(MMSERVE_FIXTURES_DIR) / "mixtral/mixtral-5x-top2-f32";  // E 5, H 64, I 48, 2 layers
const fs::path kLlama = fs::path(MMSERVE_FIXTURES_DIR) / "llama/llama-gqa-f32";
const std::vector<std::string> kBoth = {"experts.gate_up_proj", "experts.down_proj"};
const char* kExpertsR4 = R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": [],
    "target_parameters": ["experts.gate_up_proj", "experts.down_proj"]})";

LlamaConfig config_of(const fs::path& dir) {
  auto c = parse_llama_config(nlohmann::json::parse(std::ifstream(dir / "config.json")), "config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

// W_e += weight * scale * B_e @ A_e (double) for each expert of every experts pair in `matrices`, from the layout PEFT
// saves: A_e = rows [e r, (e + 1) r) of A, B_e[:, j] = B[:, j E + e]; gate_up's first I rows into w1, the next I
// into w3, down into w2.
void merge_experts(testing::WeightValues& values, const std::vector<SavedMatrix>& matrices, const LlamaConfig& c,
                   int64_t r, double scale, double weight = 1) {
  const int64_t experts = c.num_experts, i_size = c.intermediate_size;
  for (size_t k = 0; k + 1 < matrices.size(); k += 2) {
    const SavedMatrix &a = matrices[k], &b = matrices[k + 1];
    if (a.param.empty()) continue;  // a decoder linear's (merge_dense)
    const int64_t layer = std::stoll(a.name.substr(std::strlen("base_model.model.model.layers.")));
    const bool gate_up = a.param == "experts.gate_up_proj";
    const int64_t in = a.shape[1], out = b.shape[0];
    for (int64_t e = 0; e < experts; ++e) {
      const std::string x = "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." + std::to_string(e);
      for (int64_t o = 0; o < out; ++o) {
        const bool up = gate_up && o >= i_size;
        std::vector<float>& w = values[x + (gate_up ? (up ? ".w3.weight" : ".w1.weight") : ".w2.weight")];
        const int64_t row = up ? o - i_size : o;
        ASSERT_EQ(w.size(), static_cast<size_t>((gate_up ? i_size : out) * in));
        for (int64_t col = 0; col < in; ++col) {
          double d = 0;
          for (int64_t j = 0; j < r; ++j) {
            d += double{b.values[o * experts * r + j * experts + e]} * a.values[(e * r + j) * in + col];
          }
          w[row * in + col] += static_cast<float>(d * scale * weight);
        }
      }
    }
  }
}

// The same matrices with each experts lora_B's columns expert-major (expert e's rank j at e r + j, not j E + e).
std::vector<SavedMatrix> expert_major(std::vector<SavedMatrix> matrices, int64_t experts, int64_t r) {
  for (SavedMatrix& m : matrices) {
    if (m.param.empty() || m.name.find("lora_B") == std::string::npos) continue;
    const std::vector<float> b = m.values;
    for (int64_t o = 0; o < m.shape[0]; ++o) {
      for (int64_t e = 0; e < experts; ++e) {
        for (int64_t j = 0; j < r; ++j) m.values[o * experts * r + e * r + j] = b[o * experts * r + j * experts + e];
      }
    }
  }
  return matrices;
}

// Greedy ids under `adapter`, each from a whole-prefix step (no cache): argmax of the last row, `n` times.
std::vector<int32_t> greedy_under(const LlamaModel& model, std::vector<int32_t> tokens, const LoraAdapter* adapter,
                                  int64_t n) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < n) {
    const std::vector<float> last = testing::run_step(model, {tokens}, {adapter}).back();
    out.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    tokens.push_back(out.back());
  }
  return out;
}

TEST(PeftConfig, TargetParametersAreReadAndPatternsBesideThemRefused) {
  auto c = parse_peft_lora_config(kExpertsR4, "adapter_config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->target_parameters, kBoth);
  EXPECT_TRUE(c->target_list.empty());
  struct Case {
    const char* json;
    StatusCode code;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"peft_type": "LORA", "r": 4, "target_modules": [], "target_parameters": ["experts.down_proj"],
          "rank_pattern": {"down_proj": 2}})",
       StatusCode::kUnimplemented, "rank_pattern"},
      {R"({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "target_parameters": ["experts.down_proj"],
          "alpha_pattern": {"q_proj": 2}})",
       StatusCode::kUnimplemented, "alpha_pattern"},
      {R"({"peft_type": "LORA", "r": 4, "target_modules": [], "target_parameters": "experts.down_proj"})",
       StatusCode::kInvalidArgument, "target_parameters"},
      {R"({"peft_type": "LORA", "r": 4, "target_modules": [], "target_parameters": [3]})", StatusCode::kInvalidArgument,
       "target_parameters"},
      {R"({"peft_type": "LORA", "r": 4, "target_modules": [], "target_parameters": []})", StatusCode::kInvalidArgument,
       "target_modules names no module"},
  };
  for (const Case& k : cases) {
    auto r = parse_peft_lora_config(k.json, "adapter_config.json");
    ASSERT_FALSE(r.ok()) << k.json;
    EXPECT_EQ(r.status().code(), k.code) << k.json << ": " << r.status().to_string();
    EXPECT_NE(r.status().message().find(k.needle), std::string::npos) << r.status().message();
  }
  // Empty patterns are no patterns.
  EXPECT_TRUE(parse_peft_lora_config(R"({"peft_type": "LORA", "r": 4, "target_modules": [], "rank_pattern": {},
      "alpha_pattern": {}, "target_parameters": ["experts.down_proj"]})",
                                     "adapter_config.json")
                  .ok());
}

using LoraExpertsTest = testing::AdapterDirTest;

// Every expert's module is the saved layout's A_e, B_e (either order of the two parameters: PEFT nests the first one
// listed innermost, and the pairs are told apart by their shapes).
void expect_split(const LoraAdapter& adapter, const std::vector<SavedMatrix>& matrices, const LlamaConfig& c,
                  int64_t r) {
  const int64_t experts = c.num_experts;
  for (size_t k = 0; k + 1 < matrices.size(); k += 2) {
    const SavedMatrix &a = matrices[k], &b = matrices[k + 1];
    const int64_t layer = std::stoll(a.name.substr(std::strlen("base_model.model.model.layers.")));
    const LoraExpertParam p = a.param == "experts.gate_up_proj" ? LoraExpertParam::kGateUp : LoraExpertParam::kDown;
    const int64_t in = a.shape[1], out = b.shape[0];
    for (int64_t e = 0; e < experts; ++e) {
      const LoraModule* m = adapter.expert_module(layer, p, e);
      ASSERT_NE(m, nullptr) << a.name;
      ASSERT_EQ(m->rank, r);
      ASSERT_EQ(m->in, in);
      ASSERT_EQ(m->out, out);
      for (int64_t j = 0; j < r; ++j) {
        for (int64_t col = 0; col < in; ++col) ASSERT_EQ(m->a[j * in + col], a.values[(e * r + j) * in + col]);
        for (int64_t o = 0; o < out; ++o) ASSERT_EQ(m->b[o * r + j], b.values[o * experts * r + j * experts + e]);
      }
    }
  }
}

TEST_F(LoraExpertsTest, EachExpertsMatricesAreReadFromTheFusedLayout) {
  const LlamaConfig c = config_of(kMixtral);
  const auto both = testing::experts_matrices(c, kBoth, 4, 1);
  testing::write_adapter_files(root_ / "both", kExpertsR4, both, DType::kBF16);
  auto a = load_lora_adapter((root_ / "both").string(), "both", c);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ((*a)->target_names(), kBoth);
  EXPECT_EQ((*a)->max_rank, 4);
  EXPECT_TRUE((*a)->adapts_experts());
  EXPECT_FLOAT_EQ((*a)->expert_module(1, LoraExpertParam::kDown, 4)->scale, 8.0f / 4);
  EXPECT_EQ((*a)->bytes(),
            static_cast<int64_t>(c.num_hidden_layers * c.num_experts * 4 *
                                 (c.hidden_size + 2 * c.intermediate_size + c.intermediate_size + c.hidden_size) *
                                 sizeof(float)));
  // bf16 values: compare with what the file holds, rounded the same way.
  std::vector<SavedMatrix> rounded = both;
  for (SavedMatrix& m : rounded) {
    std::vector<uint16_t> bits(m.values.size());
    convert_from_f32(m.values.data(), DType::kBF16, reinterpret_cast<uint8_t*>(bits.data()),
                     static_cast<int64_t>(bits.size()));
    convert_to_f32(DType::kBF16, reinterpret_cast<const uint8_t*>(bits.data()), m.values.data(),
                   static_cast<int64_t>(bits.size()));
  }
  expect_split(**a, rounded, c, 4);
  // The other order (gate_up the outer wrapper), and one parameter alone: its pair under "experts." only.
  const auto reversed = testing::experts_matrices(c, {"experts.down_proj", "experts.gate_up_proj"}, 4, 7);
  testing::write_adapter_files(root_ / "reversed", kExpertsR4, reversed);
  auto b = load_lora_adapter((root_ / "reversed").string(), "reversed", c);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  expect_split(**b, reversed, c, 4);
  const auto down = testing::experts_matrices(c, {"experts.down_proj"}, 2, 9);
  ASSERT_EQ(down[0].name, "base_model.model.model.layers.0.mlp.experts.lora_A.weight");
  testing::write_adapter_files(root_ / "down", R"({"peft_type": "LORA", "r": 2, "lora_alpha": 3, "use_rslora": true,
      "target_modules": [], "target_parameters": ["experts.down_proj"]})",
                               down);
  auto d = load_lora_adapter((root_ / "down").string(), "down", c);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  expect_split(**d, down, c, 2);
  EXPECT_EQ((*d)->target_names(), std::vector<std::string>{"experts.down_proj"});
  EXPECT_EQ((*d)->expert_module(0, LoraExpertParam::kGateUp, 0), nullptr);
  EXPECT_FLOAT_EQ((*d)->expert_module(0, LoraExpertParam::kDown, 0)->scale, static_cast<float>(3 / std::sqrt(2.0)));
}

// Adapter a: both expert parameters (r 4, scale 2) and o_proj; b: down_proj's experts and q_proj (r 2, rsLoRA).
struct TwoAdapters {
  std::vector<SavedMatrix> a, b;
  std::shared_ptr<LoraAdapter> loaded_a, loaded_b;
  static constexpr double kScaleA = 2.0;
  static double scale_b() { return 3 / std::sqrt(2.0); }
};

void write_two(const fs::path& root, const LlamaConfig& c, TwoAdapters& t) {
  t.a = testing::module_matrices(c, {{0, "self_attn.o_proj", 4}, {1, "self_attn.o_proj", 4}}, 100);
  for (SavedMatrix& m : testing::experts_matrices(c, kBoth, 4, 1)) t.a.push_back(std::move(m));
  testing::write_adapter_files(root / "a", R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
      "target_modules": ["o_proj"], "target_parameters": ["experts.gate_up_proj", "experts.down_proj"]})",
                               t.a);
  t.b = testing::module_matrices(c, {{0, "self_attn.q_proj", 2}, {1, "self_attn.q_proj", 2}}, 200);
  for (SavedMatrix& m : testing::experts_matrices(c, {"experts.down_proj"}, 2, 50)) t.b.push_back(std::move(m));
  testing::write_adapter_files(root / "b", R"({"peft_type": "LORA", "r": 2, "lora_alpha": 3, "use_rslora": true,
      "target_modules": ["q_proj"], "target_parameters": ["experts.down_proj"]})",
                               t.b);
  auto a = load_lora_adapter((root / "a").string(), "a", c);
  auto b = load_lora_adapter((root / "b").string(), "b", c);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  t.loaded_a = *a, t.loaded_b = *b;
}

const std::vector<int32_t> kP1 = {1, 17, 93, 5, 200, 41, 8}, kP2 = {1, 3, 250, 77, 9}, kP3 = {1, 64, 64, 12},
                           kP4 = {1, 120, 33, 7, 7, 180};

// The tiny Mixtral, and the two adapters above written and loaded.
class LoraExpertsModelTest : public testing::AdapterDirTest {
 protected:
  void SetUp() override {
    AdapterDirTest::SetUp();
    auto base = LlamaModel::load(kMixtral.string());
    ASSERT_TRUE(base.ok()) << base.status().to_string();
    base_ = std::move(*base);
    ASSERT_NO_FATAL_FAILURE(write_two(root_, base_->config(), t_));
  }
  std::unique_ptr<LlamaModel> base_;
  TwoAdapters t_;
};

TEST_F(LoraExpertsModelTest, TheAdaptedModelIsTheMergedCheckpoint) {
  const LlamaModel& base = *base_;
  const LlamaConfig& c = base.config();
  const TwoAdapters& t = t_;
  for (const auto& [name, adapter, matrices, r, scale] :
       {std::tuple{"a", t.loaded_a.get(), &t.a, int64_t{4}, TwoAdapters::kScaleA},
        std::tuple{"b", t.loaded_b.get(), &t.b, int64_t{2}, TwoAdapters::scale_b()}}) {
    SCOPED_TRACE(name);
    const fs::path dir = root_ / (std::string("merged_") + name);
    testing::write_edited_checkpoint(kMixtral, dir, [&](testing::WeightValues& v) {
      testing::merge_dense(v, *adapter);
      merge_experts(v, *matrices, c, r, scale);
    });
    auto merged = LlamaModel::load(dir.string());
    ASSERT_TRUE(merged.ok()) << merged.status().to_string();
    const auto got = testing::run_step(base, {kP1}, {adapter});
    testing::expect_close(got, testing::run_step(**merged, {kP1}, {}), 2e-4f, "adapter vs merged");
    EXPECT_GT(testing::max_abs_diff(got, testing::run_step(base, {kP1}, {})), 0.05f);  // the adapter matters
    auto want = (*merged)->greedy(kP1, 8, /*ignore_eos=*/true);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(greedy_under(base, kP1, adapter, 8), *want);
  }
}

// The same values with B's columns expert-major load (the shapes are the same) but give other logits: the layout
// matters, so the merged checkpoints above (built from the interleaved layout) tell a loader that read it otherwise.
TEST_F(LoraExpertsModelTest, TheInterleavedColumnsMatter) {
  const LlamaConfig& c = base_->config();
  const auto m = testing::experts_matrices(c, kBoth, 4, 1);
  testing::write_adapter_files(root_ / "interleaved", kExpertsR4, m);
  testing::write_adapter_files(root_ / "expert_major", kExpertsR4, expert_major(m, c.num_experts, 4));
  auto a = load_lora_adapter((root_ / "interleaved").string(), "a", c);
  auto b = load_lora_adapter((root_ / "expert_major").string(), "b", c);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto got_a = testing::run_step(*base_, {kP1}, {a->get()}), got_b = testing::run_step(*base_, {kP1}, {b->get()});
  EXPECT_GT(testing::max_abs_diff(got_a, got_b), 0.05f);
}

TEST_F(LoraExpertsModelTest, AStepMixingAdaptersNoneAndAWeightedPairIsEachAlone) {
  const LlamaModel& base = *base_;
  const LlamaConfig& c = base.config();
  const TwoAdapters& t = t_;
  const LoraAdapter *a = t.loaded_a.get(), *b = t.loaded_b.get();
  const auto alone_a = testing::run_step(base, {kP1}, {a});
  const auto alone_b = testing::run_step(base, {kP2}, {b});
  const auto alone_none = testing::run_step(base, {kP3}, {});
  DecoderStep pair = testing::prefill_step({kP4}, {a});
  pair.loras_second = {b}, pair.lora_weights = {0.25f, 0.75f};
  const auto alone_pair = testing::run_step(base, pair);
  // The pair is 0.25 delta_a + 0.75 delta_b on every adapted linear and expert.
  testing::write_edited_checkpoint(kMixtral, root_ / "merged_pair", [&](testing::WeightValues& v) {
    testing::merge_dense(v, *a, 0.25);
    merge_experts(v, t.a, c, 4, TwoAdapters::kScaleA, 0.25);
    testing::merge_dense(v, *b, 0.75);
    merge_experts(v, t.b, c, 2, TwoAdapters::scale_b(), 0.75);
  });
  auto merged_pair = LlamaModel::load((root_ / "merged_pair").string());
  ASSERT_TRUE(merged_pair.ok()) << merged_pair.status().to_string();
  testing::expect_close(alone_pair, testing::run_step(**merged_pair, {kP4}, {}), 2e-4f, "pair vs merged");
  // One step of the four: each sequence's rows as alone.
  DecoderStep step = testing::prefill_step({kP1, kP2, kP3, kP4}, {a, b, nullptr, a});
  step.loras_second = {nullptr, nullptr, nullptr, b};
  step.lora_weights = {1, 0, 1, 0, 1, 0, 0.25f, 0.75f};
  const auto mixed = testing::run_step(base, step);
  ASSERT_EQ(mixed.size(), kP1.size() + kP2.size() + kP3.size() + kP4.size());
  auto rows = [&](size_t from, size_t count) {
    return std::vector<std::vector<float>>(mixed.begin() + from, mixed.begin() + from + count);
  };
  testing::expect_close(rows(0, 7), alone_a, 1e-5f, "mixed: a");
  testing::expect_close(rows(7, 5), alone_b, 1e-5f, "mixed: b");
  testing::expect_close(rows(12, 4), alone_none, 1e-5f, "mixed: none");
  testing::expect_close(rows(16, 6), alone_pair, 1e-5f, "mixed: the pair");
}

// `dir`'s load for `c` fails with `code`, its message holding `needle`.
void expect_refused(const fs::path& dir, const LlamaConfig& c, StatusCode code, const std::string& needle,
                    const LoraImagePacker& pack = nullptr) {
  auto a = load_lora_adapter(dir.string(), "x", c, {"model."}, pack);
  ASSERT_FALSE(a.ok()) << dir;
  EXPECT_EQ(a.status().code(), code) << a.status().to_string();
  EXPECT_NE(a.status().message().find(needle), std::string::npos) << a.status().message();
}

TEST_F(LoraExpertsTest, BrokenExpertAdaptersAreRefusedNamingWhat) {
  const LlamaConfig c = config_of(kMixtral);
  const auto m = testing::experts_matrices(c, kBoth, 4, 1);
  // rank_pattern beside target_parameters (how PEFT keys them to parameters is not known).
  testing::write_adapter_files(root_ / "pattern", R"({"peft_type": "LORA", "r": 4, "target_modules": [],
      "target_parameters": ["experts.down_proj"], "rank_pattern": {"experts": 2}})",
                               m);
  expect_refused(root_ / "pattern", c, StatusCode::kUnimplemented, "rank_pattern");
  // A parameter mmserve does not adapt.
  testing::write_adapter_files(root_ / "unknown", R"({"peft_type": "LORA", "r": 4, "target_modules": [],
      "target_parameters": ["experts.gate_up_proj", "mlp.gate.weight"]})",
                               m);
  expect_refused(root_ / "unknown", c, StatusCode::kUnimplemented, "'mlp.gate.weight'");
  // A pair of neither parameter's shapes: gate_up's lora_A with down's lora_B; and the rank other than r.
  std::vector<SavedMatrix> crossed = m;
  crossed[1] = m[3];
  crossed[1].name = m[1].name;
  testing::write_adapter_files(root_ / "crossed", kExpertsR4, crossed);
  expect_refused(root_ / "crossed", c, StatusCode::kInvalidArgument,
                 "base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight [20, 64] with "
                 "base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.weight [64, 20] is neither");
  testing::write_adapter_files(root_ / "rank", kExpertsR4, testing::experts_matrices(c, kBoth, 3, 1));
  expect_refused(root_ / "rank", c, StatusCode::kInvalidArgument, "is neither experts.gate_up_proj's pair");
  // Half a pair.
  std::vector<SavedMatrix> half = m;
  half.erase(half.begin() + 3);  // layer 0's down lora_B
  testing::write_adapter_files(root_ / "half", kExpertsR4, half);
  expect_refused(root_ / "half", c, StatusCode::kInvalidArgument,
                 "model.layers.0.mlp.experts has only one of lora_A / lora_B");
  // A pair of a parameter the config does not list.
  testing::write_adapter_files(root_ / "untargeted", R"({"peft_type": "LORA", "r": 4, "target_modules": [],
      "target_parameters": ["experts.down_proj"]})",
                               m);
  expect_refused(root_ / "untargeted", c, StatusCode::kInvalidArgument,
                 "'experts.gate_up_proj', which is not among the config's target_parameters");
  // A GPU model's load (a packer): refused before the packer, after the checks above.
  testing::write_adapter_files(root_ / "ok", kExpertsR4, m);
  int calls = 0;
  LoraImagePacker pack = [&](const LoraAdapter&,
                             const LoraFileModules&) -> StatusOr<std::shared_ptr<const LoraSlotImage>> {
    ++calls;
    return std::shared_ptr<const LoraSlotImage>(std::make_shared<LoraSlotImage>());
  };
  expect_refused(root_ / "ok", c, StatusCode::kUnimplemented, "LoRA on Mixtral's experts runs on the CPU path only",
                 pack);
  expect_refused(root_ / "half", c, StatusCode::kInvalidArgument, "only one of", pack);
  EXPECT_EQ(calls, 0);
  // target_parameters on a model without experts: the dense Llama, and CLIP's reader.
  expect_refused(root_ / "ok", config_of(kLlama), StatusCode::kUnimplemented, "target_parameters");
  auto clip =
      read_peft_lora_dir((root_ / "ok").string(), [](const std::string&) { return std::nullopt; }, "CLIP's linears");
  ASSERT_FALSE(clip.ok());
  EXPECT_EQ(clip.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(clip.status().message().find("target_parameters"), std::string::npos) << clip.status().message();
}

}  // namespace
}  // namespace mmserve::models
