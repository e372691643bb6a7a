// The request and response types shared by every modality: what the api layer hands to the serving layer
// and what comes back. Immutable once submitted.
//
// One request targets one model and carries ordered inputs of several kinds (texts, encoded images,
// preprocessed pixel values for CLIP; one encoded audio file for Whisper). A CLIP response holds one embedding
// per input, in input order, plus logits when the request has both images and texts; a Whisper response holds
// the transcript. Both carry the time spent in each phase.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/whisper_executor.h"

namespace mmserve::serving {

using Clock = std::chrono::steady_clock;

enum class InputKind { kText, kImageBytes, kPixelValues, kAudioBytes };

struct InputItem {
  InputKind kind = InputKind::kText;
  std::string text;                 // kText: UTF-8
  std::string image_bytes;          // kImageBytes: an encoded JPEG/PNG/WebP file
  std::vector<float> pixel_values;  // kPixelValues: [3, H, W], already preprocessed
  std::string audio_bytes;          // kAudioBytes: an encoded WAV/FLAC/Ogg/MP3 file
  bool is_image() const { return kind == InputKind::kImageBytes || kind == InputKind::kPixelValues; }
};

struct RequestOptions {
  int priority = 0;                  // 1 = highest; 0 = the model's default level
  std::optional<Clock::time_point> deadline;
  std::string tenant = "default";    // from the API key
  std::string trace_id;              // W3C trace id (32 hex digits), for logs
};

struct RequestSpec {
  std::string model;
  std::vector<InputItem> inputs;
  RequestOptions options;
  // Polled before the request starts; true when the client has gone (the request is then dropped).
  std::function<bool()> cancelled;
  // Whisper: how to decode (task, language, prompt, temperatures...). Ignored by CLIP models.
  engine::TranscribeOptions transcribe;
  // Whisper, optional: called on the engine thread after each finished segment (streaming responses); must be
  // cheap; returning false cancels the request. A request with a callback is decoded alone, not in a batch
  // (transcribe_batch has no per-request callbacks).
  engine::SegmentCallback on_segment;
};

struct PhaseTimes {
  double queue_ms = 0;       // admitted -> picked into a batch
  double preprocess_ms = 0;  // decode + resize + tokenize
  double compute_ms = 0;     // the engine's forward (the batch's, shared)
  double total_ms = 0;       // submit -> completion
};

struct ResponseData {
  int64_t dim = 0;
  std::vector<std::vector<float>> embeddings;  // one per input, in input order, L2-normalised
  // [images x texts] in input order of each kind, when the request has both (CLIP).
  std::vector<float> logits_per_image;
  int64_t images = 0;
  int64_t texts = 0;
  int64_t tokens = 0;                            // text tokens processed (OpenAI `usage`)
  int batch_size = 0;                            // size of the largest engine batch this request rode in
  std::optional<engine::Transcript> transcript;  // Whisper models: the request's transcript
  PhaseTimes times;
};

// Called exactly once, from a server thread, with the result or the reason there is none.
using Completion = std::function<void(StatusOr<ResponseData>)>;

// SPEC 3.2's QoS score: S = 0.4 min(img_tokens / 4096, 1) + 0.35 min(audio_s / 60, 1) + 0.25 min(text_len / 512, 1),
// every term clamped to [0, 1] (the document's text says all three lie in [0, 1]; its Go code clamps only the
// audio term). text_len in Unicode code points. Weights and maxima are configurable.
struct QosWeights {
  double image = 0.4, audio = 0.35, text = 0.25;
  double image_tokens_max = 4096, audio_seconds_max = 60, text_chars_max = 512;
};
double qos_score(double image_tokens, double audio_seconds, double text_chars, const QosWeights& w = {});

}  // namespace mmserve::serving
