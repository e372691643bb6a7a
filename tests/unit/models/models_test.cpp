// Unit tests of the models layer: the weight table check (every problem reported at once), CLIP config
// parsing (defaults, wrong types, impossible values), architecture detection, the demo writer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "models/clip/clip.h"
#include "models/clip/clip_demo.h"
#include "models/common/weight_table.h"
#include "models/registry.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mmserve_models_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A checkpoint with tensors "a" [2,3] f32, "b" [4] bf16, "extra" [1] f16.
fs::path write_small_checkpoint() {
  fs::path d = temp_dir("ckpt");
  static const float a[6] = {1, 2, 3, 4, 5, 6};
  static const uint16_t b[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};  // bf16 1, 2, -1, 0
  static const uint16_t extra[1] = {0x3c00};                      // f16 1.0
  Status s = write_safetensors(
      (d / "model.safetensors").string(),
      {{"a", DType::kF32, {2, 3}, a}, {"b", DType::kBF16, {4}, b}, {"extra", DType::kF16, {1}, extra}});
  EXPECT_TRUE(s.ok()) << s.to_string();
  return d;
}

TEST(WeightTable, ReportsEveryProblemAtOnce) {
  fs::path d = write_small_checkpoint();
  auto store = WeightStore::open_model_dir(d.string());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  Status s = check_weights(**store, {{"a", {3, 2}}, {"b", {4}}, {"missing1", {1}}, {"missing2", {2}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  const std::string& m = s.message();
  EXPECT_NE(m.find("2 missing: missing1, missing2"), std::string::npos) << m;
  EXPECT_NE(m.find("a [2, 3] (expected [3, 2])"), std::string::npos) << m;
  EXPECT_NE(m.find("1 unexpected: extra"), std::string::npos) << m;
}

TEST(WeightTable, OptionalAndIgnoredTensorsAreFine) {
  fs::path d = write_small_checkpoint();
  auto store = WeightStore::open_model_dir(d.string());
  ASSERT_TRUE(store.ok());
  WeightCheckOptions options;
  options.ignored_suffixes = {"xtra"};
  EXPECT_TRUE(check_weights(**store, {{"a", {2, 3}}, {"b", {4}}, {"c", {1}, /*optional=*/true}}, options).ok());
}

TEST(WeightTable, UpcastsToAlignedF32) {
  fs::path d = write_small_checkpoint();
  auto store = WeightStore::open_model_dir(d.string());
  ASSERT_TRUE(store.ok());
  auto weights = F32Weights::load(**store, {{"a", {2, 3}}, {"b", {4}}, {"extra", {1}}, {"absent", {1}, true}});
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  Tensor b = (*weights)->get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_EQ(b.data_as<float>()[0], 1.0f);
  EXPECT_EQ(b.data_as<float>()[1], 2.0f);
  EXPECT_EQ(b.data_as<float>()[2], -1.0f);
  EXPECT_EQ((*weights)->get("extra").data_as<float>()[0], 1.0f);
  EXPECT_EQ((*weights)->get("a").data_as<float>()[5], 6.0f);
  EXPECT_TRUE((*weights)->get("absent").empty());
  // A derived tensor (fused q/k/v, a dequantised linear) counts in what the model reports it holds.
  const size_t before = (*weights)->bytes();
  (*weights)->add_owned("fused", {3, 5});
  EXPECT_EQ((*weights)->bytes(), before + 15 * sizeof(float));
}

TEST(WeightTable, RefusesUnsupportedDtypes) {
  fs::path d = temp_dir("i32");
  static const int32_t v[2] = {1, 2};
  ASSERT_TRUE(write_safetensors((d / "model.safetensors").string(), {{"w", DType::kI32, {2}, v}}).ok());
  auto store = WeightStore::open_model_dir(d.string());
  ASSERT_TRUE(store.ok());
  auto weights = F32Weights::load(**store, {{"w", {2}}});
  EXPECT_EQ(weights.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(weights.status().message().find("w"), std::string::npos);
}

TEST(ClipConfig, DefaultsAreViTB32) {
  auto c = parse_clip_config(nlohmann::json::object(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->vision.num_patches(), 49);
  EXPECT_EQ(c->text.hidden_size, 512);
  EXPECT_EQ(c->projection_dim, 512);
  EXPECT_EQ(c->vision.hidden_act, kernels::Activation::kQuickGelu);
  // ViT-B/32: 151,277,313 parameters (HF's count for openai/clip-vit-base-patch32).
  int64_t params = 0;
  for (const WeightSpec& spec : clip_weight_specs(*c)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    params += n;
  }
  EXPECT_EQ(params, 151277313);
}

TEST(ClipConfig, ErrorsNameTheKey) {
  auto bad_type = parse_clip_config(nlohmann::json::parse(R"({"vision_config": {"patch_size": "32"}})"), "config.json");
  EXPECT_EQ(bad_type.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_type.status().message().find("patch_size"), std::string::npos) << bad_type.status().message();
  auto heads = parse_clip_config(
      nlohmann::json::parse(R"({"text_config": {"hidden_size": 10, "num_attention_heads": 3}})"), "config.json");
  EXPECT_NE(heads.status().message().find("not divisible"), std::string::npos) << heads.status().message();
  auto act = parse_clip_config(nlohmann::json::parse(R"({"text_config": {"hidden_act": "swish42"}})"), "config.json");
  EXPECT_EQ(act.status().code(), StatusCode::kUnimplemented);
  auto negative = parse_clip_config(nlohmann::json::parse(R"({"projection_dim": -1})"), "config.json");
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  auto not_object = parse_clip_config(nlohmann::json::parse("[1, 2]"), "config.json");
  EXPECT_FALSE(not_object.ok());
}

TEST(Registry, DetectsClipWhisperSamAndLlamaAndRefusesOthers) {
  fs::path d = temp_dir("registry");
  std::ofstream(d / "config.json") << R"({"architectures": ["CLIPModel"]})";
  EXPECT_EQ(detect_family(d.string()).value(), Family::kClip);
  std::ofstream(d / "config.json") << R"({"architectures": ["WhisperForConditionalGeneration"]})";
  EXPECT_EQ(detect_family(d.string()).value(), Family::kWhisper);
  std::ofstream(d / "config.json") << R"({"model_type": "whisper"})";
  EXPECT_EQ(detect_family(d.string()).value(), Family::kWhisper);
  std::ofstream(d / "config.json") << R"({"architectures": ["SamModel"]})";
  EXPECT_EQ(detect_family(d.string()).value(), Family::kSam);
  EXPECT_STREQ(family_name(Family::kSam), "sam");
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    std::ofstream(d / "config.json") << R"({"architectures": [")" << arch << R"("]})";
    EXPECT_EQ(detect_family(d.string()).value(), Family::kLlama) << arch;
  }
  std::ofstream(d / "config.json") << R"({"model_type": "qwen3"})";
  EXPECT_EQ(detect_family(d.string()).value(), Family::kLlama);
  EXPECT_STREQ(family_name(Family::kLlama), "llama");
  std::ofstream(d / "config.json") << R"({"architectures": ["BertModel"]})";
  auto bert = detect_family(d.string());
  EXPECT_EQ(bert.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bert.status().message().find("BertModel"), std::string::npos);
  std::ofstream(d / "config.json") << "{}";
  EXPECT_EQ(detect_family(d.string()).status().code(), StatusCode::kInvalidArgument);
  fs::remove(d / "config.json");
  EXPECT_EQ(detect_family(d.string()).status().code(), StatusCode::kNotFound);
}

TEST(DemoModel, IsDeterministicAndLoads) {
  fs::path a = temp_dir("demo_a"), b = temp_dir("demo_b");
  DemoModelOptions options;
  options.overwrite = true;
  ASSERT_TRUE(write_demo_clip(a.string(), options).ok());
  ASSERT_TRUE(write_demo_clip(b.string(), options).ok());
  auto read = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(read(a / "model.safetensors"), read(b / "model.safetensors"));
  EXPECT_EQ(read(a / "vocab.json").size(), 961143u);  // the real CLIP vocabulary, embedded in the binary
  auto model = ClipModel::load(a.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->config().projection_dim, 128);
  EXPECT_FALSE(write_demo_clip(a.string()).ok()) << "refuses to overwrite without the option";
}

}  // namespace
}  // namespace mmserve::models
