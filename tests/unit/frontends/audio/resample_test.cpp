// Resampling tests: tones survive up- and down-conversion (frequency, amplitude, nothing else added), the
// output length follows the ratio, streaming in odd blocks equals one call, and bad rates are refused.
#include "frontends/audio/resample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "audio_test_util.h"

namespace mmserve::audio {
namespace {

using testing::sine;

std::vector<float> resample_ok(const std::vector<float>& in, int rate_in, int rate_out) {
  StatusOr<std::vector<float>> out = resample(in, rate_in, rate_out);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return out.ok() ? std::move(out).value() : std::vector<float>{};
}

TEST(Resample, TonesSurviveDownAndUpConversion) {
  const struct {
    int rate_in;
    double freq;
  } cases[] = {{48000, 3000.0}, {44100, 1000.0}, {22050, 6000.0}, {8000, 440.0}, {11025, 2500.0}};
  for (const auto& c : cases) {
    const std::vector<float> out = resample_ok(sine(c.freq, 0.5, c.rate_in, c.rate_in), c.rate_in, 16000);
    EXPECT_NEAR(static_cast<double>(out.size()), 16000.0, 2.0) << c.rate_in;
    const testing::ToneFit fit = testing::fit_tone(out, 16000, c.freq, 2000, 14000);
    EXPECT_NEAR(fit.amplitude, 0.5, 1e-4) << c.rate_in;
    EXPECT_LT(fit.residual_rms, 1e-4) << c.rate_in;
  }
}

// Above the new Nyquist frequency (8 kHz) a tone is filtered out, not aliased.
TEST(Resample, RemovesContentAboveTheNewNyquist) {
  const std::vector<float> out = resample_ok(sine(12000.0, 0.5, 48000, 48000), 48000, 16000);
  double energy = 0.0;
  for (size_t i = 2000; i < 14000; ++i) energy += static_cast<double>(out[i]) * out[i];
  EXPECT_LT(std::sqrt(energy / 12000.0), 1e-4);
}

TEST(Resample, StreamingInOddBlocksEqualsOneCall) {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  std::vector<float> in(30011);
  for (float& v : in) v = noise(rng);
  const std::vector<float> whole = resample_ok(in, 44100, 16000);

  StatusOr<StreamResampler> stream = StreamResampler::create(44100, 16000);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  std::vector<float> pieces;
  size_t at = 0;
  const size_t blocks[] = {1, 0, 7, 4096, 333, 10000, 5};
  for (size_t i = 0; at < in.size(); ++i) {
    const size_t n = std::min(blocks[i % std::size(blocks)], in.size() - at);
    ASSERT_TRUE(stream->push(std::span<const float>(in.data() + at, n), pieces).ok());
    at += n;
  }
  ASSERT_TRUE(stream->finish(pieces).ok());
  EXPECT_EQ(pieces, whole);
}

TEST(Resample, EqualRatesCopyAndBadRatesAreRefused) {
  const std::vector<float> in = sine(440.0, 0.5, 16000, 1000);
  EXPECT_EQ(resample_ok(in, 16000, 16000), in);
  EXPECT_EQ(resample(in, 0, 16000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(resample(in, 16000, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(resample(in, 16000 * 300, 16000).status().code(), StatusCode::kInvalidArgument);  // ratio 1/300
  EXPECT_TRUE(resample(std::vector<float>{}, 44100, 16000).ok());
}

}  // namespace
}  // namespace mmserve::audio
