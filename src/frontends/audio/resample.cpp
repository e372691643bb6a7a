// libsamplerate wrapper: one SRC_STATE per StreamResampler, fed block by block through src_process.
//
// libsamplerate returns error codes (never longjmps or throws); a failure after a successful src_new can only
// come from a broken invariant of ours (a bad ratio, a pointer), so it is reported as kInternal.
// Tests: tests/unit/frontends/audio/resample_test.cpp.
#include "frontends/audio/resample.h"

#include <samplerate.h>

#include <string>

namespace mmserve::audio {

struct StreamResampler::State {
  SRC_STATE* src = nullptr;
  double ratio = 1.0;
  bool finished = false;
  ~State() {
    if (src != nullptr) src_delete(src);
  }
};

StreamResampler::StreamResampler(std::unique_ptr<State> state) : state_(std::move(state)) {}
StreamResampler::StreamResampler(StreamResampler&&) noexcept = default;
StreamResampler& StreamResampler::operator=(StreamResampler&&) noexcept = default;
StreamResampler::~StreamResampler() = default;

StatusOr<StreamResampler> StreamResampler::create(int rate_in, int rate_out) {
  if (rate_in <= 0 || rate_out <= 0) {
    return invalid_argument("resample: rates must be positive, got " + std::to_string(rate_in) + " -> " +
                            std::to_string(rate_out) + " Hz");
  }
  const double ratio = static_cast<double>(rate_out) / rate_in;
  if (src_is_valid_ratio(ratio) == 0) {
    return invalid_argument("resample: " + std::to_string(rate_in) + " -> " + std::to_string(rate_out) +
                            " Hz is outside libsamplerate's ratio range (1/256..256)");
  }
  auto state = std::make_unique<State>();
  int error = 0;
  state->src = src_new(SRC_SINC_BEST_QUALITY, 1, &error);
  if (state->src == nullptr) return internal_error(std::string("resample: src_new: ") + src_strerror(error));
  state->ratio = ratio;
  return StreamResampler(std::move(state));
}

Status StreamResampler::push(std::span<const float> block, std::vector<float>& out) {
  return process(block, false, out);
}

Status StreamResampler::finish(std::vector<float>& out) {
  return process({}, true, out);
}

Status StreamResampler::process(std::span<const float> block, bool end_of_input, std::vector<float>& out) {
  MMSERVE_CHECK(state_ != nullptr && !state_->finished, "StreamResampler used after finish() or a move");
  constexpr long kOutBlock = 4096;
  float buffer[kOutBlock];
  // libsamplerate ignores end_of_input when data_in is null (prepare_data returns early): never pass null.
  static constexpr float kNoInput = 0.0f;
  const float* in = block.empty() ? &kNoInput : block.data();
  long remaining = static_cast<long>(block.size());
  for (;;) {
    SRC_DATA data{};
    data.data_in = in;
    data.input_frames = remaining;
    data.data_out = buffer;
    data.output_frames = kOutBlock;
    data.end_of_input = end_of_input ? 1 : 0;
    data.src_ratio = state_->ratio;
    const int error = src_process(state_->src, &data);
    if (error != 0) return internal_error(std::string("resample: src_process: ") + src_strerror(error));
    out.insert(out.end(), buffer, buffer + data.output_frames_gen);
    in += data.input_frames_used;
    remaining -= data.input_frames_used;
    // A full output block may leave more to produce; at the end, run until the delay line is empty.
    const bool more_output = data.output_frames_gen == kOutBlock || (end_of_input && data.output_frames_gen > 0);
    if (remaining == 0 && !more_output) break;
    if (data.input_frames_used == 0 && data.output_frames_gen == 0) {
      return internal_error("resample: libsamplerate made no progress");
    }
  }
  if (end_of_input) state_->finished = true;
  return ok_status();
}

StatusOr<std::vector<float>> resample(std::span<const float> samples, int rate_in, int rate_out) {
  if (rate_in == rate_out && rate_in > 0) return std::vector<float>(samples.begin(), samples.end());
  ASSIGN_OR_RETURN(StreamResampler resampler, StreamResampler::create(rate_in, rate_out));
  std::vector<float> out;
  out.reserve(static_cast<size_t>(static_cast<double>(samples.size()) * rate_out / rate_in) + 16);
  RETURN_IF_ERROR(resampler.push(samples, out));
  RETURN_IF_ERROR(resampler.finish(out));
  return out;
}

}  // namespace mmserve::audio
