// LlavaModel against HF transformers on tiny random LlavaForConditionalGeneration models (tests/fixtures/llava, made
// by tools/reference/make_llava_fixtures.py on the GPU host): over a Llama and over a Mixtral text model, feature
// layer -2, -1 and the list [-3, -1], strategies default and full, one image and two (RGB, grayscale, RGBA), F32 and
// BF16 storage, and the three checkpoint layouts (what save_pretrained writes, the hub's 4.x names, transformers 5's
// module names). For each: the pixels of our PIL-exact preprocessing from the directory's preprocessor_config.json,
// the projected image features, the prompt's logits and the cached greedy steps' logits (1e-4 of the row's largest
// |logit|), and the greedy ids exactly.
// LLaVA-NeXT (make_llava_next_fixtures.py: over Llama and Mixtral, a 2x2, a 1x3 and a 3x1 grid, unpadded in height
// and in width, gray+alpha input): the tiles' pixels of our any-resolution preprocessing, each image's placeholder
// count, the packed features (the tiles' projected rows in HF's order with image_newline), logits and greedy ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../conformance/golden.h"
#include "frontends/image/anyres.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"
#include "models/llava/llava.h"
#include "models/llava/llava_next.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

using testing::worst_relative_error;

bool is_next(const nlohmann::json& meta) { return meta["architecture"] == "LlavaNextForConditionalGeneration"; }

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float err = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) err = std::max(err, std::fabs(a[i] - b[i]));
  return a.size() == b.size() ? err : INFINITY;
}

// `base` with `key` set to `value` (removed for null) is refused by parse_llava_config, naming `expect`.
void expect_config_refused(const nlohmann::json& base, const char* key, const nlohmann::json& value,
                           const char* expect) {
  nlohmann::json cfg = base;
  if (value.is_null()) {
    cfg.erase(key);
  } else {
    cfg[key] = value;
  }
  auto c = parse_llava_config(cfg, "config.json");
  ASSERT_FALSE(c.ok()) << key;
  EXPECT_NE(c.status().message().find(expect), std::string::npos) << c.status().message();
}

// The golden prompt (placeholders expanded) with `features` at its placeholders: the prompt's logits, then the
// cached greedy steps' logits and ids.
void expect_prompt_and_greedy(const LlavaModel& model, const Tensor& features, int64_t feature_rows,
                              testing::Golden& golden) {
  const LlavaConfig& c = model.config();
  const int64_t vocab = c.text.vocab_size;
  const std::vector<int64_t> ids64 = golden.i64("input_ids"), want_ids = golden.i64("greedy_ids");
  const std::vector<int32_t> prompt(ids64.begin(), ids64.end());
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), static_cast<int32_t>(c.image_token_index)), feature_rows);
  const std::vector<float> prompt_logits = golden.f32("prompt_logits"), step_logits = golden.f32("step_logits");
  const int64_t p = static_cast<int64_t>(prompt.size()), steps = static_cast<int64_t>(want_ids.size());
  auto cache = model.text().new_cache(p + steps);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  std::vector<float> all(static_cast<size_t>(p * vocab)), last(static_cast<size_t>(vocab));
  ASSERT_TRUE(model.forward(prompt.data(), p, features, 0, *cache, last.data(), all.data()).ok());
  EXPECT_LE(worst_relative_error(all.data(), prompt_logits.data(), p, vocab), 1e-4f) << "prompt logits";
  std::vector<int64_t> ids;
  float step_err = 0;
  for (int64_t k = 0; k < steps; ++k) {
    step_err = std::max(step_err, worst_relative_error(last.data(), step_logits.data() + k * vocab, 1, vocab));
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    ids.push_back(next);
    if (k + 1 < steps) ASSERT_TRUE(model.forward(&next, 1, features, feature_rows, *cache, last.data()).ok());
  }
  EXPECT_LE(step_err, 1e-4f) << "step logits";
  EXPECT_EQ(ids, want_ids);
}

TEST(LlavaHf, PixelsFeaturesLogitsAndGreedyIdsMatchTransformers) {
  const fs::path root = testing::fixture("llava");
  ASSERT_TRUE(fs::is_directory(root)) << root << ": run tools/reference/make_llava_fixtures.py";
  int variants = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "golden.json")) continue;
    SCOPED_TRACE(entry.path().filename().string());
    const nlohmann::json meta = nlohmann::json::parse(std::ifstream(entry.path() / "golden.json"));
    if (is_next(meta)) continue;  // LlavaNextHf below
    testing::Golden golden((entry.path() / "golden.safetensors").string());
    auto model = LlavaModel::load(entry.path().string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const LlavaConfig& c = (*model)->config();
    const int64_t h = c.text.hidden_size, s = c.vision.image_size;

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
    EXPECT_LE(max_abs_diff(pixels, want_pixels), 1e-5f) << "pixels";

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

    expect_prompt_and_greedy(**model, features_t, n_images * t, golden);
    ++variants;
  }
  EXPECT_GE(variants, 3);
}

