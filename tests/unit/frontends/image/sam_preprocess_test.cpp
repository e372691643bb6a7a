// SAM preprocessing, prompt coordinates and mask post-processing against HF's goldens, plus hand-worked cases.
//
// Goldens: tests/fixtures/sam/<model>/golden.{safetensors,json} from tools/reference/make_sam_fixtures.py
// (SamImageProcessorPil + SamProcessor of transformers 5.17 with Pillow 12): pixel_values of every image, the
// processor's normalised prompt coordinates, and post_process_masks applied to the model's own pred_masks. Each
// test decodes tests/fixtures/images/<image> with decode_rgb (PIL's convert("RGB") rules), loads the model
// folder's preprocessor_config.json and compares: pixels within 1e-5 (PIL-exact resize: in practice equal),
// coordinates exactly (float64), masks >= 99.9% equal pixels (the figure is printed).
#include "frontends/image/sam_preprocess.h"
#include "kernels/mask_resize/mask_resize.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_config.h"
#include "core/safetensors.h"
#include "test_paths.h"

namespace mmserve::image {
namespace {

const char* const kModels[] = {"sam-tiny-win-f32", "sam-tiny-glob-f16"};

std::string fixture(const std::string& relative) {
  return std::string(MMSERVE_FIXTURES_DIR) + "/" + relative;
}

// One model's golden.safetensors and golden.json.
struct Golden {
  std::unique_ptr<SafetensorsFile> tensors;
  nlohmann::json meta;

