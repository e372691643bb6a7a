// PreprocessPool: best class first, a share of the workers kept for class 1 under a low-priority flood, the
// other workers at a lower OS priority, bounded queue, every task run before the destructor returns. Real threads; orderings are made deterministic with
// gates (promises) rather than sleeps.
#include "serving/preprocess_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace mmserve::serving {
namespace {

using namespace std::chrono_literals;

TEST(PreprocessPool, AClassOneTaskRunsWhileLowClassesHoldTheirShare) {
  PreprocessPool pool(4, 100, /*reserved=*/1);
  ASSERT_EQ(pool.reserved(), 1u);
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<int> low_started{0};
  for (int i = 0; i < 10; ++i) {  // a flood of low-priority work that blocks until the gate opens
    ASSERT_TRUE(pool.try_submit(3, [&, open] {
      ++low_started;
      open.wait();
    }));
  }
  // Three of four workers take low work; the fourth stays free for class 1.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (low_started.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(low_started.load(), 3);
  std::promise<void> high_ran;
  ASSERT_TRUE(pool.try_submit(1, [&] { high_ran.set_value(); }));
  EXPECT_EQ(high_ran.get_future().wait_for(10s), std::future_status::ready) << "class 1 waited behind the flood";
  EXPECT_EQ(low_started.load(), 3) << "the reserved worker must not take low-class work";
  gate.set_value();
}

int nice_of_this_thread() {
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}

// Waits (bounded) until `done` holds; false at the deadline.
template <typename Pred>
bool eventually(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// The two worker sets: low-class work runs on the non-reserved workers, at their lowered OS priority; class 1
// runs on an idle reserved worker (full priority), and on the other set only when every reserved worker is
// busy (class 1 never waits for a reserved worker).
TEST(PreprocessPool, LowClassesRunAtTheLowerPriorityClassOneOnTheReservedSet) {
  const int base = nice_of_this_thread();
  PreprocessPool pool(3, 100, /*reserved=*/1, /*low_nice=*/4);
  ASSERT_TRUE(eventually([&] { return pool.reserved_idle() == 1; }));
  std::promise<int> low_nice, high_nice;
  ASSERT_TRUE(pool.try_submit(3, [&] { low_nice.set_value(nice_of_this_thread()); }));
  ASSERT_TRUE(pool.try_submit(1, [&] { high_nice.set_value(nice_of_this_thread()); }));
  EXPECT_EQ(low_nice.get_future().get(), std::min(19, base + 4));
  EXPECT_EQ(high_nice.get_future().get(), base) << "class 1 ran on a low-priority worker";

  ASSERT_TRUE(eventually([&] { return pool.reserved_idle() == 1; }));  // back from the class-1 task
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<bool> blocker_started{false};
  ASSERT_TRUE(pool.try_submit(1, [&, open] {
    blocker_started = true;
    open.wait();
  }));
  ASSERT_TRUE(eventually([&] { return blocker_started.load() && pool.reserved_idle() == 0; }));
  std::promise<int> overflow;
  ASSERT_TRUE(pool.try_submit(1, [&] { overflow.set_value(nice_of_this_thread()); }));
  std::future<int> ran = overflow.get_future();
  ASSERT_EQ(ran.wait_for(10s), std::future_status::ready) << "class 1 waited for the busy reserved worker";
  EXPECT_EQ(ran.get(), std::min(19, base + 4));
  gate.set_value();
}

TEST(PreprocessPool, BetterClassesFirstThenArrival) {
  PreprocessPool pool(1, 100, /*reserved=*/0);
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  ASSERT_TRUE(pool.try_submit(2, [open] { open.wait(); }));  // occupies the only worker
  std::mutex m;
  std::vector<int> order;
  auto record = [&](int id) {
    return [&, id] {
      std::lock_guard<std::mutex> lock(m);
      order.push_back(id);
    };
  };
  std::this_thread::sleep_for(50ms);  // let the worker take the blocker (order below is checked either way)
  ASSERT_TRUE(pool.try_submit(3, record(30)));
  ASSERT_TRUE(pool.try_submit(2, record(20)));
  ASSERT_TRUE(pool.try_submit(1, record(10)));
  ASSERT_TRUE(pool.try_submit(2, record(21)));
  gate.set_value();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(m);
      if (order.size() == 4 || std::chrono::steady_clock::now() > deadline) break;
    }
    std::this_thread::yield();
  }
  std::lock_guard<std::mutex> lock(m);
  EXPECT_EQ(order, (std::vector<int>{10, 20, 21, 30}));
}

TEST(PreprocessPool, BoundedQueueAndDrainOnDestruction) {
  std::atomic<int> ran{0};
  {
    PreprocessPool pool(1, 2, 0);
    std::promise<void> gate;
    std::shared_future<void> open = gate.get_future().share();
    ASSERT_TRUE(pool.try_submit(1, [open, &ran] {
      open.wait();
      ++ran;
    }));
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (pool.queued() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    EXPECT_TRUE(pool.try_submit(2, [&ran] { ++ran; }));
    EXPECT_TRUE(pool.try_submit(2, [&ran] { ++ran; }));
    EXPECT_FALSE(pool.try_submit(1, [&ran] { ++ran; })) << "the queue holds 2";
    gate.set_value();
  }
  EXPECT_EQ(ran.load(), 3);
  PreprocessPool one(1, 0);
  EXPECT_EQ(one.reserved(), 0u) << "a single worker cannot be reserved";
}

}  // namespace
}  // namespace mmserve::serving
