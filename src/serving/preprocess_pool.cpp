// PreprocessPool (see preprocess_pool.h). Tests: tests/unit/serving/preprocess_pool_test.cpp.
#include "serving/preprocess_pool.h"

#include <pthread.h>

#include <algorithm>

namespace mmserve::serving {

PreprocessPool::PreprocessPool(size_t threads, size_t queue_limit, int reserved) : queue_limit_(queue_limit) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t wanted =
      reserved < 0 ? (threads >= 2 ? std::max<size_t>(1, threads / 4) : 0) : static_cast<size_t>(reserved);
  reserved_ = std::min(wanted, threads - 1);
  for (size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "mm-prep");
      worker_loop();
    });
  }
}

PreprocessPool::~PreprocessPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : workers_) t.join();
}

bool PreprocessPool::try_submit(int priority, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || (queue_limit_ > 0 && queue_.size() >= queue_limit_)) return false;
    queue_.push_back(Task{std::max(1, priority), next_sequence_++, std::move(task)});
  }
  changed_.notify_all();
  return true;
}

size_t PreprocessPool::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

int PreprocessPool::pick_locked() const {
  const bool low_allowed = low_running_ < workers_.size() - reserved_;
  int best = -1;
  for (size_t i = 0; i < queue_.size(); ++i) {
    const Task& t = queue_[i];
    if (t.priority > 1 && !low_allowed && !stopping_) continue;
    if (best < 0 || t.priority < queue_[static_cast<size_t>(best)].priority ||
        (t.priority == queue_[static_cast<size_t>(best)].priority &&
         t.sequence < queue_[static_cast<size_t>(best)].sequence)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

void PreprocessPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    int index = -1;
    changed_.wait(lock, [&] {
      index = pick_locked();
      return index >= 0 || (stopping_ && queue_.empty());
    });
    if (index < 0) return;  // stopping, nothing left
    Task task = std::move(queue_[static_cast<size_t>(index)]);
    queue_.erase(queue_.begin() + index);
    const bool low = task.priority > 1;
    if (low) ++low_running_;
    lock.unlock();
    task.run();
    lock.lock();
    if (low) {
      --low_running_;
      changed_.notify_all();  // a low-class task may run again
    }
  }
}

}  // namespace mmserve::serving
