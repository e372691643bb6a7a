// CLIP preprocessing: HF's resize size rule, HF's numpy centre crop (offsets and padding), the float32
// pixel values, and preprocessor_config.json parsing. Expected numbers are worked out by hand from HF's
// formulas (quoted next to each case), never taken from the code under test.
#include "frontends/image/preprocess.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mmserve::image {
namespace {

// Pixel (x, y) holds (x + 1, y + 1, 7): a crop's source coordinates can be read back from it.
RgbImage coordinate_image(int width, int height) {
  RgbImage image{width, height, {}};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.pixels.push_back(static_cast<uint8_t>(x + 1));  // push_back: GCC 12 warns falsely on insert({...})
      image.pixels.push_back(static_cast<uint8_t>(y + 1));
      image.pixels.push_back(7);
    }
  }
  return image;
}

const uint8_t* pixel(const RgbImage& image, int x, int y) {
  return &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
}

// get_resize_output_image_size(default_to_square=False): short -> size, long -> int(size * long / short).
TEST(ShortestEdgeSize, MatchesHfRule) {
  // 224 * 640 / 427 = 335.74 -> 335.
  EXPECT_EQ(shortest_edge_size(640, 427, 224), (std::array<int, 2>{335, 224}));
  EXPECT_EQ(shortest_edge_size(427, 640, 224), (std::array<int, 2>{224, 335}));
  // 224 * 451 / 300 = 336.75 -> 336 (truncated, not rounded).
  EXPECT_EQ(shortest_edge_size(451, 300, 224), (std::array<int, 2>{336, 224}));
  // 100 * 427 / 56 = 762.5 -> 762.
  EXPECT_EQ(shortest_edge_size(56, 427, 100), (std::array<int, 2>{100, 762}));
  // 224 * 427 / 56 = 1708 exactly.
  EXPECT_EQ(shortest_edge_size(427, 56, 224), (std::array<int, 2>{1708, 224}));
  // Square: width <= height picks the width as the short side; both become 224.
  EXPECT_EQ(shortest_edge_size(300, 300, 224), (std::array<int, 2>{224, 224}));
  // Upscaling: 224 * 15 / 10 = 336.
  EXPECT_EQ(shortest_edge_size(15, 10, 224), (std::array<int, 2>{336, 224}));
  // 224 * 3 / 1 = 672; 1 * 224 / 1.
  EXPECT_EQ(shortest_edge_size(1, 3, 224), (std::array<int, 2>{224, 672}));
}

// numpy center_crop: top = (h - ch) // 2, left = (w - cw) // 2.
TEST(CenterCrop, OffsetsFloorOnOddDifferences) {
  const RgbImage image = coordinate_image(8, 7);
  const RgbImage out = center_crop(image, 5, 4);  // left = 3 // 2 = 1, top = 3 // 2 = 1 (torchvision: 2, 2)
  ASSERT_EQ(out.width, 5);
  ASSERT_EQ(out.height, 4);
  EXPECT_EQ(pixel(out, 0, 0)[0], 1 + 1);
  EXPECT_EQ(pixel(out, 0, 0)[1], 1 + 1);
  EXPECT_EQ(pixel(out, 4, 3)[0], 5 + 1);
  EXPECT_EQ(pixel(out, 4, 3)[1], 4 + 1);
  // Even difference: (8 - 4) // 2 = 2.
  EXPECT_EQ(pixel(center_crop(image, 4, 7), 0, 0)[0], 2 + 1);
  // Same size: unchanged.
  EXPECT_EQ(center_crop(image, 8, 7).pixels, image.pixels);
}

