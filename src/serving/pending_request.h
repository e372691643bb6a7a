// PendingRequest: one admitted request on its way through a model's runtime, from preprocessing through the
// queue and the batch to its completion. Internal to src/serving.
//
// The first block is what the scheduler reads (RequestQueue never looks at the payload); the payload is what
// preprocessing (request_preprocessor.cpp) produces and the batch runner (clip_batch.cpp) consumes. A request
// is owned by exactly one stage at a time (pool task, queue, engine thread), so its fields need no lock.
// Whisper requests carry one decoded audio (whisper_batch.cpp consumes it) and count as one item in the first
// budget slot (kAudioSlot): a Whisper batch is max_batch_size requests, whatever their durations.
// Tests: through request_queue_test.cpp and inference_server_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "serving/request.h"

namespace mmserve::serving {

// CLIP's two towers are batched separately; the batch budget counts inputs per tower.
enum Tower : int { kTextTower = 0, kImageTower = 1 };
inline constexpr int kTowerCount = 2;
inline constexpr int kAudioSlot = kTextTower;  // Whisper: one item per request

struct PendingRequest {
  // Scheduling.
  int priority = 1;                           // 1 = highest
  double score = 0.0;                         // SPEC 3.2 QoS score; higher is served first
  std::array<int64_t, kTowerCount> items{};   // inputs per tower
  std::optional<Clock::time_point> deadline;  // dropped with kDeadlineExceeded if not started by then
  std::function<bool()> cancelled;            // polled while queued; may be empty
  Clock::time_point enqueued{};               // set by RequestQueue::push
  uint64_t sequence = 0;                      // set by RequestQueue::push: arrival order

  // Payload.
  std::vector<bool> input_is_image;            // per input, in input order
  std::vector<std::vector<int32_t>> text_ids;  // one per text input, in order
  std::vector<float> pixels;                   // one [3, S, S] block per image input, in order
  int64_t images = 0;
  int64_t tokens = 0;        // sum of text_ids' lengths (OpenAI usage)
  std::vector<float> audio;  // Whisper: mono samples at the executor's rate
  double audio_seconds = 0;  // of `audio` (the QoS score's audio term)
  engine::TranscribeOptions transcribe;
  engine::SegmentCallback on_segment;  // streaming: the request is decoded alone

  // Bookkeeping.
  Clock::time_point submitted{};
  PhaseTimes times;
  bool preprocessed = false;  // phases reached, for the phase histograms
  bool dequeued = false;
  int replica_faults = 0;  // batches of this request that failed with a device fault (retried once: 2 = 503)
  Completion done;
};

using PendingRequestPtr = std::shared_ptr<PendingRequest>;

}  // namespace mmserve::serving
