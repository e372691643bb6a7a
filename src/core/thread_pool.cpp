// ThreadPool: fixed workers over one bounded FIFO of packaged_tasks, plus a work-sharing parallel_for.
//
// A task's exception is stored in its future by std::packaged_task, so a throwing task never kills a
// worker. parallel_for hands out chunks from an atomic cursor to the caller and to helper tasks; the caller
// claims chunks too and then waits only for chunks already claimed by running helpers, so it finishes even
// if no helper ever starts (pool busy, queue full, or the caller itself is a pool worker): no deadlock and
// no nested-pool special case. The state is shared_ptr-owned because helpers may start after the caller
// returned; they find no chunk left and never touch `body`. Tests: tests/unit/core/thread_pool_test.cpp.
#include "core/thread_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <exception>
#include <memory>

namespace mmserve {
namespace {

// The pool whose worker runs on this thread (nullptr elsewhere): a blocking submit() from a worker into
// its own full queue would wait for itself, so that case runs the task inline instead.
thread_local const ThreadPool* tls_worker_of = nullptr;

struct ParallelForState {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  size_t n = 0;
  size_t grain = 1;
  const std::function<void(size_t)>* body = nullptr;
  std::mutex mutex;
  std::condition_variable all_done;
  size_t done = 0;  // indices finished (or skipped after a failure), under mutex
  std::exception_ptr error;
};

void run_chunks(ParallelForState& s) {
  for (;;) {
    const size_t begin = s.next.fetch_add(s.grain);
    if (begin >= s.n) return;
    const size_t end = std::min(begin + s.grain, s.n);
    if (!s.failed.load(std::memory_order_relaxed)) {
      try {
        for (size_t i = begin; i < end; ++i) (*s.body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (!s.error) s.error = std::current_exception();
        s.failed = true;
      }
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    s.done += end - begin;
    if (s.done == s.n) s.all_done.notify_all();
  }
}

}  // namespace

void set_current_thread_name(std::string_view name) {
  const std::string cut(name.substr(0, 15));  // pthread_setname_np refuses more than 16 bytes with the NUL
  pthread_setname_np(pthread_self(), cut.c_str());
}

bool lower_current_thread_priority(int increment, int* nice_after) {
  const id_t tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);  // -1 is a valid value: errno tells an error apart
  if (errno != 0) return false;
  const int wanted = std::min(19, now + std::max(0, increment));
  if (::setpriority(PRIO_PROCESS, tid, wanted) != 0) return false;
  if (nice_after != nullptr) *nice_after = wanted;
  return true;
}

ThreadPool::ThreadPool(size_t threads, size_t queue_limit, std::string name)
    : queue_limit_(queue_limit), name_(std::move(name)) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  not_empty_.notify_all();
  not_full_.notify_all();
  for (std::thread& t : workers_) t.join();  // workers exit only once the queue is empty
}

void ThreadPool::worker_loop() {
  tls_worker_of = this;
  set_current_thread_name(name_);
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      not_empty_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    not_full_.notify_one();
    task();
  }
}

std::future<void> ThreadPool::submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> future = packaged.get_future();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto full = [this] { return queue_limit_ != 0 && queue_.size() >= queue_limit_; };
    if (full() && tls_worker_of == this) {
      lock.unlock();
      packaged();
      return future;
    }
    not_full_.wait(lock, [&] { return stopping_ || !full(); });
    queue_.push_back(std::move(packaged));
  }
  not_empty_.notify_one();
  return future;
}

std::optional<std::future<void>> ThreadPool::try_submit(std::function<void()> task) {
  std::packaged_task<void()> packaged;
  std::future<void> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_limit_ != 0 && queue_.size() >= queue_limit_) return std::nullopt;
    packaged = std::packaged_task<void()>(std::move(task));
    future = packaged.get_future();
    queue_.push_back(std::move(packaged));
  }
  not_empty_.notify_one();
  return future;
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& body) {
  if (n == 0) return;
  const size_t participants = workers_.size() + 1;
  if (n == 1 || workers_.empty()) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  auto state = std::make_shared<ParallelForState>();
  state->n = n;
  state->body = &body;
  // About four chunks per participant: enough to balance uneven items, few enough to keep the cursor cold.
  state->grain = std::max<size_t>(1, n / (4 * participants));
  const size_t helpers = std::min(workers_.size(), (n + state->grain - 1) / state->grain - 1);
  for (size_t i = 0; i < helpers; ++i) {
    // A full queue just means fewer helpers; the caller covers whatever nobody else claims.
    if (!try_submit([state] { run_chunks(*state); })) break;
  }
  run_chunks(*state);
  std::unique_lock<std::mutex> lock(state->mutex);
  state->all_done.wait(lock, [&] { return state->done == n; });
  if (state->error) std::rethrow_exception(state->error);
}

size_t ThreadPool::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

}  // namespace mmserve
