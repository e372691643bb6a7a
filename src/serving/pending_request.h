// PendingRequest: one admitted request on its way through a model's runtime, from preprocessing through the
// queue and the batch to its completion. Internal to src/serving.
//
// The first block is what the scheduler reads (RequestQueue never looks at the payload); the payload is the
// family's prepared input (engine::Prepared: made by the model's InputPreparer, run by its Executor). A request
// is owned by exactly one stage at a time (pool task, queue, engine thread), so its fields need no lock.
// `items` counts the request's use of each batching slot (CLIP: texts, images; Whisper: one audio).
// Tests: through request_queue_test.cpp and inference_server_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/executor.h"
#include "serving/request.h"

namespace mmserve::serving {

inline constexpr int kTowerCount = engine::kBatchSlots;  // the queue's per-slot item budget
// CLIP's slots by name, for the queue's tests (the families name theirs in engine::FamilyInfo::slot_names).
enum Tower : int { kTextTower = 0, kImageTower = 1 };

struct PendingRequest {
  // Scheduling.
  int priority = 1;                           // 1 = highest
  double score = 0.0;                         // SPEC 3.2 QoS score; higher is served first
  std::array<int64_t, kTowerCount> items{};   // inputs per batching slot
  std::optional<Clock::time_point> deadline;  // dropped with kDeadlineExceeded if not started by then
  std::function<bool()> cancelled;            // polled while queued; may be empty
  Clock::time_point enqueued{};               // set by RequestQueue::push
  uint64_t sequence = 0;                      // set by RequestQueue::push: arrival order

  // Payload.
  std::shared_ptr<const engine::RequestParams> params;  // the family's options, read by its preparer
  std::unique_ptr<engine::ModelInput> input;            // set by preprocessing
  int64_t tokens = 0;                                   // text tokens (OpenAI usage)
  bool retriable = true;                                // false once it streamed output (never run twice)

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
