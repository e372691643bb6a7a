// Whisper log-mel tests: our Slaney filter bank against the reference openai/whisper package's mel_filters.npz
// (converted to tests/fixtures/whisper/mel_filters.safetensors), the features against a naive double-precision
// reference written here step by step after HF's WhisperFeatureExtractor (direct DFT, openai's filters),
// properties (shape, silence floor, a tone's mel bin, padding, truncation, 128 bins), the config loader, and
// HF's own features when the golden file has been generated on the GPU host.
#include "frontends/audio/log_mel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "audio_test_util.h"
#include "core/safetensors.h"
#include "frontends/audio/audio.h"
#include "test_paths.h"

namespace mmserve::audio {
namespace {

using testing::fixture;
using testing::read_file_bytes;
using testing::sine;

constexpr int kBins = 201;
constexpr int64_t kFrames = 3000;

// openai's filters ("mel_80" [80, 201] or "mel_128" [128, 201]) as float32.
std::vector<float> openai_filters(const std::string& name) {
  StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::open(fixture("whisper/mel_filters.safetensors"));
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  if (!file.ok()) return {};
  const TensorInfo* tensor = (*file)->find(name);
  EXPECT_NE(tensor, nullptr) << name;
  if (tensor == nullptr) return {};
  EXPECT_EQ(tensor->dtype, DType::kF32);
  const auto* data = reinterpret_cast<const float*>(tensor->data);
  return {data, data + tensor->numel()};
}

WhisperLogMel make_log_mel(int n_mels) {
  WhisperFeatureConfig config;
  config.feature_size = n_mels;
  StatusOr<WhisperLogMel> log_mel = WhisperLogMel::create(config);
  EXPECT_TRUE(log_mel.ok()) << log_mel.status().to_string();
  return std::move(log_mel).value();
}

// HF's WhisperFeatureExtractor for 16 kHz, n_fft 400, hop 160, 30 s, written naively in double: pad/truncate
// to 480,000 samples, reflect-pad 200 per side, 3001 frames, periodic Hann, a direct DFT of bins 0..200,
// power, `filters` (float32, [n_mels, 201]), log10(max(., 1e-10)), drop the last frame, clamp to max - 8,
// (x + 4) / 4.
std::vector<float> naive_log_mel(std::span<const float> audio, const std::vector<float>& filters, int n_mels) {
  constexpr int kNfft = 400;
  constexpr int kHop = 160;
  constexpr int64_t kSamples = 480000;
  constexpr int64_t kAllFrames = 1 + kSamples / kHop;  // 3001 before HF's log_spec[:, :-1]
  std::vector<double> x(kSamples, 0.0);
  for (size_t i = 0; i < audio.size() && i < x.size(); ++i) x[i] = audio[i];
  auto padded = [&](int64_t p) {
    int64_t i = p - kNfft / 2;
    if (i < 0) i = -i;
    if (i >= kSamples) i = 2 * (kSamples - 1) - i;
    return x[static_cast<size_t>(i)];
  };
  std::vector<double> cos_table(kNfft), sin_table(kNfft), window(kNfft);
  for (int i = 0; i < kNfft; ++i) {
    cos_table[i] = std::cos(2.0 * std::numbers::pi * i / kNfft);
    sin_table[i] = std::sin(2.0 * std::numbers::pi * i / kNfft);
    window[i] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * i / kNfft);
  }
  std::vector<double> log_spec(static_cast<size_t>(n_mels) * kAllFrames);
  std::vector<double> frame(kNfft), power(kBins);
  for (int64_t t = 0; t < kAllFrames; ++t) {
    for (int j = 0; j < kNfft; ++j) frame[j] = padded(t * kHop + j) * window[j];
    for (int k = 0; k < kBins; ++k) {
      double re = 0.0, im = 0.0;
      int index = 0;
      for (int j = 0; j < kNfft; ++j) {
        re += frame[j] * cos_table[index];
        im -= frame[j] * sin_table[index];
        index += k;
        if (index >= kNfft) index -= kNfft;
      }
      power[k] = re * re + im * im;
    }
    for (int m = 0; m < n_mels; ++m) {
      double mel = 0.0;
      for (int k = 0; k < kBins; ++k)
        mel += static_cast<double>(filters[static_cast<size_t>(m) * kBins + k]) * power[k];
      log_spec[static_cast<size_t>(m) * kAllFrames + t] = std::log10(std::max(mel, 1e-10));
    }
  }
  double max_value = -1e300;
  for (int m = 0; m < n_mels; ++m) {
    for (int64_t t = 0; t < kAllFrames - 1; ++t) max_value = std::max(max_value, log_spec[m * kAllFrames + t]);
  }
  std::vector<float> out(static_cast<size_t>(n_mels) * kFrames);
  for (int m = 0; m < n_mels; ++m) {
    for (int64_t t = 0; t < kFrames; ++t) {
      const double v = std::max(log_spec[m * kAllFrames + t], max_value - 8.0);
      out[static_cast<size_t>(m) * kFrames + t] = static_cast<float>((v + 4.0) / 4.0);
    }
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
  return diff;
}

// The synthetic input of the HF golden, generated identically in C++ and in Python:
//   x[n] = float32(0.5 * sin(2 * pi * 440.0 * n / 16000.0)) for n < 16000 (n as float64), then 8000 zeros.
// numpy: n = np.arange(16000, dtype=np.float64)
//        x = np.concatenate([(0.5 * np.sin(2 * np.pi * 440.0 * n / 16000.0)).astype(np.float32),
//                            np.zeros(8000, dtype=np.float32)])
// (Evaluated left to right in both; libm and numpy's sin may differ by 1 ulp in float64, invisible after the
// float32 rounding or, at worst, 6e-8 on a sample.)
std::vector<float> golden_synthetic_audio() {
  std::vector<float> x(24000, 0.0f);
  for (int i = 0; i < 16000; ++i) {
    const double n = i;
    x[static_cast<size_t>(i)] = static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * 440.0 * n / 16000.0));
  }
  return x;
}

