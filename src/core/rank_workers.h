// One thread per rank of a tensor-parallel group (issue 6): run(body) calls body(r) for every r in [0, n) at the
// same time, r = 0 on the calling thread and the others on persistent workers, and returns when all have
// returned.
//
// Why not ThreadPool::parallel_for: the bodies of a tensor-parallel forward wait for each other inside every
// all-reduce, so they must all run at once; a pool may hand two indices to one thread (which then waits for
// itself forever). The workers are persistent because a batch-1 forward is a few milliseconds and a thread start
// is tens of microseconds. One run() at a time (the model's engine thread); run() is not reentrant.
// Tests: tests/unit/core/rank_workers_test.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mmserve {

class RankWorkers {
 public:
  explicit RankWorkers(int ranks);  // ranks >= 1; ranks - 1 threads are started
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  int size() const { return ranks_; }
  // body(r) for every rank, concurrently; returns after the last one returns. body must not throw.
  void run(const std::function<void(int)>& body);

 private:
  void worker_loop(int rank);

  int ranks_ = 1;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* body_ = nullptr;
  uint64_t generation_ = 0;  // bumped per run(): a worker runs each generation once
  int running_ = 0;          // workers still inside the current body
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mmserve
