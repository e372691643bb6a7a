// One dynamic batch of CLIP requests through one executor: every text of every request goes through
// embed_texts as one batch and every image through embed_images as another (CLIP's towers are independent,
// so each is batched on its own), then the rows are handed back to their requests in input order, with
// logits_per_image for requests that have both kinds. Runs on the instance's engine thread only.
//
// Batch buckets: bucket_for() rounds a tower's batch size up to the configured buckets for metrics and
// accounting. The compute is NOT padded on the CPU: padding only pays for CUDA graphs (one captured graph
// per bucket), and on the CPU it would be pure waste. The CUDA path will pad to bucket_for() here.
// Tests: tests/unit/serving/inference_server_test.cpp (batched results equal single-request results and
// HF's goldens), request_queue_test.cpp (bucket_for).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/clip_executor.h"
#include "serving/pending_request.h"

namespace mmserve::serving {

struct BatchRun {
  std::vector<StatusOr<ResponseData>> responses;  // one per request, in batch order (times left to the caller)
  std::vector<bool> finished_early;               // handed to `early` already (their responses entry is stale)
  int64_t texts = 0;                              // text tower batch size
  int64_t images = 0;                             // image tower batch size
  double compute_ms = 0;                          // both towers
};

// Called for a request whose outputs are all ready before the batch ends: text-only requests are answered
// right after the text tower instead of waiting for the image tower (no head-of-line blocking behind images).
// `compute_ms` is the time the request's own towers took.
using EarlyFinish = std::function<void(size_t index, StatusOr<ResponseData> response, double compute_ms)>;

// Called between chunks of the image tower (preemption point): the engine thread may serve urgent requests
// there before the rest of this batch's images run.
struct ImageChunking {
  int64_t images = 0;  // chunk size; 0 = the whole image batch at once
  std::function<void()> between_chunks;
};

// Copies the requests' pixels into the batch's buffer and leaves them in place: a batch that fails with a device
// fault is retried on another replica (model_runtime_replicas.cpp), and keeping them costs no copy.
BatchRun run_clip_batch(engine::ClipExecutor& executor, const std::vector<PendingRequestPtr>& batch,
                        const EarlyFinish& early = nullptr, const ImageChunking& chunking = {});

// The smallest bucket >= n (buckets sorted ascending); n itself when it is above every bucket or n <= 0.
int64_t bucket_for(int64_t n, const std::vector<int>& buckets);

}  // namespace mmserve::serving
