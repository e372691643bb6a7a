// Tests of ThreadPool (src/core/thread_pool.h): results independent of scheduling order, bounded-queue
// refusal and blocking, exceptions through futures, draining on destruction, and parallel_for covering
// every index exactly once, propagating exceptions and not deadlocking when nested inside a pool task; workers
// carry the pool's thread name.
// Waits use promises, so a correct pool passes regardless of timing (the one sleep only gives a broken
// bounded submit() the chance to return early).
#include "core/thread_pool.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace mmserve {
namespace {

TEST(ThreadPoolTest, SizeDefaultsToHardware) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1u);
  ThreadPool three(3);
  EXPECT_EQ(three.size(), 3u);
}

std::string current_thread_name() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(ThreadPoolTest, WorkersCarryThePoolsName) {
  ThreadPool pool(2, 0, "mm-prep");
  std::string seen;
  pool.submit([&] { seen = current_thread_name(); }).get();
  EXPECT_EQ(seen, "mm-prep");
  ThreadPool unnamed(1);
  unnamed.submit([&] { seen = current_thread_name(); }).get();
  EXPECT_EQ(seen, "mm-pool");
}

TEST(ThreadPoolTest, LongThreadNamesAreCutTo15Bytes) {
  std::string seen;
  std::thread([&] {
    set_current_thread_name("mm-engine-clip-gpu-b1-0");
    seen = current_thread_name();
  }).join();
  EXPECT_EQ(seen, "mm-engine-clip-");
}

TEST(ThreadPoolTest, RunsEveryTask) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  std::vector<std::future<void>> futures;
  for (int i = 1; i <= 1000; ++i) futures.push_back(pool.submit([&sum, i] { sum += i; }));
  for (auto& f : futures) f.get();
  EXPECT_EQ(sum.load(), 500500);
}

TEST(ThreadPoolTest, ExceptionSurfacesThroughFuture) {
  ThreadPool pool(2);
  auto f = pool.submit([] { throw std::runtime_error("decode failed"); });
  try {
    f.get();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "decode failed");
  }
  // The worker survived: later tasks still run.
  std::atomic<bool> ran{false};
  pool.submit([&] { ran = true; }).get();
  EXPECT_TRUE(ran);
}

TEST(ThreadPoolTest, BoundedQueueRefusesWhenFull) {
  ThreadPool pool(1, /*queue_limit=*/2);
  std::promise<void> started, release;
  std::shared_future<void> release_f = release.get_future().share();
  auto blocker = pool.submit([&started, release_f] {
    started.set_value();
    release_f.wait();
  });
  started.get_future().wait();  // the worker is busy and the queue is empty
  std::atomic<int> ran{0};
  auto a = pool.try_submit([&] { ++ran; });
  auto b = pool.try_submit([&] { ++ran; });
  auto c = pool.try_submit([&] { ++ran; });
  EXPECT_TRUE(a.has_value());
  EXPECT_TRUE(b.has_value());
  EXPECT_FALSE(c.has_value());
  EXPECT_EQ(pool.queued(), 2u);
  release.set_value();
  blocker.get();
  a->get();
  b->get();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(pool.queued(), 0u);
}

TEST(ThreadPoolTest, SubmitBlocksWhileQueueIsFull) {
  ThreadPool pool(1, /*queue_limit=*/1);
  std::promise<void> started, release;
  std::shared_future<void> release_f = release.get_future().share();
  auto blocker = pool.submit([&started, release_f] {
    started.set_value();
    release_f.wait();
  });
  started.get_future().wait();
  auto queued = pool.submit([] {});  // fills the queue
  std::atomic<bool> returned{false};
  std::thread producer([&] {
    pool.submit([] {}).get();
    returned = true;
  });
  // While the worker is held, the producer cannot have got past submit() (the queue is full).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  release.set_value();
  producer.join();
  EXPECT_TRUE(returned.load());
  blocker.get();
  queued.get();
}

TEST(ThreadPoolTest, DestructorDrainsQueue) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 200; ++i) (void)pool.submit([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 200);
}

TEST(ThreadPoolTest, WorkerSubmittingToItsFullQueueDoesNotDeadlock) {
  ThreadPool pool(1, /*queue_limit=*/1);
  std::atomic<int> ran{0};
  pool.submit([&] {
        // The queue is filled by the first inner submit; the second must not wait for this very worker.
        auto a = pool.submit([&] { ++ran; });
        auto b = pool.submit([&] { ++ran; });
        b.get();
      })
      .get();
  EXPECT_GE(ran.load(), 1);
}

TEST(ParallelForTest, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 2u, 7u, 1000u, 10007u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ParallelForTest, WorksWithoutWorkersAndWithFullQueue) {
  ThreadPool pool(1, /*queue_limit=*/1);
  std::promise<void> started, release;
  std::shared_future<void> release_f = release.get_future().share();
  auto blocker = pool.submit([&started, release_f] {
    started.set_value();
    release_f.wait();
  });
  started.get_future().wait();
  auto filler = pool.submit([] {});
  // The only worker is held and the queue is full: the caller must do all the work alone.
  std::vector<int> hits(500, 0);
  pool.parallel_for(hits.size(), [&](size_t i) { ++hits[i]; });
  for (int h : hits) ASSERT_EQ(h, 1);
  release.set_value();
  blocker.get();
  filler.get();
}

TEST(ParallelForTest, RethrowsAfterAllRunningChunksFinish) {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  try {
    pool.parallel_for(1000, [&](size_t i) {
      ++calls;
      if (i == 500) throw std::out_of_range("index 500");
    });
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "index 500");
  }
  EXPECT_GE(calls.load(), 1);
  EXPECT_LE(calls.load(), 1000);
  // The pool is still usable afterwards.
  std::atomic<int> after{0};
  pool.parallel_for(100, [&](size_t) { ++after; });
  EXPECT_EQ(after.load(), 100);
}

TEST(ParallelForTest, NestedInsidePoolTasksDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  std::vector<std::future<void>> outer;
  // More outer tasks than workers, each running a parallel_for over the same pool.
  for (int t = 0; t < 4; ++t) {
    outer.push_back(pool.submit([&] { pool.parallel_for(1000, [&](size_t i) { sum += static_cast<int64_t>(i); }); }));
  }
  for (auto& f : outer) f.get();
  EXPECT_EQ(sum.load(), 4 * 499500);
}

// Linux keeps a nice value per thread: lowering one thread's priority leaves its creator's alone.
TEST(ThreadPriorityTest, LowersOnlyTheCallingThread) {
  auto nice_of_this_thread = [] { return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid))); };
  const int before = nice_of_this_thread();
  int reported = -100, seen = -100;
  bool lowered = false;
  std::thread([&] {
    lowered = lower_current_thread_priority(3, &reported);
    seen = nice_of_this_thread();
  }).join();
  ASSERT_TRUE(lowered) << "lowering a priority needs no privilege";
  EXPECT_EQ(reported, std::min(19, before + 3));
  EXPECT_EQ(seen, reported);
  EXPECT_EQ(nice_of_this_thread(), before) << "the calling thread's creator kept its priority";
}

}  // namespace
}  // namespace mmserve
