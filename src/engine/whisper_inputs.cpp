// WhisperInputs (see whisper_inputs.h): frontends/audio's decoder with the model's limits, then the QoS score from
// the duration. Tests: tests/unit/serving/audio_preprocessor_test.cpp.
#include "engine/whisper_inputs.h"

#include <span>

#include "frontends/audio/audio.h"

namespace mmserve::engine {

StatusOr<std::unique_ptr<InputPreparer>> WhisperInputs::create_for_server(const std::string& model_dir,
                                                                          const Executor& first,
                                                                          const PreparerOptions& options) {
  const auto* whisper = dynamic_cast<const WhisperExecutor*>(&first);
  if (whisper == nullptr) return internal_error("WhisperInputs needs a WhisperExecutor");
  return std::unique_ptr<InputPreparer>(std::make_unique<WhisperInputs>(whisper->sample_rate(), options));
}

StatusOr<Prepared> WhisperInputs::prepare(std::vector<InputItem>& inputs, const RequestParams* params) const {
  const PreparerOptions& options = options_;
  size_t audio_inputs = 0;
  for (const InputItem& input : inputs) audio_inputs += input.kind == InputKind::kAudioBytes;
  if (audio_inputs != inputs.size()) {
    return invalid_argument("model '" + options.model +
                            "' is a speech-to-text (Whisper) model: it takes one audio file, not text or images");
  }
  if (inputs.size() != 1) {
    return invalid_argument("model '" + options.model + "' takes one audio file per request, got " +
                            std::to_string(inputs.size()));
  }
  std::string bytes = std::move(inputs[0].audio_bytes);
  if (bytes.empty()) return invalid_argument("the audio file is empty (0 bytes)");

  audio::AudioDecodeOptions decode;
  decode.max_bytes = options.audio_bytes_max;
  decode.max_seconds = options.audio_seconds_max;
  decode.sample_rate = sample_rate_;
  auto decoded = audio::decode_audio(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), decode);
  std::string().swap(bytes);
  if (!decoded.ok()) {
    const Status& st = decoded.status();
    switch (st.code()) {
      case StatusCode::kTooLarge:
      case StatusCode::kResourceExhausted: return too_large("audio: " + st.message());
      case StatusCode::kUnimplemented: return invalid_argument("audio: unsupported audio encoding: " + st.message());
      default: return invalid_argument("audio: " + st.message());
    }
  }
  auto input = std::make_unique<WhisperInput>();
  input->audio_seconds = decoded->seconds();
  input->audio = std::move(decoded->samples);
  Prepared out;
  if (const auto* whisper = dynamic_cast<const WhisperParams*>(params)) {
    input->options = whisper->options;
    input->on_segment = whisper->on_segment;
    out.retriable = !whisper->on_segment;  // a streamed transcription has sent segments: never run it twice
  }
  out.items[0] = 1;
  out.score = qos_score(0.0, input->audio_seconds, 0.0, options.qos);
  out.input = std::move(input);
  return out;
}

}  // namespace mmserve::engine
