// PreprocessPool: the server's bounded pool for media decoding (images, audio), shared by every model, with
// priority isolation (issue 13 item 7). Two worker sets: `reserved` workers run class-1 (highest priority) tasks
// only, so they are always free for class-1 work even under a flood of low-priority image decodes; the other
// workers run any class, best class first (then arrival), and take a class-1 task only when no reserved worker
// is idle. With `low_nice` > 0 the second set runs at that much lower OS priority (a per-thread nice value), so
// a flood's decodes yield the cores to the engine and to class-1 work: a nice value cannot be raised back
// without privilege, hence fixed sets rather than threads that change level per task. A plain FIFO pool let a
// high-priority image wait behind every queued low-priority decode.
//
// try_submit() refuses (returns false) when `queue_limit` tasks already wait: the caller answers 429. The
// destructor runs what is queued (any worker takes any task then) and joins. All locking is in
// preprocess_pool.cpp. Tests: tests/unit/serving/preprocess_pool_test.cpp.
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
  // when there are two or more threads). low_nice: how much the non-reserved workers lower their OS priority
  // (0 = not at all; the kernel caps a nice value at 19).
  PreprocessPool(size_t threads, size_t queue_limit, int reserved = -1, int low_nice = 0);
  ~PreprocessPool();
  PreprocessPool(const PreprocessPool&) = delete;
  PreprocessPool& operator=(const PreprocessPool&) = delete;

  // `priority` 1 = highest. False when the queue is full.
  bool try_submit(int priority, std::function<void()> task);
  size_t size() const { return workers_.size(); }
  size_t reserved() const { return reserved_; }
  size_t reserved_idle() const;  // reserved workers waiting for a task now
  size_t queued() const;

 private:
  struct Task {
    int priority;
    uint64_t sequence;
    std::function<void()> run;
  };
  void worker_loop(bool reserved);
  // The index of the task a worker of this set runs next, or -1 when none may (a reserved worker sees only
  // class 1; the others leave class 1 to an idle reserved worker).
  int pick_locked(bool reserved) const;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Task> queue_;  // small: a linear scan picks the best
  std::vector<std::thread> workers_;
  size_t queue_limit_;
  size_t reserved_ = 0;
  size_t reserved_idle_ = 0;  // reserved workers waiting for a task
  uint64_t next_sequence_ = 0;
  bool stopping_ = false;
};

}  // namespace mmserve::serving
