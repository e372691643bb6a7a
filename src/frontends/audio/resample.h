// Sample-rate conversion of mono float audio with libsamplerate (SRC_SINC_BEST_QUALITY), in one call or
// streamed block by block (the decoder feeds it as it decodes, so the source-rate signal is never stored).
//
// Streaming gives the same samples as one call over the whole signal: the sinc converter's output depends
// only on the input and the ratio, not on how the input was split. The output has round(n * ratio) samples
// (libsamplerate's count, +-1 at the end). Best quality is libsamplerate's slowest converter (~97 dB SNR,
// 97% bandwidth): on the dev machine (AMD EPYC, one core) 630 ms per 30 s of 44.1 kHz input (MEDIUM: 150 ms,
// FASTEST: 67 ms), by far the largest cost of the audio path; 16 kHz input skips it.
// Tests: tests/unit/frontends/audio/resample_test.cpp.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/status.h"

namespace mmserve::audio {

class StreamResampler {
 public:
  // Rates must be positive with a ratio within libsamplerate's 1/256..256 (kInvalidArgument otherwise).
  static StatusOr<StreamResampler> create(int rate_in, int rate_out);
  StreamResampler(StreamResampler&&) noexcept;
  StreamResampler& operator=(StreamResampler&&) noexcept;
  ~StreamResampler();

  // Converts the next block, appending the samples produced to `out`. Input may be any length (also 0).
  Status push(std::span<const float> block, std::vector<float>& out);
  // Flushes the converter's delay line (the tail of the signal) into `out`; push() may not follow.
  Status finish(std::vector<float>& out);

 private:
  struct State;
  explicit StreamResampler(std::unique_ptr<State> state);
  Status process(std::span<const float> block, bool end_of_input, std::vector<float>& out);
  std::unique_ptr<State> state_;
};

// The whole signal in one call; equal rates return a copy.
StatusOr<std::vector<float>> resample(std::span<const float> samples, int rate_in, int rate_out);

}  // namespace mmserve::audio