  static Golden load(const std::string& model) {
    Golden g;
    StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::open(fixture("sam/" + model + "/golden.safetensors"));
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    if (file.ok()) g.tensors = std::move(*file);
    StatusOr<nlohmann::json> json = read_json_file(fixture("sam/" + model + "/golden.json"));
    EXPECT_TRUE(json.ok()) << json.status().to_string();
    if (json.ok()) g.meta = std::move(*json);
    return g;
  }
  bool ok() const { return tensors != nullptr && meta.is_object(); }
  std::vector<float> f32(const std::string& name) const {
    const TensorInfo* t = tensors->find(name);
    EXPECT_TRUE(t != nullptr && t->dtype == DType::kF32) << name;
    if (t == nullptr || t->dtype != DType::kF32) return {};
    std::vector<float> out(static_cast<size_t>(t->numel()));
    std::memcpy(out.data(), t->data, t->nbytes);
    return out;
  }
  // np.packbits (big-endian bit order) unpacked to `count` 0/1 bytes.
  std::vector<uint8_t> unpacked(const std::string& name, size_t count) const {
    const TensorInfo* t = tensors->find(name);
    EXPECT_TRUE(t != nullptr && t->nbytes == (count + 7) / 8) << name;
    std::vector<uint8_t> out(count, 0);
    if (t == nullptr || t->nbytes != (count + 7) / 8) return out;
    for (size_t i = 0; i < count; ++i) out[i] = (t->data[i / 8] >> (7 - i % 8)) & 1;
    return out;
  }
};

// Decodes the image and runs the model folder's preprocessing.
StatusOr<SamImageInput> preprocess_fixture(const std::string& model, const std::string& image) {
  ASSIGN_OR_RETURN(SamPreprocessConfig config, load_sam_preprocess_config(fixture("sam/" + model)));
  ASSIGN_OR_RETURN(RgbImage decoded, decode_rgb_file(fixture("images/" + image)));
  return preprocess_sam(decoded, config);
}

// HF's _get_preprocess_shape: int(side * longest_edge / max(h, w) + 0.5), worked out by hand.
TEST(SamResizedSize, RoundsLikeHf) {
  EXPECT_EQ(sam_resized_size(640, 427, 128), (std::array<int, 2>{128, 85}));  // 427 * 0.2 = 85.4
  EXPECT_EQ(sam_resized_size(23, 17, 128), (std::array<int, 2>{128, 95}));    // 94.61: rounded, not truncated
  EXPECT_EQ(sam_resized_size(90, 120, 128), (std::array<int, 2>{96, 128}));   // 96 exactly
  EXPECT_EQ(sam_resized_size(1920, 1080, 1024), (std::array<int, 2>{1024, 576}));
  EXPECT_EQ(sam_resized_size(500, 333, 1024), (std::array<int, 2>{1024, 682}));  // 681.98
  EXPECT_EQ(sam_resized_size(2, 1, 5), (std::array<int, 2>{5, 3}));              // 2.5 + 0.5 = 3: halves go up
  EXPECT_EQ(sam_resized_size(128, 128, 128), (std::array<int, 2>{128, 128}));
  EXPECT_EQ(sam_resized_size(1, 5000, 1024), (std::array<int, 2>{0, 1024}));  // 0.2 + 0.5: preprocess refuses
}

TEST(SamPreprocess, PixelsMatchHfForEveryImageAndModel) {
  size_t total = 0, identical = 0;
  double worst = 0.0;
  for (const char* model : kModels) {
    const Golden golden = Golden::load(model);
    ASSERT_TRUE(golden.ok());
    ASSERT_GE(golden.meta["images"].size(), 5u);
    for (const auto& item : golden.meta["images"].items()) {
      const std::string image = item.key();
      const nlohmann::json& info = item.value();
      StatusOr<SamImageInput> ours = preprocess_fixture(model, image);
      ASSERT_TRUE(ours.ok()) << image << ": " << ours.status().to_string();
      EXPECT_EQ(ours->original_height, info["original_size"][0].get<int>()) << image;
      EXPECT_EQ(ours->original_width, info["original_size"][1].get<int>()) << image;
      EXPECT_EQ(ours->reshaped_height, info["reshaped_input_size"][0].get<int>()) << image;
      EXPECT_EQ(ours->reshaped_width, info["reshaped_input_size"][1].get<int>()) << image;
      EXPECT_EQ(ours->pad_height, 128);
      EXPECT_EQ(ours->pad_width, 128);
      const std::vector<float> want = golden.f32("image/" + image + "/pixel_values");
      ASSERT_EQ(want.size(), ours->pixels.size()) << image;
      double max_diff = 0.0;
      size_t same = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double d = std::fabs(static_cast<double>(want[i]) - ours->pixels[i]);
        max_diff = std::max(max_diff, d);
        same += d == 0.0;
      }
      EXPECT_LE(max_diff, 1e-5) << model << " " << image;
      total += want.size();
      identical += same;
      worst = std::max(worst, max_diff);
    }
  }
  std::printf("SAM pixels: %zu of %zu values bit-identical to HF's (%.4f%%), max |diff| %.3g\n", identical, total,
              100.0 * identical / total, worst);
}

TEST(SamPreprocess, PadsWithZerosAfterNormalising) {
  RgbImage image{4, 2, std::vector<uint8_t>(4 * 2 * 3, 0)};  // black: normalised to -mean/std, never 0
  SamPreprocessConfig config;
  config.longest_edge = 8;
  config.pad_height = 8;
  config.pad_width = 10;
  StatusOr<SamImageInput> out = preprocess_sam(image, config);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->reshaped_width, 8);
  EXPECT_EQ(out->reshaped_height, 4);
  ASSERT_EQ(out->pixels.size(), 3u * 8 * 10);
  for (int c = 0; c < 3; ++c) {
    const float black = (0.0f - config.image_mean[c]) / config.image_std[c];
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 10; ++x) {
        const float v = out->pixels[(static_cast<size_t>(c) * 8 + y) * 10 + x];
        EXPECT_EQ(v, (y < 4 && x < 8) ? black : 0.0f) << c << "," << y << "," << x;
      }
    }
  }
  config.do_pad = false;  // the output is then the resized size
  out = preprocess_sam(image, config);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->pad_height, 4);
  EXPECT_EQ(out->pad_width, 8);
  EXPECT_EQ(out->pixels.size(), 3u * 4 * 8);
}