std::vector<float> jfk_samples() {
  StatusOr<Audio> audio = decode_audio(read_file_bytes(fixture("audio/jfk.wav")));
  EXPECT_TRUE(audio.ok()) << audio.status().to_string();
  return audio.ok() ? audio->samples : std::vector<float>{};
}

// ---------------------------------------------------------------------------------------------------------

// openai's filters are librosa's (float32 weights, float64 centre frequencies computed with a division where
// HF's use a multiplication): they differ from ours by float32 rounding only.
TEST(WhisperLogMel, FilterBankMatchesOpenAiMelFilters) {
  for (int n_mels : {80, 128}) {
    const std::vector<float> reference = openai_filters("mel_" + std::to_string(n_mels));
    ASSERT_EQ(reference.size(), static_cast<size_t>(n_mels) * kBins);
    const std::vector<double> ours = slaney_mel_filter_bank(kBins, n_mels, 0.0, 8000.0, 16000);
    ASSERT_EQ(ours.size(), reference.size());
    double max_diff = 0.0;
    double max_value = 0.0;
    for (size_t i = 0; i < ours.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(ours[i] - reference[i]));
      max_value = std::max(max_value, std::fabs(ours[i]));
      // Same zero pattern: a triangle's support is the same set of bins.
      ASSERT_EQ(ours[i] == 0.0, reference[i] == 0.0f) << "mel " << i / kBins << " bin " << i % kBins;
    }
    std::printf("mel_%d: max |ours - openai| = %.3g (largest weight %.4g)\n", n_mels, max_diff, max_value);
    EXPECT_LT(max_diff, 1e-8) << n_mels;
    EXPECT_EQ(make_log_mel(n_mels).mel_filters(), ours);
  }
}

TEST(WhisperLogMel, ShapeIs80By3000) {
  const WhisperLogMel log_mel = make_log_mel(80);
  EXPECT_EQ(log_mel.n_mels(), 80);
  EXPECT_EQ(log_mel.n_frames(), 3000);
  EXPECT_EQ(log_mel.n_bins(), 201);
  EXPECT_EQ(log_mel.compute(sine(440.0, 0.1, 16000, 16000)).size(), 80u * 3000u);
}

