// Silero VAD (16 kHz): a voice-activity detector run on the CPU in f32 in front of Whisper, so silence is
// skipped before the encoder.
//
// The forward follows snakers4/silero-vad's v5 network (which the 6.x releases keep) step by step: each
// 512-sample window with the last 64 samples of the previous one as context (576 samples in), right reflection
// padding by 64, the STFT as a conv1d with stft_conv.weight (258 filters of 256 taps, stride 128) -> magnitude
// of 129 bins over 4 frames, four conv1d(kernel 3, padding 1) + ReLU blocks with strides 1, 2, 2, 1
// (4 -> 4 -> 2 -> 1 -> 1 frames), an LSTM cell whose (h, c) carries across windows, ReLU, a 1x1 conv and a
// sigmoid: one speech probability per window. The state (h, c, context) starts at zero for every call, i.e.
// per stream. Everything before the LSTM is per window, so it runs as GEMMs over blocks of windows; only the
// recurrence is sequential. speech_spans() turns the probabilities into spans exactly as silero's utils_vad.py
// get_speech_timestamps() does.
//
// The real pretrained weights (assets/vad/silero_vad_16k.safetensors, MIT) are compiled into the library, so
// load_default() works from any directory.
// Tests: tests/unit/models/silero_vad_test.cpp (real weights on jfk.wav; golden from
// tools/reference/make_silero_vad_golden.py when generated). Bench: bench/silero_vad_bench.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve {
class SafetensorsFile;
}

namespace mmserve::models {

// get_speech_timestamps()'s parameters (its defaults). Durations in ms at 16 kHz.
struct VadOptions {
  float threshold = 0.5f;          // speech when prob >= threshold; silence when < max(threshold - 0.15, 0.01)
  int min_speech_ms = 250;         // shorter speech spans are dropped
  int min_silence_ms = 100;        // a pause must last this long to end a span
  int speech_pad_ms = 30;          // each span is widened by this much on both sides (less if spans are close)
  double max_speech_s = INFINITY;  // longer spans are split (at the longest pause > 98 ms in them, else hard)
};

struct SpeechSpan {
  int64_t start = 0, end = 0;  // samples at 16 kHz, [start, end)
  bool operator==(const SpeechSpan&) const = default;
};

class SileroVad {
 public:
  static constexpr int kSampleRate = 16000;
  static constexpr int64_t kWindow = 512;  // samples per probability
  static constexpr int64_t kContext = 64;  // samples of the previous window prepended to each window

  // Loads and checks a safetensors file (all 15 tensors with their exact shapes and f32 dtype; every problem
  // is listed in one kInvalidArgument / kNotFound Status naming the file).
  static StatusOr<std::unique_ptr<SileroVad>> load(const std::string& safetensors_path);
  // The compiled-in real pretrained 16 kHz weights (assets/vad).
  static StatusOr<std::unique_ptr<SileroVad>> load_default();

  // One speech probability in [0, 1] per 512-sample window of 16 kHz mono audio; the last partial window is
  // zero-padded (as get_speech_timestamps does). Empty audio gives an empty vector. Non-finite samples are
  // kInvalidArgument. Thread-safe: the recurrent state and scratch live in the call. The block GEMMs use the
  // CPU kernels' threads (kernels::set_cpu_threads); ~1 ms per second of audio on one core.
  StatusOr<std::vector<float>> probabilities(const std::vector<float>& audio_16k) const;

  // Speech spans of the audio (get_speech_timestamps with `options`), sorted, non-overlapping, inside
  // [0, audio size). Bad options (threshold outside [0, 1], negative durations, max_speech_s <= 0) are
  // kInvalidArgument.
  StatusOr<std::vector<SpeechSpan>> speech_spans(const std::vector<float>& audio_16k,
                                                 const VadOptions& options = {}) const;

  // The spans computed from given probabilities (one per 512 samples of an `audio_samples`-long input):
  // the pure state machine of get_speech_timestamps, exposed so tests can drive it with chosen inputs.
  static StatusOr<std::vector<SpeechSpan>> spans_from_probabilities(const std::vector<float>& probs,
                                                                    int64_t audio_samples,
                                                                    const VadOptions& options = {});

  ~SileroVad();
  SileroVad(const SileroVad&) = delete;
  SileroVad& operator=(const SileroVad&) = delete;

 private:
  struct Weights;
  SileroVad();
  static StatusOr<std::unique_ptr<SileroVad>> from_safetensors(const SafetensorsFile& file, const std::string& label);
  struct Scratch;
  // The non-recurrent part (STFT, convs, LSTM input projection) for `count` windows from window `first`.
  void encode_windows(const std::vector<float>& audio, int64_t first, int64_t count, Scratch& scratch) const;
  // The recurrent part for one window: updates the LSTM state (h, c) and returns the speech probability.
  float lstm_step(const float* xproj, float* h, float* c) const;
  std::unique_ptr<Weights> weights_;
};

}  // namespace mmserve::models
