// PreprocessPool: the server's bounded pool for media decoding (images, audio), shared by every model, with
// priority isolation (issue 13 item 7): tasks run best class first (then arrival), and tasks of the lower classes
// may occupy at most `threads - reserved` workers at once, so `reserved` workers are always free for class-1
// (highest priority) work even under a flood of low-priority image decodes. A plain FIFO pool let a high-priority
// image wait behind every queued low-priority decode.
//
// try_submit() refuses (returns false) when `queue_limit` tasks already wait: the caller answers 429. The
// destructor runs what is queued and joins. All locking is in preprocess_pool.cpp.
// Tests: tests/unit/serving/preprocess_pool_test.cpp.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mmserve::serving {

class PreprocessPool {
 public:
  // threads 0 = hardware concurrency; reserved is clamped to [0, threads - 1] (default: a quarter, at least 1
  // when there are two or more threads).
  PreprocessPool(size_t threads, size_t queue_limit, int reserved = -1);
  ~PreprocessPool();
  PreprocessPool(const PreprocessPool&) = delete;
  PreprocessPool& operator=(const PreprocessPool&) = delete;

  // `priority` 1 = highest. False when the queue is full.
  bool try_submit(int priority, std::function<void()> task);
  size_t size() const { return workers_.size(); }
  size_t reserved() const { return reserved_; }
  size_t queued() const;

 private:
  struct Task {
    int priority;
    uint64_t sequence;
    std::function<void()> run;
  };
  void worker_loop();
  // The index of the task to run next, or -1 when none may run now (only low classes queued, their share busy).
  int pick_locked() const;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Task> queue_;  // small: a linear scan picks the best
  std::vector<std::thread> workers_;
  size_t queue_limit_;
  size_t reserved_ = 0;
  size_t low_running_ = 0;  // tasks of class > 1 running now
  uint64_t next_sequence_ = 0;
  bool stopping_ = false;
};

}  // namespace mmserve::serving
