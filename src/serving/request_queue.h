// RequestQueue: one model's bounded queue of preprocessed requests, and the scheduling decision of which of
// them form the next batch. This is the only place in mmserve that holds the scheduling lock.
//
// Capacity counts queued requests plus reservations: submit() reserves a slot on the caller's thread (so a
// full queue is a synchronous 429, before any decoding work), preprocessing fills the request and pushes it
// into its slot. Engine threads block in pop_batch(), which waits for work, then up to `delay_max` after the
// oldest queued request for the batch to fill (unless a tower's budget is already reached), and then takes
// requests in scheduling order while they fit the per-tower item budget (strict order: the first one that
// does not fit ends the batch; the first one is always taken, the executor chunks oversized requests). Under
// qos a batch holds requests of one own priority only (the first ranked entry's; entries of other priorities are
// skipped): a priority-1 text is never batched with priority-3 images or texts, aged or not, which would
// lengthen its own batch and run that low work unpreemptible. Aging orders the queue (when work starts);
// preemption goes by the own priority (what may interrupt a running batch): see pop_urgent.
//
// Order, policy fifo: arrival. Policy qos, by key:
//   1. effective class = max(1, priority - floor(waited / aging_ms_per_level))   (1 first; aging off at 0)
//   2. within class 1, "overdue" entries first, in arrival order: those whose unclamped class would be < 1,
//      i.e. that waited >= priority * aging_ms_per_level
//   3. QoS score, higher first (SPEC 3.2 treats the score as a priority)
//   4. arrival
// Step 2 is the starvation bound: without it a low-score entry that aged to class 1 could still wait forever
// behind a stream of fresh high-score class-1 entries. With it, an entry of priority p (<= L levels) is
// overdue after p * aging_ms_per_level and from then on only overdue entries that arrived before it go
// first, so it starts within L * aging_ms_per_level plus the time to serve the overdue work queued ahead of
// it (one batch when nothing older is overdue), however fast higher-priority work keeps arriving.
//
// Entries whose deadline passed or whose `cancelled()` returns true are removed whenever an engine thread
// looks at the queue (and, while engine threads wait, at the earliest deadline) and handed to `on_drop`
// with kDeadlineExceeded / kCancelled. `cancelled` is called under the lock: it must be cheap and must not
// call into the server. on_drop always runs outside the lock.
// Tests: tests/unit/serving/request_queue_test.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "serving/metrics.h"
#include "serving/pending_request.h"
#include "serving/server_types.h"

namespace mmserve::serving {

struct QueueOptions {
  SchedulingPolicy policy = SchedulingPolicy::kQos;
  size_t capacity = 256;            // queued + reserved requests
  double aging_ms_per_level = 500;  // <= 0: no aging (and no overdue rule)
  Gauge* depth = nullptr;           // set to the number of queued requests on every change (optional)
  // Receives every request the queue removes without handing it to pop_batch (deadline, cancel, close).
  std::function<void(const PendingRequestPtr&, const Status&)> on_drop;
};

struct BatchLimits {
  int64_t items_max = 64;        // per tower
  Clock::duration delay_max{0};  // wait for more work after the oldest queued arrival
};

// The smallest bucket >= n (buckets sorted ascending); n itself when it is above every bucket or n <= 0: the
// batch-size histograms count the size a CUDA graph bucket runs.
int64_t bucket_for(int64_t n, const std::vector<int>& buckets);

// The effective priority class of an entry of `priority` that waited `waited_ms` (see the file comment).
int effective_priority_class(int priority, double waited_ms, double aging_ms_per_level);

class RequestQueue {
 public:
  explicit RequestQueue(QueueOptions options);
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Reserves a slot: kResourceExhausted when full, the close reason when closed.
  Status reserve();
  // Gives a reserved slot back (the request ended before it was pushed).
  void release();
  // Fills a reserved slot. When closed, releases the slot and returns the close reason; the caller then
  // completes the request itself.
  Status push_reserved(PendingRequestPtr request);
  // reserve() + push_reserved().
  Status push(PendingRequestPtr request);
  // Puts back a request that pop_batch handed out and whose replica failed (model_runtime_replicas.cpp):
  // it was admitted already, so capacity is not checked, and it keeps its arrival time and sequence, so it
  // ranks as it did before (ahead of later arrivals). When closed, returns the close reason (the caller
  // completes the request).
  Status requeue(PendingRequestPtr request);

  // Blocks until a batch is ready (see the file comment) and returns it in scheduling order. Returns an
  // empty vector only once the queue is closed.
  std::vector<PendingRequestPtr> pop_batch(const BatchLimits& limits);
  // Never blocks: takes, in scheduling order and within `limits`' item budget, queued entries whose own priority
  // is better (smaller) than `priority_below`, of one priority (as every qos batch); empty under fifo or when
  // none. The engine thread calls it between chunks of a running batch (preemption at chunk boundaries). The own
  // priority, not the aged class: a flood's requests that aged to class 1 while queued must not count as urgent
  // (their nested batch would run whole, unpreemptible), and a batch of aged work stays preemptible; it still
  // advances one chunk per urgent batch, so aging's starvation bound holds for work that started.
  std::vector<PendingRequestPtr> pop_urgent(int priority_below, const BatchLimits& limits);
  // Whatever is queued now, up to `limits` (either policy, every priority, no waiting): what a running decoder
  // batch admits between its steps (continuous batching, engine::BatchHooks::admit).
  std::vector<PendingRequestPtr> pop_ready(const BatchLimits& limits);

  // Refuses further pushes with `reason`, hands every queued request to on_drop with `reason`, and wakes
  // pop_batch callers (which return empty). Idempotent.
  void close(const Status& reason);

  size_t size() const;  // queued, not counting reservations

 private:
  struct Dropped {
    PendingRequestPtr request;
    Status status;
  };
  void sweep_locked(Clock::time_point now, std::vector<Dropped>& dropped);
  std::vector<PendingRequestPtr> take_locked(Clock::time_point now, const BatchLimits& limits,
                                             int priority_below = std::numeric_limits<int>::max());
  void publish_depth_locked();
  void deliver(std::vector<Dropped>& dropped);

  const QueueOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<PendingRequestPtr> entries_;  // unordered; the order is computed when a batch is taken
  std::array<int64_t, kTowerCount> queued_items_{};
  size_t reserved_ = 0;
  uint64_t next_sequence_ = 0;
  bool closed_ = false;
  Status close_reason_;
};

}  // namespace mmserve::serving