// Silence: every mel bin is 0 -> log10(1e-10) = -10 everywhere, the max is -10, and (-10 + 4) / 4 = -1.5.
TEST(WhisperLogMel, SilenceIsTheConstantFloor) {
  const WhisperLogMel log_mel = make_log_mel(80);
  for (const std::vector<float>& audio : {std::vector<float>{}, std::vector<float>(size_t{16000} * 5, 0.0f)}) {
    const std::vector<float> features = log_mel.compute(audio);
    for (float v : features) ASSERT_EQ(v, -1.5f);
  }
}

// A pure tone on a bin frequency (k * 40 Hz) peaks in the mel filter with the largest weight on that bin;
// mel bins far away sit exactly at the floor (max - 8, i.e. 2.0 below the peak after the affine map).
TEST(WhisperLogMel, ToneEnergyLandsInItsMelBin) {
  const WhisperLogMel log_mel = make_log_mel(80);
  const std::vector<double>& filters = log_mel.mel_filters();
  for (double freq : {440.0, 1000.0, 3000.0}) {
    const int bin = static_cast<int>(freq / 40.0);
    int expected_mel = 0;
    for (int m = 1; m < 80; ++m) {
      if (filters[static_cast<size_t>(m) * kBins + bin] > filters[static_cast<size_t>(expected_mel) * kBins + bin]) {
        expected_mel = m;
      }
    }
    const std::vector<float> features = log_mel.compute(sine(freq, 0.5, 16000, 480000));
    constexpr int64_t kT = 1500;
    int peak_mel = 0;
    for (int m = 1; m < 80; ++m) {
      if (features[static_cast<size_t>(m) * kFrames + kT] > features[static_cast<size_t>(peak_mel) * kFrames + kT]) {
        peak_mel = m;
      }
    }
    EXPECT_EQ(peak_mel, expected_mel) << freq << " Hz";
    // Far from the tone: exactly the floor, max - 8 in log10 units, i.e. 2.0 below the matrix's maximum (which
    // may sit in an edge frame: the reflect padding makes the first and last frames broadband).
    const float max_value = *std::max_element(features.begin(), features.end());
    const float min_value = *std::min_element(features.begin(), features.end());
    EXPECT_NEAR(max_value - min_value, 2.0f, 1e-6f) << freq << " Hz";
    EXPECT_EQ(features[static_cast<size_t>(79) * kFrames + kT], min_value) << freq << " Hz";  // ~7.6 kHz
    EXPECT_GT(features[static_cast<size_t>(peak_mel) * kFrames + kT], min_value + 1.9f) << freq << " Hz";
  }
}

TEST(WhisperLogMel, MatchesNaiveDoubleReference) {
  const std::vector<float> filters = openai_filters("mel_80");
  const WhisperLogMel log_mel = make_log_mel(80);
  // Real speech (11 s, then padding), and 30 s of noise plus a chirp (no padding, loud to the last sample).
  std::vector<float> noisy(480000);
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 0.05);
  for (size_t i = 0; i < noisy.size(); ++i) {
    const double t = static_cast<double>(i) / 16000.0;
    noisy[i] = static_cast<float>(noise(rng) + 0.3 * std::sin(2.0 * std::numbers::pi * (100.0 + 120.0 * t) * t));
  }
  const struct {
    const char* name;
    std::vector<float> audio;
  } cases[] = {{"jfk", jfk_samples()}, {"noise+chirp", noisy}, {"golden synthetic", golden_synthetic_audio()}};
  for (const auto& c : cases) {
    const double diff = max_abs_diff(log_mel.compute(c.audio), naive_log_mel(c.audio, filters, 80));
    std::printf("%s: max |ours - naive double reference| = %.3g\n", c.name, diff);
    EXPECT_LT(diff, 1e-5) << c.name;
  }
}

TEST(WhisperLogMel, Mel128MatchesNaiveReference) {
  const WhisperLogMel log_mel = make_log_mel(128);
  EXPECT_EQ(log_mel.n_mels(), 128);
  const std::vector<float> audio = jfk_samples();
  const std::vector<float> features = log_mel.compute(audio);
  ASSERT_EQ(features.size(), 128u * 3000u);
  const double diff = max_abs_diff(features, naive_log_mel(audio, openai_filters("mel_128"), 128));
  std::printf("jfk, 128 mels: max |ours - naive double reference| = %.3g\n", diff);
  EXPECT_LT(diff, 1e-5);
}

