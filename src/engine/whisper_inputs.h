// Audio preprocessing for speech models (Whisper), on a preprocessing-pool thread: the request's one encoded
// audio file is decoded, downmixed and resampled to the executor's rate (frontends/audio), with the model's
// limits (audio_bytes_max before any parsing, audio_seconds_max from the header and again while decoding),
// and the SPEC 3.2 QoS score is computed from the audio's duration in seconds (no image or text term).
//
// Errors name what is wrong: kInvalidArgument when the request is not exactly one audio input (a text or an
// image sent to a Whisper model), for empty, non-audio, truncated or corrupt bytes and for encodings we do not
// decode (the decoder's kUnimplemented, e.g. ADPCM WAV, is a client input problem here); kTooLarge above the
// limits. Tests: tests/unit/serving/audio_preprocessor_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/pending_request.h"
#include "serving/request.h"

namespace mmserve::serving {

struct AudioPreprocessorOptions {
  std::string model;                // named in errors
  int sample_rate = 16000;          // the executor's input rate
  double seconds_max = 7200;        // mmserve.yaml audio_seconds_max
  int64_t bytes_max = 256LL << 20;  // mmserve.yaml audio_bytes_max
  QosWeights qos;
};

// Fills `request`'s audio, audio_seconds, items (one in kAudioSlot) and score from `inputs` (the encoded bytes
// are released as soon as they are decoded).
Status preprocess_audio(std::vector<InputItem>& inputs, const AudioPreprocessorOptions& options,
                        PendingRequest& request);

}  // namespace mmserve::serving
