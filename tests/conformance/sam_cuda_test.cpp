// SAM on the GPU against HF transformers' goldens (the fixtures and goldens of sam_model_test.cpp:
// tools/reference/make_sam_fixtures.py, HF's float32 forward), in every encoder dtype:
//   f32   the precise path: 1e-4 relative to each tensor's max |value| (the CPU tolerance) everywhere;
//   f16, bf16: the flash-attention rule when HF's own forward in that precision is at hand (env
//         MMSERVE_SAM_LOWP_REF_DIR holding <fixture>_<dtype>.safetensors from `bench/hf_sam_gpu.py --reference`, which
//         the GPU check makes): our error against the f32 golden <= 2x HF's (floor 1e-4). The fixtures' goldens hold
//         no such forward, so without it: image embeddings 1e-2 relative, IoU scores 2e-2 absolute, end-to-end mask
//         logits 1e-2 (f16) and 5e-2 (bf16: the logits are products of the 4x-upscaled embedding and the
//         hypernetwork outputs, which amplify the embedding's ~6e-3 bf16 error up to ~4.6e-2 measured; a looser bar
//         than the 1e-2, stated here rather than hidden). The decoder runs in f32 in every dtype, so masks
//         decoded from HF's own embeddings keep the f32 tolerance.
// Also: CUDA graphs give the same numbers as the kernels run eagerly; a batch padded into a larger bucket gives the
// embeddings each image gives alone; prompts whose tokens are padded to a larger decoder bucket (many points, boxes)
// give the CPU model's masks (the CPU model matches HF to ~1e-6; no golden has that many points); prompt errors are
// the CPU path's; and SamExecutor on cuda:0 serves HF's IoU scores through its device embedding cache.
// Every test skips, saying why, where no GPU is visible. Figures: printed per case ("relative error").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/sam_executor.h"
#include "engine/sam_inputs.h"
#include "golden.h"
#include "sam_golden.h"
#include "kernels/testing/cuda_test_util.h"
#include "models/sam/sam.h"
#include "models/sam/sam_cuda.h"

namespace mmserve {
namespace {

using models::SamCudaModel;
using models::SamCudaOptions;
using models::SamMasks;
using models::SamPrompt;
using testing::fixture;
using testing::Golden;
using testing::relative_error;

struct Case {
  const char* dir;
  DType dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.dir << " in " << dtype_name(c.dtype);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::string(info.param.dir) + "_" + dtype_name(info.param.dtype);
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

double embedding_tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-4 : 1e-2;
}

void expect_close(const std::string& what, DType dtype, const std::vector<float>& ours, const std::vector<float>& ref,
                  double tol) {
  ASSERT_EQ(ours.size(), ref.size()) << what;
  const double err = relative_error(ours, ref);
  std::printf("  %-58s %-4s relative error %.2e (tolerance %.0e)\n", what.c_str(), dtype_name(dtype), err, tol);
  EXPECT_LE(err, tol) << what;
}

void expect_iou(const std::string& what, DType dtype, const std::vector<float>& ours, const std::vector<float>& ref,
                double tol) {
  ASSERT_EQ(ours.size(), ref.size()) << what;
  double worst = 0.0;
  for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::fabs(double(ours[i]) - ref[i]));
  const double rel = relative_error(ours, ref);
  std::printf("  %-58s %-4s iou max |diff| %.2e, relative error %.2e (tolerance %.0e)\n", what.c_str(),
              dtype_name(dtype), worst, rel, tol);
  EXPECT_LE(worst, tol) << what;
}

using testing::flatten;
using testing::prompt_of;

std::unique_ptr<SamCudaModel> load_model(const std::string& dir, DType dtype, bool graphs = true,
                                         std::vector<int64_t> buckets = {1, 2, 4, 8}) {
  SamCudaOptions options;
  options.dtype = dtype;
  options.use_graphs = graphs;
  options.buckets = std::move(buckets);
  auto model = SamCudaModel::load(dir, options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(model).value() : nullptr;
}

class SamCudaConformance : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    MMSERVE_REQUIRE_GPU();
    dir_ = fixture(std::string("sam/") + GetParam().dir);
    std::ifstream f(dir_ + "/golden.json");
    ASSERT_TRUE(f) << "missing " << dir_ << "/golden.json";
    meta_ = nlohmann::json::parse(f);
    golden_ = std::make_unique<Golden>(dir_ + "/golden.safetensors");
    ASSERT_TRUE(golden_->ok());
    model_ = load_model(dir_, GetParam().dtype);
    ASSERT_NE(model_, nullptr);
  }

