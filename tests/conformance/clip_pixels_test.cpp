// Conformance of the image frontend with PIL + HF: every image under every preprocessing config.
//
// Goldens (tests/fixtures/clip_pixels.safetensors, made by tools/reference/make_clip_fixtures.py with
// Pillow 12 and transformers 5): "pil/<image>/<cfg>" F32 [3,H,W] from CLIPImageProcessorPil given
// Image.open(<image>) (so PIL's convert("RGB") rules are under test too), "pil_u8/<image>/clip224" the same
// as 8-bit levels; "tv/..." and "tv_u8/..." from the torchvision CLIPImageProcessor. For each golden we
// decode the file, load tests/fixtures/clip_preprocess/<cfg>/preprocessor_config.json, run
// resize_and_crop + to_pixel_values, and compare as 8-bit levels (level = round((p * std + mean) /
// rescale_factor)): at least 99.9% identical, none off by more than 1, and where the levels agree the
// floats within 1e-5. The PIL pipeline is the contract and is asserted; agreement with the torchvision
// goldens (a different resampler) is only printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"
#include "golden.h"

namespace mmserve::image {
namespace {

struct Comparison {
  size_t total = 0;
  size_t identical = 0;
  int max_level_diff = 0;
  double max_float_diff_where_equal = 0.0;
};

struct Pipeline {
  ClipPreprocessConfig config;
  RgbImage cropped;
  std::vector<float> values;  // CHW
};

// "<prefix>/<image>/<cfg>" -> image, cfg.
bool split_name(const std::string& name, std::string* image, std::string* cfg) {
  const size_t a = name.find('/');
  const size_t b = name.rfind('/');
  if (a == std::string::npos || b == a) return false;
  *image = name.substr(a + 1, b - a - 1);
  *cfg = name.substr(b + 1);
  return true;
}

// Decodes images/<image> and runs the pipeline of clip_preprocess/<cfg>; false (with a test failure) if not.
bool run_pipeline(const std::string& image, const std::string& cfg, Pipeline* out) {
  StatusOr<ClipPreprocessConfig> config = load_clip_preprocess_config(testing::fixture("clip_preprocess/" + cfg));
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  StatusOr<RgbImage> decoded = decode_rgb_file(testing::fixture("images/" + image));
  EXPECT_TRUE(decoded.ok()) << decoded.status().to_string();
  if (!config.ok() || !decoded.ok()) return false;
  out->config = *config;
  out->cropped = resize_and_crop(*decoded, out->config);
  out->values.resize(out->cropped.pixels.size());
  to_pixel_values(out->cropped, out->config, out->values.data());
  return true;
}

int to_level(double value, int channel, const ClipPreprocessConfig& config) {
  return static_cast<int>(
      std::lround((value * config.image_std[channel] + config.image_mean[channel]) / config.rescale_factor));
}

// Compares our pipeline with one golden tensor (F32 values or U8 levels, [3, H, W]).
Comparison compare(const testing::Golden& golden, const std::string& name, const Pipeline& ours) {
  Comparison result;
  const TensorInfo* info = golden.file().find(name);
  const int height = ours.cropped.height, width = ours.cropped.width;
  EXPECT_EQ(info->shape, (std::vector<int64_t>{3, height, width})) << name;
  if (info->shape != std::vector<int64_t>{3, height, width}) return result;
  const bool levels_only = info->dtype == DType::kU8;
  const std::vector<float> values = levels_only ? std::vector<float>{} : golden.f32(name);
  const std::vector<uint8_t> levels = levels_only ? golden.u8(name) : std::vector<uint8_t>{};
  const size_t plane = static_cast<size_t>(height) * width;
  for (int c = 0; c < 3; ++c) {
    for (size_t i = 0; i < plane; ++i) {
      const size_t k = c * plane + i;
      const int our_level = to_level(ours.values[k], c, ours.config);
      EXPECT_EQ(our_level, ours.cropped.pixels[3 * i + c]) << name << ": our float does not round-trip";
      const int golden_level = levels_only ? levels[k] : to_level(values[k], c, ours.config);
      const int diff = std::abs(our_level - golden_level);
      ++result.total;
      if (diff == 0) {
        ++result.identical;
        if (!levels_only) {
          result.max_float_diff_where_equal =
              std::max(result.max_float_diff_where_equal, std::fabs(static_cast<double>(ours.values[k]) - values[k]));
        }
      }
      result.max_level_diff = std::max(result.max_level_diff, diff);
    }
  }
  return result;
}

std::vector<std::string> golden_names(const testing::Golden& golden, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& [name, info] : golden.file().tensors()) {
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

TEST(ClipPixels, MatchesPilGoldens) {
  const testing::Golden golden(testing::fixture("clip_pixels.safetensors"));
  ASSERT_TRUE(golden.ok());
  std::vector<std::string> names = golden_names(golden, "pil/");
  for (const std::string& name : golden_names(golden, "pil_u8/")) names.push_back(name);
  ASSERT_FALSE(names.empty()) << "no pil/ goldens";
  size_t total = 0, identical = 0;
  double max_float_diff = 0.0;
  for (const std::string& name : names) {
    std::string image, cfg;
    ASSERT_TRUE(split_name(name, &image, &cfg)) << name;
    Pipeline ours;
    if (!run_pipeline(image, cfg, &ours)) continue;
    const Comparison r = compare(golden, name, ours);
    total += r.total;
    identical += r.identical;
    max_float_diff = std::max(max_float_diff, r.max_float_diff_where_equal);
    EXPECT_GE(r.identical, r.total * 999 / 1000) << name << ": " << r.identical << " of " << r.total << " levels";
    EXPECT_LE(r.max_level_diff, 1) << name;
    EXPECT_LE(r.max_float_diff_where_equal, 1e-5) << name;
    if (r.identical != r.total) {
      std::printf("  %-40s %zu of %zu levels identical, max diff %d\n", name.c_str(), r.identical, r.total,
                  r.max_level_diff);
    }
  }
  std::printf("PIL goldens: %zu tensors, %zu of %zu levels identical (%.4f%%), max |float diff| %.3g\n", names.size(),
              identical, total, total ? 100.0 * identical / total : 0.0, max_float_diff);
}

// The torchvision processor resamples differently (antialiased bicubic on tensors, other rounding and crop
// padding); its agreement is reported, not asserted.
TEST(ClipPixels, ReportsAgreementWithTorchvisionGoldens) {
  const testing::Golden golden(testing::fixture("clip_pixels.safetensors"));
  ASSERT_TRUE(golden.ok());
  std::vector<std::string> names = golden_names(golden, "tv/");
  for (const std::string& name : golden_names(golden, "tv_u8/")) names.push_back(name);
  size_t total = 0, identical = 0;
  int worst = 0;
  for (const std::string& name : names) {
    std::string image, cfg;
    if (!split_name(name, &image, &cfg)) continue;
    Pipeline ours;
    if (!run_pipeline(image, cfg, &ours)) continue;
    const Comparison r = compare(golden, name, ours);
    total += r.total;
    identical += r.identical;
    worst = std::max(worst, r.max_level_diff);
    std::printf("  %-40s %6.2f%% levels identical, max diff %d\n", name.c_str(),
                r.total ? 100.0 * r.identical / r.total : 0.0, r.max_level_diff);
  }
  std::printf("torchvision goldens: %zu tensors, %.2f%% levels identical, max level diff %d\n", names.size(),
              total ? 100.0 * identical / total : 0.0, worst);
}

}  // namespace
}  // namespace mmserve::image