// Smaller than the crop: zero canvas, image at ceil((crop - size) / 2) (numpy path; torchvision puts
// (crop - size) // 2 before, one less on odd differences).
TEST(CenterCrop, PadsWithZerosCeilBefore) {
  const RgbImage image = coordinate_image(2, 3);
  const RgbImage out = center_crop(image, 5, 6);  // left pad = ceil(3 / 2) = 2, top pad = ceil(3 / 2) = 2
  ASSERT_EQ(out.width, 5);
  ASSERT_EQ(out.height, 6);
  for (int y = 0; y < 6; ++y) {
    for (int x = 0; x < 5; ++x) {
      const bool inside = x >= 2 && x < 4 && y >= 2 && y < 5;
      const uint8_t* p = pixel(out, x, y);
      if (inside) {
        EXPECT_EQ(p[0], x - 2 + 1);
        EXPECT_EQ(p[1], y - 2 + 1);
        EXPECT_EQ(p[2], 7);
      } else {
        EXPECT_TRUE(p[0] == 0 && p[1] == 0 && p[2] == 0) << x << "," << y;
      }
    }
  }
  // Even difference 4: 2 before, 2 after.
  const RgbImage even = center_crop(coordinate_image(2, 2), 6, 2);
  EXPECT_EQ(pixel(even, 2, 0)[0], 1);
  EXPECT_EQ(pixel(even, 1, 0)[0], 0);
}

// Larger along x (crop: left = (7 - 4) // 2 = 1), smaller along y (pad: top = ceil((5 - 2) / 2) = 2).
TEST(CenterCrop, MixedCropAndPad) {
  const RgbImage out = center_crop(coordinate_image(7, 2), 4, 5);
  ASSERT_EQ(out.width, 4);
  ASSERT_EQ(out.height, 5);
  EXPECT_EQ(pixel(out, 0, 2)[0], 1 + 1);
  EXPECT_EQ(pixel(out, 0, 2)[1], 0 + 1);
  EXPECT_EQ(pixel(out, 3, 3)[0], 4 + 1);
  EXPECT_EQ(pixel(out, 3, 3)[1], 1 + 1);
  for (int x = 0; x < 4; ++x) {
    EXPECT_EQ(pixel(out, x, 1)[2], 0);
    EXPECT_EQ(pixel(out, x, 4)[2], 0);
  }
}

TEST(ResizeAndCrop, EqualsResizeThenCrop) {
  RgbImage image{61, 43, std::vector<uint8_t>(61 * 43 * 3)};
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const struct {
    int shortest_edge, crop_w, crop_h, resample;
  } cases[] = {{24, 24, 24, 3}, {30, 17, 29, 3}, {20, 40, 25, 2}, {43, 50, 10, 3}, {224, 224, 224, 3}};
  for (const auto& c : cases) {
    ClipPreprocessConfig config;
    config.shortest_edge = c.shortest_edge;
    config.crop_width = c.crop_w;
    config.crop_height = c.crop_h;
    config.resample = c.resample;
    const std::array<int, 2> size = shortest_edge_size(image.width, image.height, c.shortest_edge);
    const RgbImage expected = center_crop(resize_pil(image, size[0], size[1], c.resample), c.crop_w, c.crop_h);
    const RgbImage actual = resize_and_crop(image, config);
    EXPECT_EQ(actual.width, c.crop_w);
    EXPECT_EQ(actual.height, c.crop_h);
    EXPECT_EQ(actual.pixels, expected.pixels) << "shortest_edge " << c.shortest_edge;
  }
  ClipPreprocessConfig no_crop;
  no_crop.shortest_edge = 20;
  no_crop.do_center_crop = false;
  const RgbImage resized = resize_and_crop(image, no_crop);
  EXPECT_EQ(resized.width, 28);  // int(20 * 61 / 43) = int(28.37)
  EXPECT_EQ(resized.height, 20);
}

// An extreme aspect ratio resizes to a huge width; only the cropped window is computed.
TEST(ResizeAndCrop, ExtremeAspectRatioStaysCheap) {
  RgbImage strip{1, 20000, std::vector<uint8_t>(20000 * 3, 90)};
  ClipPreprocessConfig config;  // 224 x (224 * 20000) resized, 224 x 224 kept
  const RgbImage out = resize_and_crop(strip, config);
  ASSERT_EQ(out.width, 224);
  ASSERT_EQ(out.height, 224);
  for (uint8_t v : out.pixels) ASSERT_EQ(v, 90);
}