  std::vector<std::string> images() const {
    std::vector<std::string> names;
    for (const auto& [name, info] : meta_["images"].items()) names.push_back(name);
    return names;
  }

  // HF's forward in this (16-bit) dtype, when MMSERVE_SAM_LOWP_REF_DIR has it; null otherwise.
  const Golden* lowp() {
    if (GetParam().dtype == DType::kF32) return nullptr;
    const char* dir = std::getenv("MMSERVE_SAM_LOWP_REF_DIR");
    if (dir == nullptr || lowp_tried_) return lowp_.get();
    lowp_tried_ = true;
    const std::string path = std::string(dir) + "/" + GetParam().dir + "_" +
                             (GetParam().dtype == DType::kBF16 ? "bf16" : "fp16") + ".safetensors";
    if (std::filesystem::exists(path)) lowp_ = std::make_unique<Golden>(path);
    return lowp_.get();
  }
  // The flash-attention rule for `key`: 2x HF's own error in this dtype against the f32 golden (floor 1e-4), or
  // `fallback` without HF's low-precision forward.
  double rule(const std::string& key, double fallback) {
    const Golden* hf = lowp();
    if (hf == nullptr) return fallback;
    const double hf_error = relative_error(hf->f32(key), golden_->f32(key));
    std::printf("  %-58s HF %-4s relative error %.2e -> tolerance %.2e\n", key.c_str(), dtype_name(GetParam().dtype),
                hf_error, std::max(2.0 * hf_error, 1e-4));
    return std::max(2.0 * hf_error, 1e-4);
  }

  // Decodes every prompt case with `decode(image, prompt, multimask)` and compares with HF's outputs; tolerances
  // from `tolerance(golden key, is_iou)`, relative to the tensor's max |value| unless `absolute_iou` (the IoU scores'
  // fallback bound is absolute).
  void check_cases(const std::function<StatusOr<SamMasks>(const std::string&, const SamPrompt&, bool)>& decode,
                   const std::function<double(const std::string&, bool)>& tolerance, bool absolute_iou,
                   const std::string& label) {
    const int64_t side = 4 * model_->config().prompt.image_embedding_size();
    const DType dt = GetParam().dtype;
    for (const auto& c : meta_["cases"]) {
      const std::string name = c["name"], key = "case/" + name + "/";
      SCOPED_TRACE(name);
      std::vector<float> mask;
      if (c["has_input_masks"].get<bool>()) mask = golden_->f32(key + "input_masks");
      const SamPrompt prompt = prompt_of(c, mask.empty() ? nullptr : &mask, side);
      auto masks = decode(c["image"], prompt, c["multimask_output"].get<bool>());
      ASSERT_TRUE(masks.ok()) << masks.status().to_string();
      const std::vector<int64_t> shape = golden_->shape(key + "pred_masks");
      ASSERT_EQ(shape.size(), 5u);
      EXPECT_EQ(masks->count, shape[2]);
      const double iou_tol = tolerance(key + "iou_scores", true);
      if (absolute_iou) {
        expect_iou(label + name + " iou_scores", dt, masks->iou_scores, golden_->f32(key + "iou_scores"), iou_tol);
      } else {
        expect_close(label + name + " iou_scores", dt, masks->iou_scores, golden_->f32(key + "iou_scores"), iou_tol);
      }
      expect_close(label + name + " pred_masks", dt, masks->low_res_logits, golden_->f32(key + "pred_masks"),
                   tolerance(key + "pred_masks", false));
    }
  }

  std::string dir_;
  nlohmann::json meta_;
  std::unique_ptr<Golden> golden_;
  std::unique_ptr<SamCudaModel> model_;
  std::unique_ptr<Golden> lowp_;
  bool lowp_tried_ = false;
};

