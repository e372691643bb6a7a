// LlavaModel against HF transformers on tiny random LlavaForConditionalGeneration models (tests/fixtures/llava, made
// by tools/reference/make_llava_fixtures.py on the GPU host): over a Llama and over a Mixtral text model, feature
// layer -2, -1 and the list [-3, -1], strategies default and full, one image and two (RGB, grayscale, RGBA), F32 and
// BF16 storage, and the three checkpoint layouts (what save_pretrained writes, the hub's 4.x names, transformers 5's
// module names). For each: the pixels of our PIL-exact preprocessing from the directory's preprocessor_config.json,
// the projected image features, the prompt's logits and the cached greedy steps' logits (1e-4 of the row's largest
// |logit|), and the greedy ids exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../conformance/golden.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"
#include "models/llava/llava.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

using testing::worst_relative_error;

TEST(LlavaHf, PixelsFeaturesLogitsAndGreedyIdsMatchTransformers) {
  const fs::path root = testing::fixture("llava");
  ASSERT_TRUE(fs::is_directory(root)) << root << ": run tools/reference/make_llava_fixtures.py";
  int variants = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "golden.json")) continue;
    SCOPED_TRACE(entry.path().filename().string());
    const nlohmann::json meta = nlohmann::json::parse(std::ifstream(entry.path() / "golden.json"));
    testing::Golden golden((entry.path() / "golden.safetensors").string());
    auto model = LlavaModel::load(entry.path().string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const LlavaConfig& c = (*model)->config();
    const int64_t vocab = c.text.vocab_size, h = c.text.hidden_size, s = c.vision.image_size;

    // Pixels: our preprocessing of the fixture images by the directory's preprocessor_config.json.
    const std::vector<std::string> images = meta["images"].get<std::vector<std::string>>();
    const int64_t n_images = static_cast<int64_t>(images.size());
    auto pre = image::load_clip_preprocess_config(entry.path().string());
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    std::vector<float> pixels(static_cast<size_t>(n_images * 3 * s * s));
    for (int64_t i = 0; i < n_images; ++i) {
      auto decoded = image::decode_rgb_file(testing::fixture("images/" + images[i]));
      ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
      const image::RgbImage cropped = image::resize_and_crop(*decoded, *pre);
      ASSERT_EQ(cropped.width, s);
      ASSERT_EQ(cropped.height, s);
      image::to_pixel_values(cropped, *pre, pixels.data() + i * 3 * s * s);
    }
    const std::vector<float> want_pixels = golden.f32("pixel_values");
    ASSERT_EQ(want_pixels.size(), pixels.size());
    float pixel_err = 0;
    for (size_t i = 0; i < pixels.size(); ++i) pixel_err = std::max(pixel_err, std::fabs(pixels[i] - want_pixels[i]));
    EXPECT_LE(pixel_err, 1e-5f) << "pixels";

    // The projected image features, from HF's pixels (what the prompt's placeholders become).
    const int64_t t = c.tokens_per_image();
    ASSERT_EQ(t, meta["tokens_per_image"].get<int64_t>());
    Tensor pixel_t(const_cast<float*>(want_pixels.data()), DType::kF32, {n_images, 3, s, s});
    std::vector<float> features(static_cast<size_t>(n_images * t * h));
    Tensor features_t(features.data(), DType::kF32, {n_images, t, h});
    Arena arena;
    ASSERT_TRUE((*model)->encode_images(pixel_t, features_t, arena).ok());
    const std::vector<float> want_features = golden.f32("image_features");
    ASSERT_EQ(want_features.size(), features.size());
    EXPECT_LE(worst_relative_error(features.data(), want_features.data(), n_images * t, h), 1e-4f) << "image features";

    // The prompt (placeholders already expanded) and the greedy steps over the cache.
    const std::vector<int64_t> ids64 = golden.i64("input_ids"), want_ids = golden.i64("greedy_ids");
    const std::vector<int32_t> prompt(ids64.begin(), ids64.end());
    EXPECT_EQ(std::count(prompt.begin(), prompt.end(), static_cast<int32_t>(c.image_token_index)), n_images * t);
    const std::vector<float> prompt_logits = golden.f32("prompt_logits"), step_logits = golden.f32("step_logits");
    const int64_t p = static_cast<int64_t>(prompt.size()), steps = static_cast<int64_t>(want_ids.size());
    auto cache = (*model)->text().new_cache(p + steps);
    ASSERT_TRUE(cache.ok());
    std::vector<float> all(static_cast<size_t>(p * vocab)), last(static_cast<size_t>(vocab));
    ASSERT_TRUE((*model)->forward(prompt.data(), p, features_t, 0, *cache, last.data(), all.data()).ok());
    EXPECT_LE(worst_relative_error(all.data(), prompt_logits.data(), p, vocab), 1e-4f) << "prompt logits";
    std::vector<int64_t> ids;
    float step_err = 0;
    for (int64_t k = 0; k < steps; ++k) {
      step_err = std::max(step_err, worst_relative_error(last.data(), step_logits.data() + k * vocab, 1, vocab));
      const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      ids.push_back(next);
      if (k + 1 < steps) {
        ASSERT_TRUE((*model)->forward(&next, 1, features_t, n_images * t, *cache, last.data()).ok());
      }
    }
    EXPECT_LE(step_err, 1e-4f) << "step logits";
    EXPECT_EQ(ids, want_ids);
    ++variants;
  }
  EXPECT_GE(variants, 3);
}

