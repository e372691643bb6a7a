// RequestQueue (see request_queue.h): the scheduling lock, admission slots, the batch-forming wait, the
// fifo/qos order with aging, and deadline/cancel sweeping.
//
// The order depends on the time (aging), so it is not kept in a heap: entries sit unordered and each
// pop ranks them (O(n log n) for n <= queue_size, a few microseconds for the default 256, against batches
// that take milliseconds). Tests: tests/unit/serving/request_queue_test.cpp.
#include "serving/request_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mmserve::serving {

int64_t bucket_for(int64_t n, const std::vector<int>& buckets) {
  if (n <= 0) return n;
  for (int b : buckets) {
    if (b >= n) return b;
  }
  return n;
}
namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

bool overdue(int priority, double waited_ms, double aging_ms_per_level) {
  return aging_ms_per_level > 0 && waited_ms >= static_cast<double>(priority) * aging_ms_per_level;
}

}  // namespace

int effective_priority_class(int priority, double waited_ms, double aging_ms_per_level) {
  if (!(aging_ms_per_level > 0) || !(waited_ms > 0)) return std::max(1, priority);
  const double levels = std::floor(waited_ms / aging_ms_per_level);
  if (levels >= static_cast<double>(priority)) return 1;
  return std::max(1, priority - static_cast<int>(levels));
}

RequestQueue::RequestQueue(QueueOptions options) : options_(std::move(options)) {
  MMSERVE_CHECK(options_.capacity >= 1, "queue capacity must be positive");
  MMSERVE_CHECK(static_cast<bool>(options_.on_drop), "RequestQueue needs an on_drop handler");
  publish_depth_locked();
}

RequestQueue::~RequestQueue() {
  close(Status(StatusCode::kUnavailable, "the model's queue was destroyed"));
}

Status RequestQueue::reserve() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return close_reason_;
  if (entries_.size() + reserved_ >= options_.capacity) {
    return resource_exhausted("the model's queue is full (" + std::to_string(options_.capacity) +
                              " requests); retry later");
  }
  ++reserved_;
  return ok_status();
}

void RequestQueue::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  MMSERVE_CHECK(reserved_ > 0, "release() without a reservation");
  --reserved_;
}

Status RequestQueue::push_reserved(PendingRequestPtr request) {
  MMSERVE_CHECK(request != nullptr, "null request");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MMSERVE_CHECK(reserved_ > 0, "push_reserved() without a reservation");
    --reserved_;
    if (closed_) return close_reason_;
    request->enqueued = Clock::now();
    request->sequence = next_sequence_++;
    if (!std::isfinite(request->score)) request->score = 0.0;
    for (int t = 0; t < kTowerCount; ++t) queued_items_[t] += request->items[t];
    entries_.push_back(std::move(request));
    publish_depth_locked();
  }
  changed_.notify_all();
  return ok_status();
}

Status RequestQueue::requeue(PendingRequestPtr request) {
  MMSERVE_CHECK(request != nullptr, "null request");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return close_reason_;
    for (int t = 0; t < kTowerCount; ++t) queued_items_[t] += request->items[t];
    entries_.push_back(std::move(request));
    publish_depth_locked();
  }
  changed_.notify_all();
  return ok_status();
}

Status RequestQueue::push(PendingRequestPtr request) {
  RETURN_IF_ERROR(reserve());
  return push_reserved(std::move(request));
}

size_t RequestQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void RequestQueue::publish_depth_locked() {
  if (options_.depth != nullptr) options_.depth->set(static_cast<double>(entries_.size()));
}

void RequestQueue::sweep_locked(Clock::time_point now, std::vector<Dropped>& dropped) {
  auto keep = entries_.begin();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    PendingRequest& r = **it;
    Status reason;
    if (r.deadline && now >= *r.deadline) {
      reason = Status(StatusCode::kDeadlineExceeded,
                      "the deadline passed after " + std::to_string(static_cast<int64_t>(ms_between(r.enqueued, now))) +
                          " ms in the queue, before the request started");
    } else if (r.cancelled && r.cancelled()) {
      reason = Status(StatusCode::kCancelled, "the client cancelled the request while it was queued");
    }
    if (reason.ok()) {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    } else {
      for (int t = 0; t < kTowerCount; ++t) queued_items_[t] -= r.items[t];
      dropped.push_back({std::move(*it), std::move(reason)});
    }
  }
  entries_.erase(keep, entries_.end());
  if (!dropped.empty()) publish_depth_locked();
}