TEST(LlavaNextHf, TilesCountsPackedFeaturesLogitsAndGreedyIdsMatchTransformers) {
  const fs::path root = testing::fixture("llava");
  int variants = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "golden.json")) continue;
    const nlohmann::json meta = nlohmann::json::parse(std::ifstream(entry.path() / "golden.json"));
    if (!is_next(meta)) continue;
    SCOPED_TRACE(entry.path().filename().string());
    testing::Golden golden((entry.path() / "golden.safetensors").string());
    auto model = LlavaModel::load(entry.path().string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const LlavaConfig& c = (*model)->config();
    ASSERT_TRUE(c.is_next());
    const int64_t h = c.text.hidden_size, s = c.vision.image_size, t = c.tokens_per_image();
    ASSERT_EQ(static_cast<int64_t>((*model)->image_newline().size()), h);

    // Tiles: our any-resolution preprocessing by the directory's preprocessor_config.json.
    const std::vector<std::string> images = meta["images"].get<std::vector<std::string>>();
    auto pre = image::load_clip_preprocess_config(entry.path().string());
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    std::vector<float> pixels;
    std::vector<std::array<int64_t, 2>> sizes;
    std::vector<int64_t> tiles, tokens;
    for (const std::string& name : images) {
      auto decoded = image::decode_rgb_file(testing::fixture("images/" + name));
      ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
      sizes.push_back({decoded->height, decoded->width});
      const std::array<int64_t, 2> best = select_best_resolution(decoded->height, decoded->width, c.grid_pinpoints);
      auto tile_pixels =
          image::anyres_pixel_values(*decoded, *pre, {static_cast<int>(best[0]), static_cast<int>(best[1])});
      ASSERT_TRUE(tile_pixels.ok()) << tile_pixels.status().to_string();
      pixels.insert(pixels.end(), tile_pixels->begin(), tile_pixels->end());
      tiles.push_back(llava_image_tiles(c, decoded->height, decoded->width));
      tokens.push_back(llava_image_tokens(c, decoded->height, decoded->width));
      EXPECT_EQ(static_cast<int64_t>(tile_pixels->size()), tiles.back() * 3 * s * s);
    }
    const std::vector<int64_t> want_sizes = golden.i64("image_sizes");
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(sizes[i][0], want_sizes[2 * i]);
      EXPECT_EQ(sizes[i][1], want_sizes[2 * i + 1]);
    }
    EXPECT_EQ(tiles, golden.i64("image_tiles"));
    EXPECT_EQ(tokens, meta["image_tokens"].get<std::vector<int64_t>>());
    const std::vector<float> want_pixels = golden.f32("pixel_values");
    EXPECT_LE(max_abs_diff(pixels, want_pixels), 1e-5f) << "tile pixels";

    // Every tile through the tower and projector (HF's pixels), then each image's rows packed.
    const int64_t all_tiles = static_cast<int64_t>(want_pixels.size()) / (3 * s * s);
    Tensor pixel_t(const_cast<float*>(want_pixels.data()), DType::kF32, {all_tiles, 3, s, s});
    std::vector<float> tile_rows(static_cast<size_t>(all_tiles * t * h));
    Tensor tile_t(tile_rows.data(), DType::kF32, {all_tiles, t, h});
    Arena arena;
    ASSERT_TRUE((*model)->encode_images(pixel_t, tile_t, arena).ok());
    std::vector<float> features;
    int64_t tile = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<int32_t> order = llava_next_feature_order(c, sizes[i][0], sizes[i][1]);
      ASSERT_EQ(static_cast<int64_t>(order.size()), tokens[i]);
      std::vector<float> packed(order.size() * static_cast<size_t>(h));
      gather_feature_rows(order, tile_rows.data() + tile * t * h, (*model)->image_newline().data(), h, packed.data());
      features.insert(features.end(), packed.begin(), packed.end());
      tile += tiles[i];
    }
    const std::vector<float> want_features = golden.f32("image_features");
    ASSERT_EQ(want_features.size(), features.size());
    const int64_t rows = static_cast<int64_t>(features.size()) / h;
    EXPECT_LE(worst_relative_error(features.data(), want_features.data(), rows, h), 1e-4f) << "packed features";

    Tensor features_t(features.data(), DType::kF32, {rows, h});
    expect_prompt_and_greedy(**model, features_t, rows, golden);
    ++variants;
  }
  EXPECT_GE(variants, 2);
}

TEST(LlavaNextHf, BrokenPinpointsAndTheFullStrategyAreRefused) {
  const nlohmann::json base =
      nlohmann::json::parse(std::ifstream(testing::fixture("llava/llava-next-llama-f32/config.json")));
  ASSERT_TRUE(parse_llava_config(base, "config.json").ok());
  auto refused = [&](const char* key, const nlohmann::json& value, const char* expect) {
    expect_config_refused(base, key, value, expect);
  };
  refused("image_grid_pinpoints", nullptr, "image_grid_pinpoints");
  refused("image_grid_pinpoints", nlohmann::json::array(), "image_grid_pinpoints");
  refused("image_grid_pinpoints", nlohmann::json::parse("[[30, 45]]"), "multiples");
  refused("image_grid_pinpoints", nlohmann::json::parse("[[30]]"), "[height, width]");
  refused("image_grid_pinpoints", nlohmann::json::parse("[[0, 30]]"), "multiples");
  refused("image_grid_pinpoints", nlohmann::json::parse("[[300, 300]]"), "64 tiles");
  refused("vision_feature_select_strategy", "full", "full");
  refused("model_type", "llava_onevision", "model_type");
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
    expect_config_refused(base, key, value, expect);
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