TEST_P(SamCudaConformance, ImageEmbeddingsFromHfPixels) {
  const int64_t floats = model_->embedding_floats();
  const DType dt = GetParam().dtype;
  std::vector<float> all_pixels, all_ref;
  for (const std::string& image : images()) {
    const std::vector<float> pixels = golden_->f32("image/" + image + "/pixel_values");
    const std::vector<float> ref = golden_->f32("image/" + image + "/image_embeddings");
    ASSERT_EQ(static_cast<int64_t>(ref.size()), floats);
    std::vector<float> ours(floats);
    ASSERT_TRUE(model_->encode_images(pixels.data(), 1, ours.data()).ok());
    const double tol = dt == DType::kF32 ? 1e-4 : rule("image/" + image + "/image_embeddings", 1e-2);
    expect_close("image_embeddings " + image, dt, ours, ref, tol);
    all_pixels.insert(all_pixels.end(), pixels.begin(), pixels.end());
    all_ref.insert(all_ref.end(), ref.begin(), ref.end());
  }
  // All images in one call: 5 images replay the bucket of 8 (3 padding images).
  const int64_t n = static_cast<int64_t>(images().size());
  std::vector<float> ours(n * floats);
  ASSERT_TRUE(model_->encode_images(all_pixels.data(), n, ours.data()).ok());
  expect_close("image_embeddings (all images, one padded bucket)", dt, ours, all_ref, embedding_tolerance(dt));
}

TEST_P(SamCudaConformance, MasksFromHfEmbeddings) {
  // The decoder is f32 in every dtype: HF's own embeddings give f32-exact masks.
  check_cases(
      [&](const std::string& image, const SamPrompt& p, bool multi) {
        const std::vector<float> embedding = golden_->f32("image/" + image + "/image_embeddings");
        return model_->decode(embedding.data(), p, multi);
      },
      [](const std::string&, bool) { return 1e-4; }, false, "");
}

TEST_P(SamCudaConformance, MasksFromOurEmbeddingsOnTheDevice) {
  const DType dt = GetParam().dtype;
  check_cases(
      [&](const std::string& image, const SamPrompt& p, bool multi) -> StatusOr<SamMasks> {
        const std::vector<float> pixels = golden_->f32("image/" + image + "/pixel_values");
        ASSIGN_OR_RETURN(const float* rows, model_->encode_images_on_device(pixels.data(), 1));
        return model_->decode_on_device(rows, p, multi);
      },
      [&](const std::string& key, bool iou) {
        if (dt == DType::kF32) return 1e-4;
        return rule(key, iou ? 2e-2 : dt == DType::kBF16 ? 5e-2 : 1e-2);
      },
      dt != DType::kF32 && lowp() == nullptr, "end-to-end ");
}

TEST_P(SamCudaConformance, GraphsMatchEagerAndBucketsMatchSingleImages) {
  auto eager = load_model(dir_, GetParam().dtype, /*graphs=*/false);
  ASSERT_NE(eager, nullptr);
  const int64_t floats = model_->embedding_floats();
  const std::vector<std::string> names = images();
  std::vector<float> pixels;
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<float> p = golden_->f32("image/" + names[i] + "/pixel_values");
    pixels.insert(pixels.end(), p.begin(), p.end());
  }
  std::vector<float> graphed(3 * floats), eager_out(3 * floats), single(floats);
  ASSERT_TRUE(model_->encode_images(pixels.data(), 3, graphed.data()).ok());
  ASSERT_TRUE(eager->encode_images(pixels.data(), 3, eager_out.data()).ok());
  EXPECT_EQ(relative_error(graphed, eager_out), 0.0) << "graph replay differs from the eager kernels";
  // The third image alone (bucket 1) against its row of the bucket of 4: other GEMM shapes, so rounding only.
  const int64_t image_floats = static_cast<int64_t>(pixels.size()) / 3;
  ASSERT_TRUE(model_->encode_images(pixels.data() + 2 * image_floats, 1, single.data()).ok());
  const std::vector<float> row(graphed.begin() + 2 * floats, graphed.end());
  const double err = relative_error(single, row);
  std::printf("  bucket 4 row vs the image alone: relative error %.2e\n", err);
  EXPECT_LE(err, GetParam().dtype == DType::kF32 ? 1e-5 : 1e-2);
  // The decoder: graphed and eager agree exactly too.
  const std::vector<float> embedding = golden_->f32("image/" + names[0] + "/image_embeddings");
  SamPrompt prompt;
  prompt.points = {{30.0f, 40.0f}, {70.0f, 20.0f}};
  prompt.labels = {1, 0};
  for (int rep = 0; rep < 2; ++rep) {  // the first call captures, the second replays
    auto a = model_->decode(embedding.data(), prompt, true);
    auto b = eager->decode(embedding.data(), prompt, true);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(relative_error(a->low_res_logits, b->low_res_logits), 0.0);
    EXPECT_EQ(a->iou_scores, b->iou_scores);
  }
}

