// The request and response types shared by every modality: what the api layer hands to the serving layer
// and what comes back. Immutable once submitted.
//
// One request targets one model and carries ordered inputs of several kinds (texts, encoded images,
// preprocessed pixel values, audio files, named tensors such as SAM's point prompts) plus the family's own
// RequestParams (Whisper's decoding options...). The serving layer never looks inside either: the model's family
// (engine/families.h) prepares them, runs them and returns its engine::ModelOutput, which the family's API codec
// reads with engine::output_as<T>(). Responses also carry the time spent in each phase.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace mmserve::serving {

using Clock = std::chrono::steady_clock;

using engine::InputItem;
using engine::InputKind;

struct RequestOptions {
  int priority = 0;  // 1 = highest; 0 = the model's default level
  std::optional<Clock::time_point> deadline;
  std::string tenant = "default";  // from the API key
  std::string trace_id;            // W3C trace id (32 hex digits), for logs
};

struct RequestSpec {
  std::string model;
  std::vector<InputItem> inputs;
  RequestOptions options;
  // Polled before the request starts; true when the client has gone (the request is then dropped).
  std::function<bool()> cancelled;
  // The family's options (engine::WhisperParams: task, language, the streaming callback...); null = defaults.
  std::shared_ptr<const engine::RequestParams> params;
};

struct PhaseTimes {
  double queue_ms = 0;       // admitted -> picked into a batch
  double preprocess_ms = 0;  // decode + resize + tokenize
  double compute_ms = 0;     // the engine's forward (the batch's, shared)
  double total_ms = 0;       // submit -> completion
};

struct ResponseData {
  std::shared_ptr<const engine::ModelOutput> output;  // the family's (engine::ClipOutput, TranscriptOutput, ...)
  int64_t tokens = 0;                                 // text tokens processed (OpenAI `usage`)
  int batch_size = 0;                                 // requests in the engine batch this one ran in
  PhaseTimes times;
};

// Called exactly once, from a server thread, with the result or the reason there is none.
using Completion = std::function<void(StatusOr<ResponseData>)>;

using engine::qos_score;
using engine::QosWeights;

}  // namespace mmserve::serving
