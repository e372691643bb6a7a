// preprocess_audio (see audio_preprocessor.h): frontends/audio's decoder with the model's limits, then the
// QoS score from the duration. Tests: tests/unit/serving/audio_preprocessor_test.cpp.
#include "serving/audio_preprocessor.h"

#include <span>

#include "frontends/audio/audio.h"

namespace mmserve::serving {

Status preprocess_audio(std::vector<InputItem>& inputs, const AudioPreprocessorOptions& options,
                        PendingRequest& request) {
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
  decode.max_bytes = options.bytes_max;
  decode.max_seconds = options.seconds_max;
  decode.sample_rate = options.sample_rate;
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
  request.audio_seconds = decoded->seconds();
  request.audio = std::move(decoded->samples);
  request.items = {};
  request.items[kAudioSlot] = 1;
  request.score = qos_score(0.0, request.audio_seconds, 0.0, options.qos);
  return ok_status();
}

}  // namespace mmserve::serving