TEST_P(SamCudaConformance, PaddedTokenBucketsMatchTheCpuModel) {
  if (GetParam().dtype != DType::kF32) GTEST_SKIP() << "the decoder is the same f32 code in every dtype";
  auto cpu = models::SamModel::load(dir_);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  const std::vector<float> embedding = golden_->f32("image/" + images()[0] + "/image_embeddings");
  const float size = static_cast<float>(model_->config().prompt.image_size);
  // Token counts 5 + sparse: 7 (bucket 8), 8 (exactly 8), 12, 26 (32), 70 (128), with and without a box.
  for (int points : {1, 2, 3, 7, 20, 64}) {
    for (bool box : {false, true}) {
      SamPrompt p;
      for (int i = 0; i < points; ++i) {
        p.points.push_back({std::fmod(13.7f * i + 3.0f, size), std::fmod(29.3f * i + 11.0f, size)});
        p.labels.push_back(i % 3 == 2 ? -1 : i % 2);
      }
      if (box) p.boxes.push_back({10.0f, 12.0f, size - 20.0f, size - 9.0f});
      auto ours = model_->decode(embedding.data(), p, true);
      auto ref = (*cpu)->decode(embedding.data(), p, true);
      ASSERT_TRUE(ours.ok() && ref.ok());
      const std::string what = std::to_string(points) + " points" + (box ? " + box" : "");
      expect_close("vs CPU model, " + what + " pred_masks", DType::kF32, ours->low_res_logits, ref->low_res_logits,
                   1e-4);
      expect_close("vs CPU model, " + what + " iou_scores", DType::kF32, ours->iou_scores, ref->iou_scores, 1e-4);
    }
  }
  // No prompt at all (HF: no sparse tokens): the output tokens alone.
  auto ours = model_->decode(embedding.data(), SamPrompt{}, false);
  auto ref = (*cpu)->decode(embedding.data(), SamPrompt{}, false);
  ASSERT_TRUE(ours.ok() && ref.ok());
  expect_close("vs CPU model, empty prompt pred_masks", DType::kF32, ours->low_res_logits, ref->low_res_logits, 1e-4);
}