TEST(SamPreprocess, RejectsImagesItCannotPad) {
  SamPreprocessConfig config;
  config.do_resize = false;
  config.pad_height = config.pad_width = 16;
  RgbImage big{17, 3, std::vector<uint8_t>(17 * 3 * 3, 9)};
  StatusOr<SamImageInput> out = preprocess_sam(big, config);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("pad_size"), std::string::npos) << out.status().message();
  EXPECT_EQ(preprocess_sam(RgbImage{}, config).status().code(), StatusCode::kInvalidArgument);
  RgbImage inconsistent{4, 4, std::vector<uint8_t>(5, 0)};
  EXPECT_EQ(preprocess_sam(inconsistent, config).status().code(), StatusCode::kInvalidArgument);
  config.do_resize = true;
  config.longest_edge = 1024;
  config.pad_height = config.pad_width = 1024;
  RgbImage strip{1, 5000, std::vector<uint8_t>(5000 * 3, 1)};  // resizes to 0 x 1024
  EXPECT_EQ(preprocess_sam(strip, config).status().code(), StatusCode::kInvalidArgument);
}

// The processor's normalised coordinates (what the model sees), exactly: points in float64, boxes through
// float32 first (camera_box's 100.3 becomes 25.075000762939453, not 25.075).
TEST(SamCoords, MatchHfProcessorExactly) {
  int checked = 0;
  for (const char* model : kModels) {
    const Golden golden = Golden::load(model);
    ASSERT_TRUE(golden.ok());
    for (const nlohmann::json& c : golden.meta["cases"]) {
      const std::string image = c["image"];
      const nlohmann::json& info = golden.meta["images"][image];
      SamImageInput geom;
      geom.original_height = info["original_size"][0];
      geom.original_width = info["original_size"][1];
      geom.reshaped_height = info["reshaped_input_size"][0];
      geom.reshaped_width = info["reshaped_input_size"][1];
      if (c.contains("input_points")) {
        const nlohmann::json& given = c["input_points"][0];
        const nlohmann::json& want = c["model_inputs"]["input_points"]["values"][0][0];
        ASSERT_EQ(given.size(), want.size());
        for (size_t i = 0; i < given.size(); ++i) {
          const std::array<double, 2> p = normalize_sam_point(given[i][0], given[i][1], geom);
          EXPECT_EQ(p[0], want[i][0].get<double>()) << c["name"] << " point " << i;
          EXPECT_EQ(p[1], want[i][1].get<double>()) << c["name"] << " point " << i;
          ++checked;
        }
      }
      if (c.contains("input_boxes")) {
        const nlohmann::json& given = c["input_boxes"][0][0];
        const nlohmann::json& want = c["model_inputs"]["input_boxes"]["values"][0][0];
        const std::array<double, 4> b = normalize_sam_box({given[0], given[1], given[2], given[3]}, geom);
        for (int j = 0; j < 4; ++j) EXPECT_EQ(b[j], want[j].get<double>()) << c["name"] << " box " << j;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 20);
}

// post_process_masks for one prompt: kernels/mask_resize's CPU twin shaped by the image's geometry, as the SAM
// executor calls it (engine/sam_executor.cpp).
std::vector<uint8_t> postprocess_sam_masks(const float* low_res, int k, int h, int w, const SamImageInput& geom,
                                           float threshold = 0.0f) {
  const kernels::MaskResizeShape shape{k, h, w, geom.pad_height, geom.pad_width, geom.reshaped_height,
                                       geom.reshaped_width, geom.original_height, geom.original_width};
  std::vector<uint8_t> out(static_cast<size_t>(k) * geom.original_height * geom.original_width);
  kernels::mask_resize_threshold(low_res, shape, threshold, out.data());
  return out;
}

// HF's post_process_masks on HF's own pred_masks: the same binary masks at the original size.
TEST(SamPostprocess, MatchesHfPostProcessMasks) {
  size_t total = 0, equal = 0;
  for (const char* model : kModels) {
    const Golden golden = Golden::load(model);
    ASSERT_TRUE(golden.ok());
    for (const nlohmann::json& c : golden.meta["cases"]) {
      const std::string name = c["name"], image = c["image"];
      StatusOr<SamImageInput> geom = preprocess_fixture(model, image);
      ASSERT_TRUE(geom.ok()) << geom.status().to_string();
      const TensorInfo* pred = golden.tensors->find("case/" + name + "/pred_masks");
      ASSERT_NE(pred, nullptr) << name;
      ASSERT_EQ(pred->shape.size(), 5u);
      const int k = static_cast<int>(pred->shape[2]), h = static_cast<int>(pred->shape[3]);
      const int w = static_cast<int>(pred->shape[4]);
      const std::vector<int64_t> shape = c["masks_shape"].get<std::vector<int64_t>>();
      ASSERT_EQ(shape, (std::vector<int64_t>{1, k, geom->original_height, geom->original_width})) << name;
      const std::vector<float> logits = golden.f32("case/" + name + "/pred_masks");
      const std::vector<uint8_t> ours = postprocess_sam_masks(logits.data(), k, h, w, *geom);
      const std::vector<uint8_t> want = golden.unpacked("case/" + name + "/masks_packbits", ours.size());
      size_t same = 0;
      for (size_t i = 0; i < ours.size(); ++i) same += ours[i] == want[i];
      EXPECT_GE(same * 1000, ours.size() * 999) << model << " " << name << ": " << same << " of " << ours.size();
      if (same != ours.size()) {
        std::printf("  %s %s: %zu of %zu mask pixels differ\n", model, name.c_str(), ours.size() - same, ours.size());
      }
      total += ours.size();
      equal += same;
    }
  }
  std::printf("SAM masks: %zu of %zu post-processed pixels equal to HF's (%.5f%%)\n", equal, total,
              100.0 * equal / total);
}

// Hand-worked torch bilinear (align_corners=False): 2 -> 4 samples at src = 0.5 * (dst + 0.5) - 0.5 =
// -0.25 (clamped to 0), 0.25, 0.75, 1.25 (i0 = 1 = last, so both taps are the last sample): a, 0.75a + 0.25b,
// 0.25a + 0.75b, b. With a = -1, b = 3 the second value is exactly 0, which `> 0` must not count.
TEST(SamPostprocess, FollowsTorchBilinearSampling) {
  SamImageInput geom;
  geom.pad_height = geom.pad_width = 4;
  geom.reshaped_height = geom.reshaped_width = 4;
  geom.original_height = geom.original_width = 4;  // second pass is the identity
  const float low[4] = {-1, 3, -1, 3};             // 2x2, every row (-1, 3)
  auto row_at = [&](float threshold) {
    const std::vector<uint8_t> m = postprocess_sam_masks(low, 1, 2, 2, geom, threshold);
    std::vector<int> row(m.begin(), m.begin() + 4);
    for (int y = 1; y < 4; ++y) EXPECT_TRUE(std::equal(m.begin(), m.begin() + 4, m.begin() + 4 * y));
    return row;
  };
  EXPECT_EQ(row_at(0.0f), (std::vector<int>{0, 0, 1, 1}));  // -1, 0, 2, 3
  EXPECT_EQ(row_at(-0.5f), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(row_at(2.5f), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(row_at(-1.0f), (std::vector<int>{0, 1, 1, 1}));  // -1 > -1 is false
  // Crop then resize: pad 4 wide, only 2 columns kept (values -1, 0), resized to 3 wide: scale 2/3, src =
  // -0.1667 -> 0, 0.5, 1.1667 -> i0 = 1: -1, -0.5, 0.
  geom.reshaped_width = 2;
  geom.original_width = 3;
  const std::vector<uint8_t> m = postprocess_sam_masks(low, 1, 2, 2, geom, -0.75f);
  EXPECT_EQ(std::vector<int>(m.begin(), m.begin() + 3), (std::vector<int>{0, 1, 1}));
}

class SamConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("mmserve_sam_cfg_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  StatusOr<SamPreprocessConfig> load(const std::string& json) {
    std::ofstream(dir_ / "preprocessor_config.json") << json;
    return load_sam_preprocess_config(dir_.string());
  }
  std::filesystem::path dir_;
};

TEST_F(SamConfigTest, FixtureAndDefaults) {
  StatusOr<SamPreprocessConfig> fx = load_sam_preprocess_config(fixture("sam/sam-tiny-win-f32"));
  ASSERT_TRUE(fx.ok()) << fx.status().to_string();
  EXPECT_EQ(fx->longest_edge, 128);
  EXPECT_EQ(fx->pad_height, 128);
  EXPECT_EQ(fx->pad_width, 128);
  EXPECT_EQ(fx->resample, 2);
  EXPECT_EQ(fx->image_std[1], 0.224f);
  StatusOr<SamPreprocessConfig> empty = load("{}");  // SamImageProcessorPil's defaults
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->longest_edge, 1024);
  EXPECT_EQ(empty->pad_height, 1024);
  EXPECT_EQ(empty->image_mean, (std::array<float, 3>{0.485f, 0.456f, 0.406f}));
  EXPECT_TRUE(empty->do_resize && empty->do_rescale && empty->do_normalize && empty->do_pad);
  StatusOr<SamPreprocessConfig> ints = load(R"({"size": 512, "pad_size": 640, "do_pad": false, "resample": 3,
      "image_mean": 0.5, "image_std": [0.5, 0.25, 2], "rescale_factor": 0.5, "processor_class": "SamProcessor"})");
  ASSERT_TRUE(ints.ok()) << ints.status().to_string();
  EXPECT_EQ(ints->longest_edge, 512);
  EXPECT_EQ(ints->pad_height, 640);
  EXPECT_EQ(ints->pad_width, 640);
  EXPECT_FALSE(ints->do_pad);
  EXPECT_EQ(ints->resample, 3);
  EXPECT_EQ(ints->image_mean, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(ints->rescale_factor, 0.5);
}

TEST_F(SamConfigTest, ErrorsNameTheFileAndKey) {
  const struct {
    const char* json;
    const char* key;
    StatusCode code;
  } cases[] = {
      {R"({"size": {"shortest_edge": 1024}})", "longest_edge", StatusCode::kInvalidArgument},
      {R"({"size": {"longest_edge": "1024"}})", "longest_edge", StatusCode::kInvalidArgument},
      {R"({"size": 0})", "size", StatusCode::kInvalidArgument},
      {R"({"pad_size": {"height": 1024}})", "width", StatusCode::kInvalidArgument},
      {R"({"pad_size": [1024, 1024]})", "pad_size", StatusCode::kInvalidArgument},
      {R"({"do_pad": "yes"})", "do_pad", StatusCode::kInvalidArgument},
      {R"({"rescale_factor": 0})", "rescale_factor", StatusCode::kInvalidArgument},
      {R"({"image_mean": [0.5]})", "image_mean", StatusCode::kInvalidArgument},
      {R"({"image_std": [0.5, 0, 0.5]})", "image_std", StatusCode::kInvalidArgument},
      {R"({"resample": 0})", "resample", StatusCode::kUnimplemented},
      {R"({"do_center_crop": true})", "do_center_crop", StatusCode::kUnimplemented},
      {R"([1])", "preprocessor_config.json", StatusCode::kInvalidArgument},
  };
  for (const auto& c : cases) {
    StatusOr<SamPreprocessConfig> config = load(c.json);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), c.code) << c.json << ": " << config.status().to_string();
    EXPECT_NE(config.status().message().find(c.key), std::string::npos) << config.status().message();
    EXPECT_NE(config.status().message().find("preprocessor_config.json"), std::string::npos);
  }
  StatusOr<SamPreprocessConfig> missing = load_sam_preprocess_config((dir_ / "nope").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// What transformers 5's SamProcessor.save_pretrained writes (seen on the GPU host): only processor_config.json.
TEST_F(SamConfigTest, ProcessorConfigFallback) {
  std::ofstream(dir_ / "processor_config.json") << R"({"image_processor": {"size": {"longest_edge": 128},
      "pad_size": {"height": 128, "width": 96}, "resample": 2}, "processor_class": "SamProcessor"})";
  StatusOr<SamPreprocessConfig> config = load_sam_preprocess_config(dir_.string());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->longest_edge, 128);
  EXPECT_EQ(config->pad_width, 96);
  std::ofstream(dir_ / "processor_config.json") << R"({"image_processor": {"size": {"height": 128}}})";
  config = load_sam_preprocess_config(dir_.string());
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("processor_config.json: image_processor: size"), std::string::npos)
      << config.status().message();
  std::ofstream(dir_ / "processor_config.json") << R"({"processor_class": "SamProcessor"})";
  EXPECT_EQ(load_sam_preprocess_config(dir_.string()).status().code(), StatusCode::kNotFound);
  // preprocessor_config.json wins when both exist.
  std::ofstream(dir_ / "preprocessor_config.json") << R"({"size": 64})";
  config = load_sam_preprocess_config(dir_.string());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->longest_edge, 64);
}

}  // namespace
}  // namespace mmserve::image
