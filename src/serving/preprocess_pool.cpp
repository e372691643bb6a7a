// PreprocessPool (see preprocess_pool.h). Tests: tests/unit/serving/preprocess_pool_test.cpp.
#include "serving/preprocess_pool.h"

#include <algorithm>

#include "core/thread_pool.h"  // set_current_thread_name, lower_current_thread_priority

namespace mmserve::serving {

PreprocessPool::PreprocessPool(size_t threads, size_t queue_limit, int reserved, int low_nice)
    : queue_limit_(queue_limit) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t wanted =
      reserved < 0 ? (threads >= 2 ? std::max<size_t>(1, threads / 4) : 0) : static_cast<size_t>(reserved);
  reserved_ = std::min(wanted, threads - 1);
  for (size_t i = 0; i < threads; ++i) {
    const bool is_reserved = i < reserved_;
    workers_.emplace_back([this, is_reserved, low_nice] {
      set_current_thread_name(is_reserved ? "mm-prep" : "mm-prep-low");
      if (!is_reserved && low_nice > 0) (void)lower_current_thread_priority(low_nice);
      worker_loop(is_reserved);
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

size_t PreprocessPool::reserved_idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_idle_;
}

int PreprocessPool::pick_locked(bool reserved) const {
  int best = -1;
  for (size_t i = 0; i < queue_.size(); ++i) {
    const Task& t = queue_[i];
    if (!stopping_) {
      if (reserved && t.priority > 1) continue;
      if (!reserved && t.priority == 1 && reserved_idle_ > 0) continue;  // an idle reserved worker takes it
    }
    if (best < 0 || t.priority < queue_[static_cast<size_t>(best)].priority ||
        (t.priority == queue_[static_cast<size_t>(best)].priority &&
         t.sequence < queue_[static_cast<size_t>(best)].sequence)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

void PreprocessPool::worker_loop(bool reserved) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    int index = -1;
    if (reserved) ++reserved_idle_;
    changed_.wait(lock, [&] {
      index = pick_locked(reserved);
      return index >= 0 || (stopping_ && queue_.empty());
    });
    // The last idle reserved worker is taking a task: the other set may now take class-1 tasks too.
    if (reserved && --reserved_idle_ == 0) changed_.notify_all();
    if (index < 0) return;  // stopping, nothing left
    Task task = std::move(queue_[static_cast<size_t>(index)]);
    queue_.erase(queue_.begin() + index);
    lock.unlock();
    task.run();
    lock.lock();
  }
}

}  // namespace mmserve::serving
