// LLaVA and LLaVA-NeXT on the GPU (LlavaCudaVision + LlamaCudaModel::load_decoder) against HF on the tiny fixtures of
// tests/fixtures/llava (tools/reference/make_llava_fixtures.py, make_llava_next_fixtures.py): the projected image
// features from HF's pixels (LLaVA-NeXT's tiles packed with image_newline), then
// the prompt's logits and every greedy step (fed HF's ids) with the placeholder rows taking our features. f32 within
// 2e-4 of each row's largest |value| (the same model, other summation orders); bf16 under the 2x rule (our logits'
// error at most twice HF's own bf16 run's, on the same inputs), over a Llama and over a Mixtral text model. Skipped,
// saying why, without a GPU.
#include "models/llava/llava_cuda.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../conformance/golden.h"
#include "../conformance/llama_cuda_util.h"
#include "core/safetensors.h"
#include "kernels/testing/cuda_test_util.h"
#include "models/llava/llava_next.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

void check_variant(const fs::path& dir, DType dtype) {
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "golden.json"));
  testing::Golden golden((dir / "golden.safetensors").string());
  LlavaCudaVisionOptions vo;
  vo.dtype = dtype;
  auto vision = LlavaCudaVision::load(dir.string(), vo);
  ASSERT_TRUE(vision.ok()) << vision.status().to_string();
  const LlavaConfig& c = (*vision)->config();
  const int64_t h = c.text.hidden_size, t = c.tokens_per_image(), vocab = c.text.vocab_size, s = c.vision.image_size;
  const std::vector<float> pixels = golden.f32("pixel_values"), want_features = golden.f32("image_features");
  // Every image (LLaVA-NeXT: every tile) through the tower and projector; LLaVA-NeXT's rows then packed per image
  // with image_newline as the executor does (llava_next.h).
  const int64_t tiles = static_cast<int64_t>(pixels.size()) / (3 * s * s);
  std::vector<float> features(static_cast<size_t>(tiles * t * h));
  ASSERT_TRUE((*vision)->encode(pixels.data(), tiles, features.data()).ok());
  if (c.is_next()) {
    const std::vector<int64_t> sizes = golden.i64("image_sizes"), image_tiles = golden.i64("image_tiles");
    std::vector<float> packed;
    int64_t tile = 0;
    for (size_t i = 0; i < image_tiles.size(); ++i) {
      const std::vector<int32_t> order = llava_next_feature_order(c, sizes[2 * i], sizes[2 * i + 1]);
      std::vector<float> rows(order.size() * static_cast<size_t>(h));
      gather_feature_rows(order, features.data() + tile * t * h, (*vision)->image_newline().data(), h, rows.data());
      packed.insert(packed.end(), rows.begin(), rows.end());
      tile += image_tiles[i];
    }
    features = std::move(packed);
  }
  ASSERT_EQ(features.size(), want_features.size());
  const int64_t feature_rows = static_cast<int64_t>(features.size()) / h;
  float feature_err = 0;
  for (int64_t r = 0; r < feature_rows; ++r) {
    feature_err = std::max(feature_err, row_error(features.data() + r * h, want_features.data() + r * h, h));
  }
  std::printf("[ llava_cuda ] %-38s %-4s image features max rel error %.2e\n", dir.filename().c_str(),
              dtype_name(dtype), feature_err);
  EXPECT_LE(feature_err, dtype == DType::kF32 ? 2e-4f : 5e-2f) << "image features";

  auto store = WeightStore::open_model_dir(dir.string());
  ASSERT_TRUE(store.ok());
  auto layout = detect_llava_layout(**store, dir.string());
  ASSERT_TRUE(layout.ok());
  LlamaCudaOptions o;
  o.dtype = dtype;
  o.max_model_len = 512;  // LLaVA-NeXT's prompts hold two images of up to 115 rows
  o.max_num_seqs = 512;   // the prompt step asks for every prompt row's logits
  o.max_num_tokens = 512;
  o.kv_cache_bytes = 16 << 20;
  auto model = LlamaCudaModel::load_decoder(**store, c.text, layout->text, o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::vector<int64_t> ids64 = golden.i64("input_ids"), greedy = golden.i64("greedy_ids");
  const std::vector<int32_t> prompt(ids64.begin(), ids64.end());
  std::vector<int32_t> rows;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] == c.image_token_index) rows.push_back(static_cast<int32_t>(i));
  }
  ASSERT_EQ(static_cast<int64_t>(rows.size()), feature_rows);
  const std::vector<float> prompt_logits = golden.f32("prompt_logits"), step_logits = golden.f32("step_logits");
  OneSequence seq{**model};
  auto first = seq.step(prompt, /*all_rows=*/true, rows, features.data());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  float worst = 0;
  for (size_t r = 0; r < prompt.size(); ++r) {
    worst = std::max(worst, row_error(first->data() + r * vocab, prompt_logits.data() + r * vocab, vocab));
  }
  std::vector<float> last(first->end() - vocab, first->end());
  int agree = 0;
  for (size_t s = 0; s < greedy.size(); ++s) {
    worst = std::max(worst, row_error(last.data(), step_logits.data() + s * vocab, vocab));
    agree += (std::max_element(last.begin(), last.end()) - last.begin()) == greedy[s];
    if (s + 1 == greedy.size()) break;
    auto next = seq.step({static_cast<int32_t>(greedy[s])}, false);
    ASSERT_TRUE(next.ok()) << next.status().to_string();
    last = *next;
  }
  float tolerance = 2e-4f;
  if (dtype == DType::kBF16) {
    const std::vector<float> hf_prompt = golden.f32("bf16_prompt_logits"), hf_steps = golden.f32("bf16_step_logits");
    float hf = 0;
    for (size_t r = 0; r < prompt.size(); ++r) {
      hf = std::max(hf, row_error(hf_prompt.data() + r * vocab, prompt_logits.data() + r * vocab, vocab));
    }
    for (size_t s = 0; s < greedy.size(); ++s) {
      hf = std::max(hf, row_error(hf_steps.data() + s * vocab, step_logits.data() + s * vocab, vocab));
    }
    std::printf("[ llava_cuda ] %-38s HF bf16 max rel error %.2e\n", dir.filename().c_str(), hf);
    tolerance = 2 * hf;
  }
  std::printf("[ llava_cuda ] %-38s %-4s logits max rel error %.2e, greedy %d/%zu\n", dir.filename().c_str(),
              dtype_name(dtype), worst, agree, greedy.size());
  EXPECT_LE(worst, tolerance) << dtype_name(dtype);
  if (dtype == DType::kF32) {
    EXPECT_EQ(agree, static_cast<int>(greedy.size()));
  }
}

TEST(LlavaCuda, TowerProjectorAndDecoderMatchTransformers) {
  MMSERVE_REQUIRE_GPU();
  int variants = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(testing::fixture("llava"))) {
    if (!fs::exists(entry.path() / "golden.json")) continue;
    SCOPED_TRACE(entry.path().filename().string());
    check_variant(entry.path(), DType::kF32);
    check_variant(entry.path(), DType::kBF16);
    ++variants;
  }
  EXPECT_GE(variants, 5);
}

}  // namespace
}  // namespace mmserve::models
