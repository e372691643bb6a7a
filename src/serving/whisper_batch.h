// One dynamic batch of Whisper requests through one executor, on the instance's engine thread: the requests
// without a segment callback are decoded together by transcribe_batch (their windows share the encoder and
// the decoder steps), a request with a callback (a streaming response) is decoded alone by transcribe() so
// its segments reach the client as they finish. Each request's decoded audio is released once it has run.
// Tests: tests/unit/serving/whisper_serving_test.cpp (batched transcripts equal single-request ones, streaming
// callbacks, cancellation).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/whisper_executor.h"
#include "serving/pending_request.h"

namespace mmserve::serving {

struct WhisperBatchRun {
  std::vector<StatusOr<ResponseData>> responses;  // one per request, in batch order (times left to the caller)
  int64_t batched = 0;                            // requests decoded by one transcribe_batch call
  double compute_ms = 0;
};

WhisperBatchRun run_whisper_batch(engine::WhisperExecutor& executor, const std::vector<PendingRequestPtr>& batch);

}  // namespace mmserve::serving
