// A fixed-size thread pool with a bounded queue, for CPU work outside the kernels (image decoding and
// preprocessing, tokenisation). Kernels parallelise with OpenMP/OpenBLAS instead.
//
// submit() returns a std::future; try_submit() refuses work when the queue is full so that callers can
// apply back-pressure (the server answers 429) instead of queueing without bound. The destructor drains
// the queue and joins. parallel_for() splits [0, n) into chunks over the pool and waits. Workers carry a thread
// name (set_current_thread_name) so that `top -H` and gdb tell the server's threads apart; threads that run
// background work can lower their own OS priority (lower_current_thread_priority).
// Tests: tests/unit/core/thread_pool_test.cpp.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace mmserve {

// Names the calling thread (what `top -H`, `ps -L` and gdb show). Linux keeps 15 bytes: longer names are cut.
void set_current_thread_name(std::string_view name);

// Adds `increment` (> 0) to the calling thread's nice value (Linux keeps one per thread; capped at 19), so the
// scheduler gives it a smaller share of a contended core. Lowering a priority needs no privilege, raising it
// back does (CAP_SYS_NICE or RLIMIT_NICE): callers keep separate thread sets per level rather than switch a
// thread back and forth. Returns the thread's nice value afterwards; false when the kernel refused.
bool lower_current_thread_priority(int increment, int* nice_after = nullptr);

class ThreadPool {
 public:
  // threads == 0 means std::thread::hardware_concurrency(). queue_limit == 0 means unbounded. Every worker is
  // named `name` (15 bytes at most are kept).
  explicit ThreadPool(size_t threads, size_t queue_limit = 0, std::string name = "mm-pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }
  // Blocks while the queue is full.
  std::future<void> submit(std::function<void()> task);
  // Returns nullopt (and does nothing) when the queue is full.
  std::optional<std::future<void>> try_submit(std::function<void()> task);
  // Runs body(i) for i in [0, n) across the pool and the calling thread; returns when all are done.
  void parallel_for(size_t n, const std::function<void(size_t)>& body);
  size_t queued() const;

 private:
  void worker_loop();

  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<std::packaged_task<void()>> queue_;
  std::vector<std::thread> workers_;
  size_t queue_limit_;
  std::string name_;
  bool stopping_ = false;
};

}  // namespace mmserve