// rescale: float32(float64(level) * rescale_factor); normalize: (x - mean) / std in float32.
TEST(PixelValues, ClipNormalisationExtremesAndLayout) {
  RgbImage image{2, 1, {0, 0, 0, 255, 255, 255}};
  ClipPreprocessConfig config;
  float out[6];
  to_pixel_values(image, config, out);
  // (0 - 0.48145466) / 0.26862954 = -1.7922625; (1 - 0.48145466) / 0.26862954 = 1.9303361 (CLIP's range).
  EXPECT_NEAR(out[0], -1.7922625, 1e-6);
  EXPECT_NEAR(out[1], 1.9303361, 1e-6);
  EXPECT_NEAR(out[2], -0.4578275 / 0.26130258, 1e-6);  // channel-major: G plane starts at index 2
  EXPECT_NEAR(out[3], (1 - 0.4578275) / 0.26130258, 1e-6);
  EXPECT_NEAR(out[4], -0.40821073 / 0.27577711, 1e-6);
  EXPECT_NEAR(out[5], (1 - 0.40821073) / 0.27577711, 1e-6);
  // Bit-exact against the float32 sequence numpy performs.
  for (int level : {0, 1, 17, 128, 200, 254, 255}) {
    RgbImage one{1, 1, {static_cast<uint8_t>(level), static_cast<uint8_t>(level), static_cast<uint8_t>(level)}};
    float v[3];
    to_pixel_values(one, config, v);
    for (int c = 0; c < 3; ++c) {
      const float rescaled = static_cast<float>(level * (1.0 / 255.0));
      const float expected = (rescaled - config.image_mean[c]) / config.image_std[c];
      EXPECT_EQ(v[c], expected) << "level " << level << " channel " << c;
    }
  }
  ClipPreprocessConfig raw = config;
  raw.do_rescale = false;
  raw.do_normalize = false;
  to_pixel_values(image, raw, out);
  EXPECT_EQ(out[1], 255.0f);
}

// The two halves (levels, then the table) give to_pixel_values' floats bit for bit, for every level and channel,
// with and without rescale / normalise, over an odd-sized image.
TEST(PixelValues, LevelsThroughTheTableEqualToPixelValues) {
  RgbImage image{7, 5, {}};
  for (int i = 0; i < 7 * 5 * 3; ++i) image.pixels.push_back(static_cast<uint8_t>((i * 53) % 256));
  ClipPreprocessConfig plain;
  plain.do_rescale = false;
  for (const ClipPreprocessConfig& config : {ClipPreprocessConfig{}, plain}) {
    std::vector<float> want(7 * 5 * 3);
    to_pixel_values(image, config, want.data());
    std::vector<uint8_t> levels(want.size());
    to_pixel_levels(image, levels.data());
    const PixelValueTable table = pixel_value_table(config);
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t channel = i / (7 * 5);
      EXPECT_EQ(table[channel * 256 + levels[i]], want[i]) << i;
    }
    for (int level = 0; level < 256; ++level) {
      RgbImage one{1, 1, {static_cast<uint8_t>(level), static_cast<uint8_t>(level), static_cast<uint8_t>(level)}};
      float v[3];
      to_pixel_values(one, config, v);
      for (int c = 0; c < 3; ++c) EXPECT_EQ(table[static_cast<size_t>(c * 256 + level)], v[c]) << level;
    }
  }
}

class PreprocessConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("mmserve_image_cfg_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  StatusOr<ClipPreprocessConfig> load(const std::string& json) {
    std::ofstream(dir_ / "preprocessor_config.json") << json;
    return load_clip_preprocess_config(dir_.string());
  }
  std::filesystem::path dir_;
};