// HF pads the raw audio (with padding_value) to 30 s before the STFT, and truncates longer audio to 30 s.
TEST(WhisperLogMel, PadsAndTruncatesTheWaveformTo30Seconds) {
  const WhisperLogMel log_mel = make_log_mel(80);
  const std::vector<float> short_audio = sine(700.0, 0.3, 16000, 12345);
  std::vector<float> padded = short_audio;
  padded.resize(480000, 0.0f);
  EXPECT_EQ(log_mel.compute(short_audio), log_mel.compute(padded));

  std::vector<float> long_audio(size_t{16000} * 40);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  for (float& v : long_audio) v = uniform(rng);
  const std::vector<float> first_30s(long_audio.begin(), long_audio.begin() + 480000);
  EXPECT_EQ(log_mel.compute(long_audio), log_mel.compute(first_30s));

  // A non-zero padding_value pads with that value, as HF's pad() does.
  WhisperFeatureConfig config;
  config.padding_value = 0.25f;
  StatusOr<WhisperLogMel> with_value = WhisperLogMel::create(config);
  ASSERT_TRUE(with_value.ok());
  std::vector<float> padded_value = short_audio;
  padded_value.resize(480000, 0.25f);
  EXPECT_EQ(with_value->compute(short_audio), log_mel.compute(padded_value));

  // The padding region of a short clip is at the floor once the clip's frames are passed.
  const std::vector<float> features = log_mel.compute(short_audio);
  const float floor = *std::min_element(features.begin(), features.end());
  for (int m = 0; m < 80; ++m) ASSERT_EQ(features[static_cast<size_t>(m) * kFrames + 2000], floor);
}

TEST(WhisperLogMel, OtherWindowSizes) {
  // A 10 s chunk with n_fft 512 and hop 256 (not Whisper's, but the code is general): n_samples / hop frames.
  WhisperFeatureConfig config;
  config.chunk_length = 10;
  config.n_fft = 512;
  config.hop_length = 256;
  StatusOr<WhisperLogMel> log_mel = WhisperLogMel::create(config);
  ASSERT_TRUE(log_mel.ok()) << log_mel.status().to_string();
  EXPECT_EQ(log_mel->n_frames(), 625);
  EXPECT_EQ(log_mel->compute(sine(440.0, 0.5, 16000, 16000)).size(), 80u * 625u);
  config.n_fft = 401;
  EXPECT_EQ(WhisperLogMel::create(config).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------------
// preprocessor_config.json

std::string write_config(const std::string& name, const std::string& json) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("whisper_cfg_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "preprocessor_config.json") << json;
  return dir.string();
}

TEST(WhisperFeatureConfig, LoadsHfConfigs) {
  // openai/whisper-large-v3's preprocessor_config.json (128 mel bins), trimmed of keys we ignore.
  const std::string dir = write_config("v3", R"({
    "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
    "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
    "padding_value": 0.0, "processor_class": "WhisperProcessor", "return_attention_mask": false,
    "sampling_rate": 16000})");
  StatusOr<WhisperFeatureConfig> config = load_whisper_feature_config(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->feature_size, 128);
  EXPECT_EQ(config->n_samples(), 480000);
  EXPECT_EQ(config->n_frames(), 3000);

  StatusOr<WhisperFeatureConfig> defaults = load_whisper_feature_config(write_config("empty", "{}"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->feature_size, 80);
}

TEST(WhisperFeatureConfig, RejectsBadValues) {
  const struct {
    const char* name;
    const char* json;
    StatusCode code;
    const char* needle;
  } cases[] = {
      {"type", R"({"feature_size": "80"})", StatusCode::kInvalidArgument, "feature_size"},
      {"zero", R"({"hop_length": 0})", StatusCode::kInvalidArgument, "hop_length"},
      {"odd", R"({"n_fft": 401})", StatusCode::kInvalidArgument, "n_fft"},
      {"dither", R"({"dither": 0.1})", StatusCode::kUnimplemented, "dither"},
      {"left", R"({"padding_side": "left"})", StatusCode::kUnimplemented, "padding_side"},
      {"syntax", R"({"feature_size": )", StatusCode::kInvalidArgument, "preprocessor_config.json"},
  };
  for (const auto& c : cases) {
    StatusOr<WhisperFeatureConfig> config = load_whisper_feature_config(write_config(c.name, c.json));
    EXPECT_EQ(config.status().code(), c.code) << c.name << ": " << config.status().to_string();
    EXPECT_NE(config.status().message().find(c.needle), std::string::npos) << config.status().message();
  }
  EXPECT_EQ(load_whisper_feature_config("/nonexistent/dir").status().code(), StatusCode::kNotFound);
}

// transformers 5's WhisperProcessor.save_pretrained writes the settings as processor_config.json's
// "feature_extractor" object (the Whisper fixtures have no preprocessor_config.json).
TEST(WhisperFeatureConfig, ReadsProcessorConfig) {
  StatusOr<WhisperFeatureConfig> config =
      load_whisper_feature_config(std::string(MMSERVE_FIXTURES_DIR) + "/whisper/whisper-v3-mel128-f16");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->feature_size, 128);

  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "whisper_cfg_processor";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "processor_config.json") << R"({"processor_class": "WhisperProcessor"})";
  EXPECT_EQ(load_whisper_feature_config(dir.string()).status().code(), StatusCode::kNotFound);
  std::ofstream(dir / "processor_config.json") << R"({"feature_extractor": {"n_fft": 401}})";
  StatusOr<WhisperFeatureConfig> bad = load_whisper_feature_config(dir.string());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("processor_config.json"), std::string::npos) << bad.status().message();
}

