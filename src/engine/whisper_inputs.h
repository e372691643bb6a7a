// WhisperInputs: the Whisper family's input preparation (engine::InputPreparer), on a preprocessing-pool thread:
// the request's one encoded audio file is decoded, downmixed and resampled to the executor's rate
// (frontends/audio), with the model's limits (audio_bytes_max before any parsing, audio_seconds_max from the
// header and again while decoding), and the SPEC 3.2 QoS score is computed from the audio's duration in seconds
// (no image or text term). The request's WhisperParams (decoding options, streaming callback) ride along.
//
// Errors name what is wrong: kInvalidArgument when the request is not exactly one audio input (a text or an
// image sent to a Whisper model), for empty, non-audio, truncated or corrupt bytes and for encodings we do not
// decode (the decoder's kUnimplemented, e.g. ADPCM WAV, is a client input problem here); kTooLarge above the
// limits. Tests: tests/unit/serving/audio_preprocessor_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"
#include "engine/whisper_executor.h"

namespace mmserve::engine {

class WhisperInputs final : public InputPreparer {
 public:
  WhisperInputs(int sample_rate, PreparerOptions options) : sample_rate_(sample_rate), options_(std::move(options)) {}
  // engine/families.h (`first` is a WhisperExecutor: its sample rate).
  static StatusOr<std::unique_ptr<InputPreparer>> create_for_server(const std::string& model_dir, const Executor& first,
                                                                    const PreparerOptions& options);
  // A WhisperInput, one item in slot 0. `params` may be a WhisperParams (else the default options).
  StatusOr<Prepared> prepare(std::vector<InputItem>& inputs, const RequestParams* params) const override;

 private:
  int sample_rate_;
  PreparerOptions options_;
};

}  // namespace mmserve::engine
