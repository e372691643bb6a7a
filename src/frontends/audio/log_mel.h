// Whisper's log-mel spectrogram, as HF transformers' WhisperFeatureExtractor computes it.
//
// HF (transformers 5, feature_extraction_whisper.py with audio_utils.py) does, for one 16 kHz mono waveform:
//   1. pad with padding_value (0) or truncate to n_samples = chunk_length * sampling_rate (480,000);
//   2. STFT: reflect-pad n_fft / 2 on each side (center=True), frames of n_fft = 400 every hop_length = 160,
//      periodic Hann window (np.hanning(401)[:-1] == torch.hann_window(400)), power |X_k|^2, k <= n_fft / 2;
//   3. mel = filters @ power with a Slaney filter bank (mel_filter_bank(201, feature_size, 0, 8000, 16000,
//      norm="slaney", mel_scale="slaney")), then log10(max(mel, 1e-10));
//   4. drop the last frame (3001 -> 3000), clamp to max - 8 (the maximum over the whole [n_mels, 3000]
//      matrix), then (x + 4) / 4.
// HF's numpy path runs the FFT in float64 (rounding the spectrum to complex64), its torch path (used when
// torch is installed) in float32. We compute everything in double with a mixed-radix FFT (fft.h) and round
// once to float32 at the end, so we sit within float32 rounding of the exact result; both HF paths are
// within ~1e-5 of it except where their own float32 rounding shows.
// Cost on one core: 27 ms per 30 s window (log_mel.cpp has the figures). Frames of the zero padding (often most of a 30
// s window) are recognised and skipped: their log-mel is the 1e-10 floor exactly. Tests:
// tests/unit/frontends/audio/log_mel_test.cpp (a direct-DFT double reference, openai's filters, HF goldens when
// generated).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "frontends/audio/fft.h"

namespace mmserve::audio {

// preprocessor_config.json of a Whisper checkpoint (HF's names; n_samples and nb_max_frames are derived).
struct WhisperFeatureConfig {
  int feature_size = 80;  // mel bins: 80, or 128 for large-v3 (must equal config.json's num_mel_bins)
  int sampling_rate = 16000;
  int hop_length = 160;
  int n_fft = 400;
  int chunk_length = 30;  // seconds
  float padding_value = 0.0f;
  int64_t n_samples() const { return int64_t{chunk_length} * sampling_rate; }
  // Frames after HF drops the last one: 1 + n_samples / hop - 1.
  int64_t n_frames() const { return n_samples() / hop_length; }
};

// Reads `model_dir`/preprocessor_config.json. Absent keys keep WhisperFeatureExtractor's defaults; a wrong
// type or an out-of-range value is kInvalidArgument naming the key; dither != 0 (random noise) and
// padding_side "left" are kUnimplemented.
StatusOr<WhisperFeatureConfig> load_whisper_feature_config(const std::string& model_dir);
// The same checks on a config built in code (the loader calls it).
Status validate_whisper_feature_config(const WhisperFeatureConfig& config);

// HF's mel_filter_bank(num_frequency_bins, num_mel_filters, f_min, f_max, sampling_rate, norm="slaney",
// mel_scale="slaney"), transposed: [num_mel_filters, num_frequency_bins] row-major, in double.
std::vector<double> slaney_mel_filter_bank(int num_frequency_bins, int num_mel_filters, double f_min, double f_max,
                                           int sampling_rate);

class WhisperLogMel {
 public:
  // Builds the window, FFT plan and filter bank (validate_whisper_feature_config's errors).
  static StatusOr<WhisperLogMel> create(const WhisperFeatureConfig& config);

  const WhisperFeatureConfig& config() const { return config_; }
  int n_mels() const { return config_.feature_size; }
  int64_t n_frames() const { return config_.n_frames(); }
  int n_bins() const { return config_.n_fft / 2 + 1; }
  // [n_mels, n_bins] row-major.
  const std::vector<double>& mel_filters() const { return filters_; }

  // `samples`: mono at config().sampling_rate, any length (padded or truncated to n_samples as HF does).
  // Writes n_mels * n_frames floats, [n_mels, n_frames] row-major (HF's input_features[0]). Thread-safe.
  void compute(std::span<const float> samples, float* out) const;
  std::vector<float> compute(std::span<const float> samples) const;

 private:
  WhisperLogMel(const WhisperFeatureConfig& config, std::vector<double> filters);

  WhisperFeatureConfig config_;
  FftPlan fft_;
  std::vector<double> window_;     // periodic Hann, n_fft
  std::vector<double> filters_;    // [n_mels, n_bins]
  std::vector<int> filter_begin_;  // per mel: first bin with a non-zero weight
  std::vector<int> filter_end_;    // per mel: one past the last
};

}  // namespace mmserve::audio