TEST(LlavaHf, MorePlaceholdersThanFeaturesIsAnError) {
  const fs::path dir = testing::fixture("llava/llava-llama-f32");
  auto model = LlavaModel::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const LlavaConfig& c = (*model)->config();
  const int64_t t = c.tokens_per_image(), h = c.text.hidden_size;
  std::vector<float> features(static_cast<size_t>(t * h), 0.1f);
  Tensor features_t(features.data(), DType::kF32, {1, t, h});
  std::vector<int32_t> prompt = {1, 5};
  prompt.insert(prompt.end(), t + 1, static_cast<int32_t>(c.image_token_index));  // one placeholder too many
  auto cache = (*model)->text().new_cache(static_cast<int64_t>(prompt.size()));
  ASSERT_TRUE(cache.ok());
  std::vector<float> last(static_cast<size_t>(c.text.vocab_size));
  const Status s =
      (*model)->forward(prompt.data(), static_cast<int64_t>(prompt.size()), features_t, 0, *cache, last.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("placeholders"), std::string::npos) << s.message();
  EXPECT_EQ(cache->length, 0) << "nothing written on error";
}

TEST(LlavaHf, ACheckpointWithoutTheLlavaPartsIsRefused) {
  // A LLaVA config beside a plain Llama's weights: no vision tower or projector under any known name.
  const fs::path dir = fs::temp_directory_path() / ("mmserve_llava_broken_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(testing::fixture("llava/llava-llama-f32/config.json"), dir / "config.json");
  fs::copy_file(testing::fixture("llama/llama-gqa-f32/model.safetensors"), dir / "model.safetensors");
  auto model = LlavaModel::load(dir.string());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("not a LLaVA checkpoint"), std::string::npos) << model.status().message();
  // The LLaVA's own weights with a tensor missing: named.
  fs::copy_file(testing::fixture("llava/llava-mixtral-f32-v5names/model.safetensors"), dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  model = LlavaModel::load(dir.string());  // a Mixtral text model's tensors under a Llama text config
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("mlp.gate_proj"), std::string::npos) << model.status().message();
  fs::remove_all(dir);
}

TEST(LlavaHf, BrokenConfigsAreRefusedNamingTheKey) {
  const nlohmann::json base =
      nlohmann::json::parse(std::ifstream(testing::fixture("llava/llava-llama-f32/config.json")));
  ASSERT_TRUE(parse_llava_config(base, "config.json").ok());
  auto refused = [&](const char* key, const nlohmann::json& value, const char* expect) {
    nlohmann::json cfg = base;
    cfg[key] = value;
    auto c = parse_llava_config(cfg, "config.json");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().message().find(expect), std::string::npos) << c.status().message();
  };
  refused("vision_feature_layer", 9, "vision_feature_layer");
  refused("vision_feature_layer", nlohmann::json::array(), "vision_feature_layer");
  refused("vision_feature_select_strategy", "cls", "vision_feature_select_strategy");
  refused("image_token_index", 100000, "image_token_index");
  refused("image_seq_length", 7, "image_seq_length");
  refused("projector_hidden_act", "swish2", "projector_hidden_act");
  nlohmann::json no_vision = base;
  no_vision.erase("vision_config");
  EXPECT_FALSE(parse_llava_config(no_vision, "config.json").ok());
}

}  // namespace
}  // namespace mmserve::models
