// The open-loop scheduler and connection pool of `mmserve bench` (see bench_runner.h).
#include "cli/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "cli/bench_http_client.h"

namespace mmserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Job {
  int class_index = 0;
  int variant = 0;
  Clock::time_point scheduled;
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// N connections, each a thread with its own client. dispatch() never blocks: it hands the job to the most
// recently idle connection or reports that none is free.
class ConnectionPool {
 public:
  ConnectionPool(const RunnerOptions& options, const std::vector<PreparedClass>& classes)
      : classes_(classes), workers_(options.connections) {
    for (auto& w : workers_) {
      w.client = std::make_unique<BenchConnection>(options.server.host, options.server.port, options.timeout_s,
                                                   options.keep_alive);
    }
    // Every request's head is built here, once, like its body: the send loop only writes bytes.
    std::vector<std::pair<std::string, std::string>> base_headers = {{"Accept", "application/json"}};
    if (!options.api_key.empty()) base_headers.emplace_back("Authorization", "Bearer " + options.api_key);
    for (const PreparedClass& pc : classes) {
      std::vector<std::pair<std::string, std::string>> headers = base_headers;
      headers.insert(headers.end(), pc.headers.begin(), pc.headers.end());
      heads_.emplace_back();
      for (const PreparedRequest& req : pc.variants) {
        heads_.back().push_back(build_post_head(encode_request_path(req.path), headers, req.body.size(),
                                                options.server.host, options.server.port, options.keep_alive));
      }
    }
    // Idle stack: worker 0 on top, so at low rates the same few connections do the work.
    for (int i = options.connections - 1; i >= 0; --i) idle_.push_back(i);
    for (int i = 0; i < options.connections; ++i) workers_[i].thread = std::thread([this, i] { work(i); });
  }

  ~ConnectionPool() { shut_down(std::chrono::milliseconds(0)); }

  bool dispatch(const Job& job) {
    int index;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_.empty()) return false;
      index = idle_.back();
      idle_.pop_back();
      ++busy_;
      workers_[index].job = job;
    }
    workers_[index].wake.notify_one();
    return true;
  }

  // Waits up to `grace` for in-flight requests, then cuts the rest (closing their sockets) and joins every
  // thread. Returns how many were cut. Idempotent.
  int64_t shut_down(std::chrono::duration<double> grace) {
    int64_t cut = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (joined_) return 0;
      all_idle_.wait_for(lock, grace, [&] { return busy_ == 0; });
      cut = busy_;
      stopping_ = true;
    }
    for (auto& w : workers_) w.wake.notify_one();
    // A request may be between connect and send when stop() lands; repeat until every worker is out.
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (all_idle_.wait_for(lock, std::chrono::milliseconds(100), [&] { return busy_ == 0; })) break;
      }
      for (auto& w : workers_) w.client->cancel();
    }
    for (auto& w : workers_) {
      if (w.thread.joinable()) w.thread.join();
    }
    joined_ = true;
    return cut;
  }

  // After shut_down(): every outcome, and when the last response arrived.
  std::vector<Outcome> take_outcomes() {
    std::vector<Outcome> all;
    for (auto& w : workers_) all.insert(all.end(), w.outcomes.begin(), w.outcomes.end());
    return all;
  }
  std::optional<Clock::time_point> last_completion() const { return last_completion_; }

 private:
  struct Worker {
    std::unique_ptr<BenchConnection> client;
    std::condition_variable wake;
    std::optional<Job> job;         // guarded by mutex_
    std::vector<Outcome> outcomes;  // touched only by the worker's thread until it is joined
    std::thread thread;
  };

  void work(int index) {
    Worker& w = workers_[index];
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        w.wake.wait(lock, [&] { return w.job.has_value() || stopping_; });
        if (!w.job) return;
        job = *w.job;
        w.job.reset();
      }
      const ExchangeResult res = w.client->exchange(heads_[job.class_index][job.variant],
                                                    classes_[job.class_index].variants[job.variant].body);
      const Clock::time_point done = Clock::now();
      Outcome o;
      o.class_index = job.class_index;
      o.latency_ms = seconds_between(job.scheduled, done) * 1e3;
      o.http_status = res.http_status;
      o.transport_error = res.transport_error;
      w.outcomes.push_back(o);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        idle_.push_back(index);
        --busy_;
        if (!last_completion_ || done > *last_completion_) last_completion_ = done;
        if (busy_ == 0) all_idle_.notify_all();
      }
    }
  }

  const std::vector<PreparedClass>& classes_;
  std::vector<std::vector<std::string>> heads_;  // [class][variant]
  std::vector<Worker> workers_;
  std::mutex mutex_;
  std::condition_variable all_idle_;
  std::vector<int> idle_;
  int busy_ = 0;
  bool stopping_ = false;
  bool joined_ = false;
  std::optional<Clock::time_point> last_completion_;
};

}  // namespace

StatusOr<ServerUrl> parse_server_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) {
    return invalid_argument("--url: https is not supported; use http:// (or a TLS-terminating proxy)");
  }
  if (rest.rfind("http://", 0) == 0)
    rest = rest.substr(7);
  else if (rest.find("://") != std::string::npos)
    return invalid_argument("--url: only http:// URLs: " + url);
  ServerUrl out;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) out.base_path = rest.substr(slash);
  while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  std::string port;
  if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) return invalid_argument("--url: bad IPv6 address in " + url);
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return invalid_argument("--url: bad authority in " + url);
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) return invalid_argument("--url: no host in " + url);
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_argument("--url: bad port in " + url);
    }
    out.port = std::stoi(port);
    if (out.port < 1 || out.port > 65535) return invalid_argument("--url: bad port in " + url);
  }
  return out;
}

BenchRun run_open_loop(const RunnerOptions& options, const std::vector<PreparedClass>& classes) {
  BenchRun run;
  run.arrivals.assign(classes.size(), 0);
  run.dropped.assign(classes.size(), 0);
  std::vector<double> weights;
  weights.reserve(classes.size());
  for (const PreparedClass& c : classes) weights.push_back(c.spec.weight);
  std::mt19937_64 rng(options.seed);
  std::exponential_distribution<double> gap_s(options.rate);
  std::discrete_distribution<int> pick_class(weights.begin(), weights.end());

  ConnectionPool pool(options, classes);
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);  // threads are up by then
  double t = 0;
  for (;;) {
    t += gap_s(rng);
    if (t >= options.duration_s) break;
    const auto when = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
    std::this_thread::sleep_until(when);
    const int c = pick_class(rng);
    const int variant = std::uniform_int_distribution<int>(0, static_cast<int>(classes[c].variants.size()) - 1)(rng);
    ++run.arrivals[c];
    if (!pool.dispatch(Job{c, variant, when})) ++run.dropped[c];
  }
  std::this_thread::sleep_until(
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.duration_s)));
  run.cut_at_drain = pool.shut_down(std::chrono::duration<double>(options.timeout_s));
  run.outcomes = pool.take_outcomes();
  run.window_s = options.duration_s;
  run.elapsed_s = options.duration_s;
  if (auto last = pool.last_completion()) run.elapsed_s = std::max(run.elapsed_s, seconds_between(start, *last));
  return run;
}

}  // namespace mmserve::cli