TEST_F(PreprocessConfigTest, OpenAiClipConfigWithIntegerSizes) {
  StatusOr<ClipPreprocessConfig> config = load(R"({
    "crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true,
    "feature_extractor_type": "CLIPFeatureExtractor",
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3, "size": 224})");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->shortest_edge, 224);
  EXPECT_EQ(config->crop_width, 224);
  EXPECT_EQ(config->crop_height, 224);
  EXPECT_EQ(config->resample, 3);
  EXPECT_EQ(config->image_std[2], 0.27577711f);
  EXPECT_DOUBLE_EQ(config->rescale_factor, 1.0 / 255.0);
}

TEST_F(PreprocessConfigTest, DictionaryFormsAndOverrides) {
  StatusOr<ClipPreprocessConfig> config = load(R"({
    "size": {"shortest_edge": 336}, "crop_size": {"height": 320, "width": 300}, "do_center_crop": false,
    "do_rescale": true, "rescale_factor": 0.5, "image_mean": 0.5, "image_std": [0.5, 0.25, 2],
    "resample": 2, "do_convert_rgb": true, "image_processor_type": "CLIPImageProcessor"})");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->shortest_edge, 336);
  EXPECT_EQ(config->crop_height, 320);
  EXPECT_EQ(config->crop_width, 300);
  EXPECT_FALSE(config->do_center_crop);
  EXPECT_EQ(config->rescale_factor, 0.5);
  EXPECT_EQ(config->image_mean, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(config->image_std, (std::array<float, 3>{0.5f, 0.25f, 2.0f}));
  EXPECT_EQ(config->resample, 2);
}

TEST_F(PreprocessConfigTest, EmptyObjectKeepsClipDefaults) {
  StatusOr<ClipPreprocessConfig> config = load("{}");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->shortest_edge, 224);
  EXPECT_EQ(config->crop_height, 224);
  EXPECT_TRUE(config->do_resize && config->do_center_crop && config->do_rescale && config->do_normalize);
}

TEST_F(PreprocessConfigTest, MissingFileIsNotFound) {
  StatusOr<ClipPreprocessConfig> config = load_clip_preprocess_config((dir_ / "nope").string());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("preprocessor_config.json"), std::string::npos);
}

TEST_F(PreprocessConfigTest, WrongTypesNameTheKey) {
  const struct {
    const char* json;
    const char* key;
  } cases[] = {
      {R"({"size": "224"})", "size"},
      {R"({"size": {"shortest_edge": "x"}})", "shortest_edge"},
      {R"({"size": -3})", "size"},
      {R"({"crop_size": {"height": 224}})", "width"},
      {R"({"crop_size": [224, 224]})", "crop_size"},
      {R"({"do_resize": "yes"})", "do_resize"},
      {R"({"rescale_factor": "1/255"})", "rescale_factor"},
      {R"({"image_mean": [0.5, 0.5]})", "image_mean"},
      {R"({"image_std": [0.5, 0, 0.5]})", "image_std"},
      {R"({"resample": "bicubic"})", "resample"},
      {R"([1, 2])", "preprocessor_config.json"},
      {R"({"size": )", "preprocessor_config.json"},
  };
  for (const auto& c : cases) {
    StatusOr<ClipPreprocessConfig> config = load(c.json);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument) << c.json << ": " << config.status().to_string();
    EXPECT_NE(config.status().message().find(c.key), std::string::npos) << config.status().message();
  }
}

TEST_F(PreprocessConfigTest, UnsupportedFormsAreUnimplemented) {
  for (const char* json : {R"({"resample": 1})", R"({"size": {"height": 224, "width": 224}})",
                           R"({"size": {"shortest_edge": 224, "longest_edge": 448}})"}) {
    StatusOr<ClipPreprocessConfig> config = load(json);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_EQ(config.status().code(), StatusCode::kUnimplemented) << json;
  }
}

}  // namespace
}  // namespace mmserve::image