std::vector<PendingRequestPtr> RequestQueue::take_locked(Clock::time_point now, const BatchLimits& limits,
                                                         int priority_below) {
  struct Ranked {
    size_t index;
    int priority;  // the request's own
    int cls;       // effective (aged)
    bool overdue;
    double score;
    uint64_t sequence;
  };
  const double aging = options_.aging_ms_per_level;
  std::vector<Ranked> ranked;
  ranked.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const PendingRequest& r = *entries_[i];
    const double waited = ms_between(r.enqueued, now);
    const int cls = effective_priority_class(r.priority, waited, aging);
    if (r.priority >= priority_below) continue;
    ranked.push_back({i, r.priority, cls, overdue(r.priority, waited, aging), r.score, r.sequence});
  }
  if (ranked.empty()) return {};
  if (options_.policy == SchedulingPolicy::kFifo) {
    std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) { return a.sequence < b.sequence; });
  } else {
    std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
      if (a.cls != b.cls) return a.cls < b.cls;
      if (a.overdue != b.overdue) return a.overdue;
      if (!a.overdue && a.score != b.score) return a.score > b.score;
      return a.sequence < b.sequence;
    });
  }

  std::vector<PendingRequestPtr> batch;
  std::vector<bool> taken(entries_.size(), false);
  std::array<int64_t, kTowerCount> items{};
  // Under qos a batch holds the requests of one own priority (the first ranked one's), taken in rank order; the
  // others are skipped, not ending the batch. Lower-priority work, aged or not, never rides in an urgent
  // request's batch, where it would make that batch longer and run unpreemptible (model_runtime.cpp preempts a
  // batch whose priority is > 1), and an urgent request skipped here starts at the next chunk boundary.
  const bool one_priority = options_.policy == SchedulingPolicy::kQos;
  for (const Ranked& r : ranked) {
    if (one_priority && r.priority != ranked.front().priority) continue;
    const PendingRequest& request = *entries_[r.index];
    bool fits = true;
    for (int t = 0; t < kTowerCount; ++t) fits = fits && items[t] + request.items[t] <= limits.items_max;
    if (!batch.empty() && !fits) break;
    for (int t = 0; t < kTowerCount; ++t) items[t] += request.items[t];
    taken[r.index] = true;
    batch.push_back(entries_[r.index]);
  }
  std::vector<PendingRequestPtr> rest;
  rest.reserve(entries_.size() - batch.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!taken[i]) rest.push_back(std::move(entries_[i]));
  }
  entries_ = std::move(rest);
  for (int t = 0; t < kTowerCount; ++t) queued_items_[t] -= items[t];
  publish_depth_locked();
  return batch;
}

void RequestQueue::deliver(std::vector<Dropped>& dropped) {
  for (Dropped& d : dropped) options_.on_drop(d.request, d.status);
  dropped.clear();
}

std::vector<PendingRequestPtr> RequestQueue::pop_urgent(int priority_below, const BatchLimits& limits) {
  if (options_.policy != SchedulingPolicy::kQos) return {};
  std::vector<Dropped> dropped;
  std::vector<PendingRequestPtr> urgent;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return {};
    const Clock::time_point now = Clock::now();
    sweep_locked(now, dropped);
    urgent = take_locked(now, limits, priority_below);
  }
  deliver(dropped);
  return urgent;
}

std::vector<PendingRequestPtr> RequestQueue::pop_ready(const BatchLimits& limits) {
  std::vector<Dropped> dropped;
  std::vector<PendingRequestPtr> ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return {};
    const Clock::time_point now = Clock::now();
    sweep_locked(now, dropped);
    ready = take_locked(now, limits, std::numeric_limits<int>::max());
  }
  deliver(dropped);
  return ready;
}

std::vector<PendingRequestPtr> RequestQueue::pop_batch(const BatchLimits& limits) {
  std::vector<Dropped> dropped;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const Clock::time_point now = Clock::now();
    sweep_locked(now, dropped);
    if (!dropped.empty()) {
      lock.unlock();
      deliver(dropped);
      lock.lock();
      continue;
    }
    if (closed_) return {};
    if (entries_.empty()) {
      changed_.wait(lock);
      continue;
    }
    Clock::time_point oldest = Clock::time_point::max(), wake = Clock::time_point::max();
    for (const PendingRequestPtr& r : entries_) {
      oldest = std::min(oldest, r->enqueued);
      if (r->deadline) wake = std::min(wake, *r->deadline);
    }
    bool full = false;
    for (int t = 0; t < kTowerCount; ++t) full = full || queued_items_[t] >= limits.items_max;
    const Clock::time_point ready_at = oldest + limits.delay_max;
    if (full || now >= ready_at) return take_locked(now, limits);
    changed_.wait_until(lock, std::min(ready_at, wake));
  }
}

void RequestQueue::close(const Status& reason) {
  std::vector<Dropped> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
    close_reason_ = reason.ok() ? Status(StatusCode::kUnavailable, "the model's queue is closed") : reason;
    for (PendingRequestPtr& r : entries_) dropped.push_back({std::move(r), close_reason_});
    entries_.clear();
    queued_items_ = {};
    publish_depth_locked();
  }
  changed_.notify_all();
  deliver(dropped);
}

}  // namespace mmserve::serving
