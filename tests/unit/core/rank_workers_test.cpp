// RankWorkers: every rank runs once per run(), all ranks at the same time (a barrier that every rank must reach
// before any may leave would deadlock otherwise: the test gives it 10 s and fails instead of hanging), rank 0 on
// the calling thread, and the workers are reused over many runs.
#include "core/rank_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace mmserve {
namespace {

TEST(RankWorkers, OneRankRunsOnTheCaller) {
  RankWorkers workers(1);
  std::thread::id seen;
  workers.run([&](int r) {
    EXPECT_EQ(r, 0);
    seen = std::this_thread::get_id();
  });
  EXPECT_EQ(seen, std::this_thread::get_id());
}

TEST(RankWorkers, AllRanksRunConcurrentlyEveryTime) {
  for (int ranks : {2, 3, 8}) {
    RankWorkers workers(ranks);
    ASSERT_EQ(workers.size(), ranks);
    for (int round = 0; round < 200; ++round) {
      std::mutex mutex;
      std::condition_variable cv;
      int arrived = 0;
      bool all_arrived = true;
      std::vector<int> calls(ranks, 0);
      std::set<std::thread::id> threads;
      workers.run([&](int r) {
        std::unique_lock<std::mutex> lock(mutex);
        ++calls[r];
        threads.insert(std::this_thread::get_id());
        if (++arrived == ranks) cv.notify_all();
        // The barrier: only returns once every rank is inside its body at the same time.
        if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == ranks; })) all_arrived = false;
      });
      ASSERT_TRUE(all_arrived) << ranks << " ranks, round " << round << ": not all ranks ran at once";
      for (int r = 0; r < ranks; ++r) ASSERT_EQ(calls[r], 1) << "rank " << r << ", round " << round;
      ASSERT_EQ(threads.size(), static_cast<size_t>(ranks));
      ASSERT_EQ(threads.count(std::this_thread::get_id()), 1u) << "rank 0 runs on the caller";
    }
  }
}

TEST(RankWorkers, ReturnsOnlyAfterTheSlowestRank) {
  RankWorkers workers(4);
  std::atomic<int> finished{0};
  workers.run([&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(r == 3 ? 50 : 1));
    finished.fetch_add(1);
  });
  EXPECT_EQ(finished.load(), 4);
}

}  // namespace
}  // namespace mmserve
