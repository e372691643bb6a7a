// See rank_workers.h.
#include "core/rank_workers.h"

namespace mmserve {

RankWorkers::RankWorkers(int ranks) : ranks_(ranks < 1 ? 1 : ranks) {
  for (int r = 1; r < ranks_; ++r) threads_.emplace_back([this, r] { worker_loop(r); });
}

RankWorkers::~RankWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankWorkers::run(const std::function<void(int)>& body) {
  if (ranks_ == 1) {
    body(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    running_ = ranks_ - 1;
    ++generation_;
  }
  start_.notify_all();
  body(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return running_ == 0; });
  body_ = nullptr;
}

void RankWorkers::worker_loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* body = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      body = body_;
    }
    (*body)(rank);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --running_;
    }
    done_.notify_one();
  }
}

}  // namespace mmserve