// ---------------------------------------------------------------------------------------------------------
// Conformance with HF transformers' WhisperFeatureExtractor (goldens made on the GPU host).
//
// tests/fixtures/whisper/logmel_golden.safetensors, written by tools/reference/make_whisper_fixtures.py:
//   logmel_jfk        F32 [80, 3000]: WhisperFeatureExtractor(feature_size=80)(x, sampling_rate=16000,
//                     return_tensors="np").input_features[0] with x = tests/fixtures/audio/jfk.wav as float32
//                     (int16 / 32768, what decode_audio returns)
//   logmel_synthetic  F32 [80, 3000]: the same on golden_synthetic_audio() above
//   audio_synthetic   F32 [24000]: the script's synthetic samples (checked against ours)
// HF's default path is torch's float32 STFT when torch is installed; a float32 emulation of it differs from
// ours by 2e-5 on jfk (float32 rounding of the quiet bins), well inside the 1e-4 bound.
TEST(WhisperLogMelGolden, MatchesHfWhisperFeatureExtractor) {
  const std::string path = fixture("whisper/logmel_golden.safetensors");
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "golden not generated yet: run tools/reference/make_whisper_fixtures.py on the GPU host";
  }
  StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  // The script also stores its synthetic samples: they must be ours (to one float32 ulp, the 1-ulp freedom of
  // float64 sin between libm and numpy).
  if (const TensorInfo* samples = (*file)->find("audio_synthetic"); samples != nullptr) {
    ASSERT_EQ(samples->dtype, DType::kF32);
    const auto* data = reinterpret_cast<const float*>(samples->data);
    EXPECT_LE(max_abs_diff(golden_synthetic_audio(), std::vector<float>(data, data + samples->numel())), 6e-8);
  }
  const WhisperLogMel log_mel = make_log_mel(80);
  const struct {
    const char* name;
    std::vector<float> audio;
  } cases[] = {{"logmel_jfk", jfk_samples()}, {"logmel_synthetic", golden_synthetic_audio()}};
  for (const auto& c : cases) {
    const TensorInfo* tensor = (*file)->find(c.name);
    ASSERT_NE(tensor, nullptr) << c.name;
    ASSERT_EQ(tensor->dtype, DType::kF32) << c.name;
    ASSERT_EQ(tensor->shape, (std::vector<int64_t>{80, 3000})) << c.name;
    const auto* data = reinterpret_cast<const float*>(tensor->data);
    const double diff = max_abs_diff(log_mel.compute(c.audio), std::vector<float>(data, data + tensor->numel()));
    std::printf("%s: max |ours - HF| = %.3g\n", c.name, diff);
    EXPECT_LT(diff, 1e-4) << c.name;
  }
}

}  // namespace
}  // namespace mmserve::audio
