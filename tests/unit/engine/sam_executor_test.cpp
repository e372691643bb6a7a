// The SAM family end to end below the server: SamInputs (the real image files, prompts in original pixels as HF's
// SamProcessor takes them) and SamExecutor (encoder, embedding cache, prompt decoder, post-processing) against
// HF's goldens of tests/fixtures/sam (tools/reference/make_sam_fixtures.py): IoU scores within 1e-4 relative and
// post-processed masks >= 99.9% equal pixels (decoded from HF's COCO RLE strings), for both tiny models and every
// prompt case; the cache (a second prompt on the same image skips the encoder, by image_id too); prompt errors.
#include "engine/sam_executor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../../conformance/golden.h"
#include "engine/sam_inputs.h"
#include "frontends/image/mask_rle.h"
#include "models/sam/sam_demo.h"

namespace mmserve::engine {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

InputItem tensor(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
  InputItem t;
  t.kind = InputKind::kTensor;
  t.name = name;
  t.shape = std::move(shape);
  t.values = std::move(values);
  return t;
}

struct Family {
  std::unique_ptr<SamExecutor> executor;
  std::unique_ptr<SamInputs> inputs;
};

Family load(const std::string& dir, int64_t cache_bytes = int64_t{64} << 20) {
  Family f;
  SamOptions sam;
  sam.embedding_cache_bytes = cache_bytes;
  auto executor = SamExecutor::create(dir, {}, sam);
  EXPECT_TRUE(executor.ok()) << executor.status().to_string();
  if (!executor.ok()) return f;
  auto inputs = SamInputs::create(dir, **executor, {});
  EXPECT_TRUE(inputs.ok()) << inputs.status().to_string();
  f.executor = std::move(*executor);
  if (inputs.ok()) f.inputs = std::move(*inputs);
  return f;
}

// Prepares and runs one request; returns its output or the first error.
StatusOr<std::shared_ptr<const ModelOutput>> segment(Family& f, std::vector<InputItem> items, const SamParams& p) {
  ASSIGN_OR_RETURN(Prepared prepared, f.inputs->prepare(items, &p));
  std::optional<StatusOr<std::shared_ptr<const ModelOutput>>> result;
  BatchHooks hooks;
  hooks.finish = [&](size_t, StatusOr<std::shared_ptr<const ModelOutput>> out, double) { result = std::move(out); };
  std::vector<BatchItem> batch(1);
  batch[0].input = prepared.input.get();
  f.executor->run(batch, hooks);
  if (!result) return internal_error("not finished");
  return std::move(*result);
}

// The request of one golden case, as HF's processor received it.
std::vector<InputItem> case_inputs(const nlohmann::json& c, const testing::Golden& golden, bool with_image = true) {
  std::vector<InputItem> items;
  if (with_image) {
    InputItem image;
    image.kind = InputKind::kImageBytes;
    image.image_bytes = read_file(testing::fixture("images/" + c["image"].get<std::string>()));
    items.push_back(std::move(image));
  }
  if (c.contains("input_points")) {
    std::vector<float> xy, labels;
    for (const auto& p : c["input_points"][0]) {
      xy.push_back(p[0].get<float>());
      xy.push_back(p[1].get<float>());
    }
    for (const auto& l : c["input_labels"][0]) labels.push_back(l.get<float>());
    const int64_t n = static_cast<int64_t>(labels.size());
    items.push_back(tensor("point_coords", {n, 2}, xy));
    items.push_back(tensor("point_labels", {n}, labels));
  }
  if (c.contains("input_boxes")) {
    std::vector<float> box;
    for (const auto& v : c["input_boxes"][0][0]) box.push_back(v.get<float>());
    items.push_back(tensor("boxes", {1, 4}, box));
  }
  if (c["has_input_masks"].get<bool>()) {
    const std::string name = "case/" + c["name"].get<std::string>() + "/input_masks";
    const std::vector<int64_t> shape = golden.shape(name);
    items.push_back(tensor("mask_input", {1, shape[2], shape[3]}, golden.f32(name)));
  }
  return items;
}

class SamFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(SamFamily, MatchesHfOnEveryPromptCase) {
  const std::string dir = testing::fixture(std::string("sam/") + GetParam());
  Family f = load(dir);
  ASSERT_TRUE(f.inputs);
  testing::Golden golden(dir + "/golden.safetensors");
  std::ifstream json_file(dir + "/golden.json");
  const nlohmann::json g = nlohmann::json::parse(json_file);
  for (const nlohmann::json& c : g["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    SamParams params;
    params.multimask_output = c["multimask_output"].get<bool>();
    auto out = segment(f, case_inputs(c, golden), params);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    const auto* sam = output_as<SamOutput>(*out);
    ASSERT_NE(sam, nullptr);
    const std::vector<float> iou = golden.f32("case/" + name + "/iou_scores");
    ASSERT_EQ(sam->iou_scores.size(), iou.size());
    double scale = 0, worst = 0;
    for (float v : iou) scale = std::max(scale, std::abs(static_cast<double>(v)));
    for (size_t k = 0; k < iou.size(); ++k) worst = std::max(worst, std::abs(sam->iou_scores[k] - iou[k]) / scale);
    EXPECT_LE(worst, 1e-4) << "IoU relative error";
    const nlohmann::json& masks_shape = c["masks_shape"];
    ASSERT_EQ(sam->count, masks_shape[1].get<int64_t>());
    ASSERT_EQ(sam->height, masks_shape[2].get<int64_t>());
    ASSERT_EQ(sam->width, masks_shape[3].get<int64_t>());
    int64_t equal = 0, total = 0;
    for (int64_t k = 0; k < sam->count; ++k) {
      auto hf = image::decode_coco_rle(c["coco_rle"][k]["counts"].get<std::string>(), static_cast<int>(sam->height),
                                       static_cast<int>(sam->width));
      ASSERT_TRUE(hf.ok()) << hf.status().to_string();
      const uint8_t* ours = sam->masks.data() + k * sam->height * sam->width;
      for (int64_t i = 0; i < sam->height * sam->width; ++i)
        equal += ((*hf)[static_cast<size_t>(i)] != 0) == (ours[i] != 0);
      total += sam->height * sam->width;
    }
    const double agreement = static_cast<double>(equal) / static_cast<double>(total);
    std::printf("  %s %s: IoU rel err %.2e, masks %.5f%% equal pixels\n", GetParam(), name.c_str(), worst,
                100.0 * agreement);
    EXPECT_GE(agreement, 0.999);
  }
}

TEST_P(SamFamily, ASecondPromptOnTheSameImageSkipsTheEncoder) {
  const std::string dir = testing::fixture(std::string("sam/") + GetParam());
  Family f = load(dir);
  ASSERT_TRUE(f.inputs);
  testing::Golden golden(dir + "/golden.safetensors");
  std::ifstream json_file(dir + "/golden.json");
  const nlohmann::json g = nlohmann::json::parse(json_file);
  const nlohmann::json& first = g["cases"][0];   // rocket_point
  const nlohmann::json& second = g["cases"][1];  // rocket_points_neg, the same image
  ASSERT_EQ(first["image"], second["image"]);
  SamParams multi;
  auto a = segment(f, case_inputs(first, golden), multi);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const auto* sa = output_as<SamOutput>(*a);
  EXPECT_FALSE(sa->embedding_cached);
  EXPECT_EQ(f.executor->caches()[0].misses, 1);
  // By image_id alone: no image bytes at all.
  SamParams by_id;
  by_id.multimask_output = second["multimask_output"].get<bool>();
  by_id.image_id = sa->image_id;
  auto b = segment(f, case_inputs(second, golden, /*with_image=*/false), by_id);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const auto* sb = output_as<SamOutput>(*b);
  EXPECT_TRUE(sb->embedding_cached);
  EXPECT_EQ(f.executor->caches()[0].hits, 1);
  const std::vector<float> iou = golden.f32("case/" + second["name"].get<std::string>() + "/iou_scores");
  ASSERT_EQ(sb->iou_scores.size(), iou.size());
  for (size_t k = 0; k < iou.size(); ++k) EXPECT_NEAR(sb->iou_scores[k], iou[k], 1e-4 * std::abs(iou[k]) + 1e-6);
  // With the image again: the same id, a hit.
  auto c = segment(f, case_inputs(second, golden), by_id.image_id.empty() ? multi : SamParams{});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(output_as<SamOutput>(*c)->image_id, sa->image_id);
  EXPECT_TRUE(output_as<SamOutput>(*c)->embedding_cached);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SamFamily, ::testing::Values("sam-tiny-win-f32", "sam-tiny-glob-f16"));

TEST(SamInputs, BadPromptsAreClearErrors) {
  const std::string dir = testing::fixture("sam/sam-tiny-win-f32");
  Family f = load(dir);
  ASSERT_TRUE(f.inputs);
  const std::string rocket = read_file(testing::fixture("images/rocket.jpg"));  // 640 x 427
  auto with_image = [&](std::vector<InputItem> rest) {
    InputItem image;
    image.kind = InputKind::kImageBytes;
    image.image_bytes = rocket;
    rest.insert(rest.begin(), std::move(image));
    return rest;
  };
  auto error = [&](std::vector<InputItem> items, const SamParams& p = {}) {
    auto r = f.inputs->prepare(items, &p);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(error(with_image({})).find("the prompt is empty"), std::string::npos);
  EXPECT_NE(error(with_image({tensor("point_coords", {1, 2}, {641, 10})})).find("outside the 640x427 image"),
            std::string::npos);
  EXPECT_NE(error(with_image({tensor("point_coords", {1, 2}, {10, -1})})).find("outside"), std::string::npos);
  EXPECT_NE(error(with_image({tensor("point_coords", {1, 3}, {1, 2, 3})})).find("shape must be [N, 2]"),
            std::string::npos);
  EXPECT_NE(error(with_image({tensor("point_coords", {1, 2}, {1, 2}), tensor("point_labels", {2}, {1, 1})}))
                .find("one per point"),
            std::string::npos);
  EXPECT_NE(error(with_image({tensor("point_coords", {1, 2}, {1, 2}), tensor("point_labels", {1}, {2})}))
                .find("must be 1 (foreground)"),
            std::string::npos);
  EXPECT_NE(error(with_image({tensor("boxes", {2, 4}, {0, 0, 5, 5, 0, 0, 6, 6})})).find("M <= 1"), std::string::npos);
  EXPECT_NE(error(with_image({tensor("boxes", {1, 4}, {10, 10, 5, 5})})).find("x0 <= x1"), std::string::npos);
  EXPECT_NE(error(with_image({tensor("point_coords", {1, 2}, {NAN, 2})})).find("not a finite"), std::string::npos);
  EXPECT_NE(error(with_image({tensor("mask_input", {1, 8, 8}, std::vector<float>(64))})).find("mask_input: shape"),
            std::string::npos);
  EXPECT_NE(error(with_image({tensor("pixel_values", {1}, {0})})).find("not a SAM input"), std::string::npos);
  SamParams unknown;
  unknown.image_id = "0123";
  EXPECT_NE(error({tensor("point_coords", {1, 2}, {1, 2})}, unknown).find("unknown image_id"), std::string::npos);
  EXPECT_NE(error({tensor("point_coords", {1, 2}, {1, 2})}).find("needs an image"), std::string::npos);
  InputItem junk;
  junk.kind = InputKind::kImageBytes;
  junk.image_bytes = "not an image";
  EXPECT_NE(error({junk, tensor("point_coords", {1, 2}, {1, 2})}).find("image:"), std::string::npos);
}

TEST(EmbeddingCache, EvictsLeastRecentlyUsedUnderTheBudget) {
  EmbeddingCache cache("test", 3 * 4 * 10);  // room for three 10-float entries
  auto v = [](float x) { return std::make_shared<const std::vector<float>>(10, x); };
  cache.insert("a", v(1));
  cache.insert("b", v(2));
  cache.insert("c", v(3));
  ASSERT_NE(cache.find("a"), nullptr);  // a is now the most recent
  cache.insert("d", v(4));              // evicts b
  EXPECT_EQ(cache.find("b"), nullptr);
  EXPECT_EQ((*cache.find("a"))[0], 1.0f);
  EXPECT_TRUE(cache.contains("c") && cache.contains("d"));
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.bytes, 120);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 1);
  cache.insert("huge", std::make_shared<const std::vector<float>>(100, 0.0f));  // above the whole budget
  EXPECT_FALSE(cache.contains("huge"));
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_NE(content_hash("abc"), content_hash("abd"));
  EXPECT_EQ(content_hash("abc").size(), 32u);
}

}  // namespace
}  // namespace mmserve::engine

