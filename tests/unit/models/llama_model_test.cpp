// parse_llama_config over the keys users' config.json files carry (transformers 4.x rope_theta / rope_scaling with
// `type` or `rope_type`, 5.x rope_parameters; Qwen2's q/k/v biases, Qwen3's q/k norm and explicit head_dim,
// Mistral's sliding window, eos as an int or a list) and the refusals (unknown architecture, activation or rope
// type, heads that do not divide); LlamaModel on the converted stories260K: a prompt run at once gives the same
// logits as token by token (the KV cache), ids outside the vocabulary and a full cache are errors, a checkpoint
// missing a tensor names it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../conformance/golden.h"
#include "models/llama/llama.h"
#include "models/llama/llama2c.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

StatusOr<LlamaConfig> parse(const std::string& text) { return parse_llama_config(json::parse(text), "config.json"); }

TEST(LlamaConfig, ReadsEachArchitecturesKeys) {
  auto llama31 = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "rope_theta": 500000.0, "eos_token_id": [128001, 128009],
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}})");
  ASSERT_TRUE(llama31.ok()) << llama31.status().to_string();
  EXPECT_EQ(llama31->head_dim, 16);
  EXPECT_EQ(llama31->rope_theta, 500000.0);
  EXPECT_EQ(llama31->rope_scaling.type, "llama3");
  EXPECT_EQ(llama31->rope_scaling.factor, 8.0);
  EXPECT_EQ(llama31->eos_token_ids, (std::vector<int64_t>{128001, 128009}));
  EXPECT_FALSE(llama31->qkv_bias);
  // transformers 5: rope_parameters holds the theta too; the old `type` key in 4.x files.
  auto v5 = parse(R"({"model_type": "llama", "rope_parameters": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}})");
  ASSERT_TRUE(v5.ok()) << v5.status().to_string();
  EXPECT_EQ(v5->architecture, "LlamaForCausalLM");
  EXPECT_EQ(v5->rope_theta, 1e6);
  EXPECT_EQ(v5->rope_scaling.type, "linear");
  auto old_type = parse(R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  ASSERT_TRUE(old_type.ok());
  EXPECT_EQ(old_type->rope_scaling.type, "dynamic");
  auto qwen2 = parse(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
      "tie_word_embeddings": true, "use_sliding_window": false, "sliding_window": 4096})");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status().to_string();
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_bias);
  EXPECT_EQ(qwen2->sliding_window, 0);  // only used with use_sliding_window
  EXPECT_TRUE(qwen2->tie_word_embeddings);
  auto qwen3 = parse(R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
      "head_dim": 32})");
  ASSERT_TRUE(qwen3.ok());
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->head_dim, 32);
  EXPECT_EQ(qwen3->q_size(), 128);
  auto mistral = parse(R"({"architectures": ["MistralForCausalLM"], "sliding_window": 4096})");
  ASSERT_TRUE(mistral.ok());
  EXPECT_EQ(mistral->sliding_window, 4096);
  auto no_window = parse(R"({"architectures": ["MistralForCausalLM"], "sliding_window": null})");
  ASSERT_TRUE(no_window.ok());
  EXPECT_EQ(no_window->sliding_window, 0);
}

TEST(LlamaConfig, RefusesWhatItCannotRun) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"architectures": ["GPT2LMHeadModel"]})", "GPT2LMHeadModel"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "gelu"})", "hidden_act"},
      {R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 4}})", "yarn"},
      {R"({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 5})",
       "multiple of num_key_value_heads"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 100, "num_attention_heads": 3})", "head_dim"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64"})", "hidden_size"},
      {R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "linear", "factor": 0.5}})", "factor"},
      {R"({"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": true})", "use_sliding_window"},
      {R"({"architectures": ["LlamaForCausalLM"], "eos_token_id": "x"})", "eos_token_id"},
  };
  for (const auto& [text, needle] : cases) {
    auto c = parse(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  }
}

class StoriesModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("mmserve_llama_unit_" + std::to_string(::getpid()))).string();
    ASSERT_TRUE(convert_llama2c(testing::fixture("../../assets/llama2c/stories260K.bin"), testing::fixture("../../assets/llama2c/tok512.bin"),
                                dir_)
                    .ok());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string dir_;
};
std::string StoriesModel::dir_;

TEST_F(StoriesModel, PrefillEqualsTokenByToken) {
  auto model = LlamaModel::load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 10, 300, 499};
  const int64_t V = (*model)->config().vocab_size, n = static_cast<int64_t>(prompt.size());
  auto all = (*model)->new_cache(16);
  ASSERT_TRUE(all.ok());
  std::vector<float> at_once(static_cast<size_t>(n * V)), last(static_cast<size_t>(V));
  ASSERT_TRUE((*model)->forward(prompt.data(), n, *all, last.data(), at_once.data()).ok());
  EXPECT_EQ(all->length, n);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), at_once.end() - V));
  auto one = (*model)->new_cache(16);
  ASSERT_TRUE(one.ok());
  std::vector<float> step(static_cast<size_t>(V));
  for (int64_t t = 0; t < n; ++t) {
    ASSERT_TRUE((*model)->forward(&prompt[t], 1, *one, step.data()).ok());
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_NEAR(step[v], at_once[t * V + v], 1e-4f * std::max(1.0f, std::fabs(step[v]))) << t << " " << v;
    }
  }
  // Errors leave the cache as it was.
  const int32_t bad = 512;
  EXPECT_EQ((*model)->forward(&bad, 1, *one, step.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(one->length, n);
  std::vector<int32_t> many(9, 5);
  EXPECT_EQ((*model)->forward(many.data(), 9, *one, step.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->new_cache(513).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoriesModel, AMissingTensorIsNamed) {
  const fs::path broken = fs::path(dir_ + "_broken");
  fs::create_directories(broken);
  fs::copy_file(fs::path(dir_) / "config.json", broken / "config.json", fs::copy_options::overwrite_existing);
  // The converted checkpoint without layer 3's k_proj.
  auto store = WeightStore::open_model_dir(dir_);
  ASSERT_TRUE(store.ok());
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : (*store)->names()) {
    if (name == "model.layers.3.self_attn.k_proj.weight") continue;
    const TensorInfo* t = (*store)->find(name);
    tensors.push_back({name, t->dtype, t->shape, t->data});
  }
  ASSERT_TRUE(write_safetensors((broken / "model.safetensors").string(), tensors).ok());
  auto model = LlamaModel::load(broken.string());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("model.layers.3.self_attn.k_proj.weight"), std::string::npos)
      << model.status().message();
  fs::remove_all(broken);
}

}  // namespace
}  // namespace mmserve::models