TEST_P(SamCudaConformance, PromptErrorsAreTheCpuPaths) {
  const std::vector<float> embedding = golden_->f32("image/" + images()[0] + "/image_embeddings");
  SamPrompt p;
  p.points = {{10, 10}, {20, 20}};
  p.labels = {1};
  auto r = model_->decode(embedding.data(), p, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  p = SamPrompt{};
  p.boxes = {{1, 2, 30, 40}, {5, 5, 9, 9}};
  EXPECT_EQ(model_->decode(embedding.data(), p, true).status().code(), StatusCode::kInvalidArgument);
  p = SamPrompt{};
  p.points.assign(models::SamModel::kPointsMax + 1, {1.0f, 1.0f});
  p.labels.assign(models::SamModel::kPointsMax + 1, 1);
  EXPECT_EQ(model_->decode(embedding.data(), p, true).status().code(), StatusCode::kTooLarge);
  // The largest prompt the model takes fits its largest token bucket.
  p.points.resize(models::SamModel::kPointsMax);
  p.labels.resize(models::SamModel::kPointsMax);
  p.boxes = {{1, 2, 30, 40}};
  auto big = model_->decode(embedding.data(), p, true);
  EXPECT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(model_->encode_images_on_device(nullptr, 0).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SamCudaConformance,
                         ::testing::Values(Case{"sam-tiny-win-f32", DType::kF32}, Case{"sam-tiny-win-f32", DType::kF16},
                                           Case{"sam-tiny-win-f32", DType::kBF16},
                                           Case{"sam-tiny-glob-f16", DType::kF32},
                                           Case{"sam-tiny-glob-f16", DType::kF16},
                                           Case{"sam-tiny-glob-f16", DType::kBF16}),
                         case_name);

// ---- SamExecutor on cuda:0: HF's IoU scores and post-processed masks through the device embedding cache.

engine::InputItem tensor(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
  engine::InputItem t;
  t.kind = engine::InputKind::kTensor;
  t.name = name;
  t.shape = std::move(shape);
  t.values = std::move(values);
  return t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SamExecutorCuda, ServesHfScoresWithTheEmbeddingsOnTheGpu) {
  MMSERVE_REQUIRE_GPU();
  const std::string dir = fixture("sam/sam-tiny-win-f32");
  std::ifstream f(dir + "/golden.json");
  const nlohmann::json meta = nlohmann::json::parse(f);
  Golden golden(dir + "/golden.safetensors");
  engine::ExecutorOptions options;
  options.device = Device::cuda(0);
  options.dtype = DType::kF32;
  options.batch_size_max = 4;
  engine::SamOptions sam;
  sam.embedding_cache_bytes = int64_t{8} << 20;
  auto executor = engine::SamExecutor::create(dir, options, sam);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  ASSERT_TRUE((*executor)->warm().ok());
  const std::string described = (*executor)->describe();
  std::printf("  describe: %s\n", described.c_str());
  EXPECT_NE(described.find("cuda:0"), std::string::npos);
  EXPECT_NE(described.find("graphs"), std::string::npos);
  EXPECT_GT((*executor)->memory_bytes(), sam.embedding_cache_bytes);
  auto inputs = engine::SamInputs::create(dir, **executor, {});
  ASSERT_TRUE(inputs.ok()) << inputs.status().to_string();
  int runs = 0;
  for (const auto& c : meta["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    std::vector<engine::InputItem> items;
    engine::InputItem image;
    image.kind = engine::InputKind::kImageBytes;
    image.image_bytes = read_file(fixture("images/" + c["image"].get<std::string>()));
    items.push_back(std::move(image));
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
      const std::string mask = "case/" + name + "/input_masks";
      const std::vector<int64_t> shape = golden.shape(mask);
      items.push_back(tensor("mask_input", {1, shape[2], shape[3]}, golden.f32(mask)));
    }
    engine::SamParams params;
    params.multimask_output = c["multimask_output"].get<bool>();
    auto prepared = (*inputs)->prepare(items, &params);
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    std::optional<StatusOr<std::shared_ptr<const engine::ModelOutput>>> result;
    engine::BatchHooks hooks;
    hooks.finish = [&](size_t, StatusOr<std::shared_ptr<const engine::ModelOutput>> out, double) {
      result = std::move(out);
    };
    std::vector<engine::BatchItem> batch(1);
    batch[0].input = prepared->input.get();
    (*executor)->run(batch, hooks);
    ASSERT_TRUE(result.has_value() && result->ok()) << (result ? result->status().to_string() : "no result");
    const auto* out = dynamic_cast<const engine::SamOutput*>(result->value().get());
    ASSERT_NE(out, nullptr);
    expect_iou("executor " + name + " iou_scores", DType::kF32, out->iou_scores,
               golden.f32("case/" + name + "/iou_scores"), 1e-4);
    // The masks, post-processed on the GPU (kernels/mask_resize), against HF's post_process_masks (np.packbits,
    // big-endian bit order): >= 99.9% equal pixels (the rule of issue 13; the f32 logits differ from HF's by
    // rounding, so a pixel on the threshold may flip).
    const std::vector<uint8_t> packed = golden.u8("case/" + name + "/masks_packbits");
    ASSERT_EQ(packed.size(), (out->masks.size() + 7) / 8);
    ASSERT_EQ(out->masks.size(), static_cast<size_t>(out->count * out->height * out->width));
    size_t same = 0;
    for (size_t i = 0; i < out->masks.size(); ++i) same += out->masks[i] == ((packed[i / 8] >> (7 - i % 8)) & 1);
    EXPECT_GE(same * 1000, out->masks.size() * 999) << same << " of " << out->masks.size();
    ++runs;
  }
  EXPECT_GT(runs, 0);
  const std::vector<engine::CacheStats> caches = (*executor)->caches();
  ASSERT_EQ(caches.size(), 1u);
  std::printf("  cache: %lld hits, %lld misses, %lld entries, %lld bytes of %lld\n",
              static_cast<long long>(caches[0].hits), static_cast<long long>(caches[0].misses),
              static_cast<long long>(caches[0].entries), static_cast<long long>(caches[0].bytes),
              static_cast<long long>(caches[0].capacity_bytes));
  EXPECT_GT(caches[0].hits, 0);  // several cases share an image
}

}  // namespace
}  // namespace mmserve