namespace mmserve::engine {
namespace {

// The built-in demo SAM (`make serve`'s demo-sam): it loads through the same checks as a downloaded model, its
// bytes do not depend on the run, and a click gives three masks of the image's size.
TEST(SamDemo, LoadsAndSegments) {
  const std::string dir = ::testing::TempDir() + "/mmserve_demo_sam";
  ASSERT_TRUE(models::write_demo_sam(dir, /*overwrite=*/true).ok());
  const std::string first = read_file(dir + "/model.safetensors");
  ASSERT_TRUE(models::write_demo_sam(dir, /*overwrite=*/true).ok());
  EXPECT_EQ(read_file(dir + "/model.safetensors"), first) << "the demo weights must be deterministic";
  EXPECT_FALSE(models::write_demo_sam(dir).ok()) << "an existing directory needs overwrite";
  Family f = load(dir);
  ASSERT_TRUE(f.inputs);
  ASSERT_TRUE(f.executor->warm().ok());
  InputItem image;
  image.kind = InputKind::kImageBytes;
  image.image_bytes = read_file(testing::fixture("images/rocket.jpg"));
  auto out = segment(f, {image, tensor("point_coords", {1, 2}, {400, 180})}, SamParams{});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const auto* sam = output_as<SamOutput>(*out);
  ASSERT_NE(sam, nullptr);
  EXPECT_EQ(sam->count, 3);
  EXPECT_EQ(sam->height, 427);
  EXPECT_EQ(sam->width, 640);
}

}  // namespace
}  // namespace mmserve::engine
