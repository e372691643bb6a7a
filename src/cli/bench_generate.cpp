// The generation profile's prompts, streaming client and arrivals (see bench_generate.h); the report is in
// bench_generate_report.cpp.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "cli/bench_generate.h"

namespace mmserve::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Job {
  std::string body;
  int64_t max_tokens = 0;
  Clock::time_point scheduled;
};

// The request bodies, drawn from one seeded generator (callers serialise next()).
class PromptMaker {
 public:
  explicit PromptMaker(const GenerateBenchOptions& o) : o_(o), rng_(o.seed) {
    for (int i = 0; i < o.prefix_tokens; ++i) prefix_.push_back(id());
  }
  Job next(Clock::time_point when) {
    json body = {{"model", o_.model},
                 {"max_tokens", 0},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (!o_.prompt_text.empty()) {
      body["prompt"] = o_.prompt_text;
    } else {
      std::vector<int> ids = prefix_;
      const int n = std::uniform_int_distribution<int>(o_.prompt_tokens_min, o_.prompt_tokens_max)(rng_);
      for (int i = 0; i < n; ++i) ids.push_back(id());
      body["prompt"] = ids;
    }
    Job job;
    job.max_tokens = std::uniform_int_distribution<int>(o_.max_tokens_min, o_.max_tokens_max)(rng_);
    body["max_tokens"] = job.max_tokens;
    job.body = body.dump();
    job.scheduled = when;
    return job;
  }

 private:
  int id() { return std::uniform_int_distribution<int>(o_.token_id_min, o_.token_id_max - 1)(rng_); }
  const GenerateBenchOptions& o_;
  std::mt19937_64 rng_;
  std::vector<int> prefix_;
};

const char* transport_error_name(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "connection";
    case httplib::Error::ConnectionTimeout: return "connect_timeout";
    case httplib::Error::Read: return "read";
    case httplib::Error::Write: return "write";
    case httplib::Error::Canceled: return "canceled";
    default: return "other";
  }
}

// Reads one server-sent event of a completions stream into `o`.
void read_event(const std::string& event, Clock::time_point now, const Job& job, GenerateOutcome& o,
                Clock::time_point& last_text) {
  if (event.rfind("data: ", 0) != 0) return;
  const std::string data = event.substr(6);
  if (data == "[DONE]") return;
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    o.stream_error = "an event that is not JSON";
    return;
  }
  if (j.contains("error")) {
    o.stream_error = j["error"].dump();
    return;
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    o.prompt_tokens = u->value("prompt_tokens", int64_t{0});
    o.output_tokens = u->value("completion_tokens", int64_t{0});
  }
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return;
  for (const json& c : *choices) {
    const auto text = c.find("text");
    if (text == c.end() || !text->is_string() || text->get_ref<const std::string&>().empty()) continue;
    if (o.ttft_ms < 0) {
      o.ttft_ms = ms_between(job.scheduled, now);
    } else {
      o.itl_ms.push_back(ms_between(last_text, now));
    }
    last_text = now;
  }
}

GenerateOutcome send_one(httplib::Client& client, const std::string& path, const httplib::Headers& headers,
                         const Job& job) {
  GenerateOutcome o;
  o.max_tokens = job.max_tokens;
  std::string buffer;
  Clock::time_point last_text;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.body = job.body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    o.http_status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (o.http_status != 200) return true;  // an error body: the status says enough
    const Clock::time_point now = Clock::now();
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      read_event(buffer.substr(0, end), now, job, o, last_text);
      buffer.erase(0, end + 2);
    }
    return true;
  };
  httplib::Result res = client.send(req);
  o.e2e_ms = ms_between(job.scheduled, Clock::now());
  if (!res) {
    o.http_status = 0;
    o.transport_error = transport_error_name(res.error());
  } else {
    o.http_status = res->status;
  }
  return o;
}

// Worker threads with a client each. Open loop: dispatch() hands a job to an idle worker or reports none is
// free. Closed loop: each worker makes and sends its own jobs until the window ends.
class Clients {
 public:
  Clients(const GenerateBenchOptions& o, int count, PromptMaker& maker)
      : o_(o), maker_(maker), workers_(static_cast<size_t>(count)) {
    path_ = o.server.base_path + "/v1/completions";
    headers_ = {{"Accept", "text/event-stream"}};
    if (!o.api_key.empty()) headers_.emplace("Authorization", "Bearer " + o.api_key);
    const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(o.timeout_s));
    for (auto& w : workers_) {
      w.client = std::make_unique<httplib::Client>(o.server.host, o.server.port);
      w.client->set_connection_timeout(timeout);
      w.client->set_read_timeout(timeout);
      w.client->set_write_timeout(timeout);
      w.client->set_keep_alive(true);
      w.client->set_tcp_nodelay(true);
    }
    for (int i = count - 1; i >= 0; --i) idle_.push_back(i);
  }
  ~Clients() { stop(std::chrono::duration<double>(0)); }

  void start_open() {
    for (size_t i = 0; i < workers_.size(); ++i) workers_[i].thread = std::thread([this, i] { serve_jobs(i); });
  }
  void start_closed(Clock::time_point start, Clock::time_point end) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      workers_[i].thread = std::thread([this, i, start, end] { loop_until(i, start, end); });
    }
  }

  bool dispatch(Job job) {
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++arrivals_;
      if (idle_.empty()) {
        ++dropped_;
        return false;
      }
      index = static_cast<size_t>(idle_.back());
      idle_.pop_back();
      ++busy_;
      workers_[index].job = std::move(job);
    }
    workers_[index].wake.notify_one();
    return true;
  }

  // Waits up to `grace` for requests in flight, cuts the rest and joins; how many were cut. Idempotent.
  int64_t stop(std::chrono::duration<double> grace) {
    int64_t cut = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (joined_) return 0;
      stopping_ = true;
      for (auto& w : workers_) w.wake.notify_one();
      all_idle_.wait_for(lock, grace, [&] { return busy_ == 0; });
      cut = busy_;
    }
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        for (auto& w : workers_) w.wake.notify_one();
        if (all_idle_.wait_for(lock, std::chrono::milliseconds(100), [&] { return busy_ == 0; })) break;
      }
      for (auto& w : workers_) w.client->stop();
    }
    for (auto& w : workers_) {
      if (w.thread.joinable()) w.thread.join();
    }
    joined_ = true;
    return cut;
  }

  // After stop().
  std::vector<GenerateOutcome> take_outcomes() {
    std::vector<GenerateOutcome> all;
    for (auto& w : workers_) {
      for (auto& o : w.outcomes) all.push_back(std::move(o));
    }
    return all;
  }
  int64_t arrivals() const { return arrivals_; }
  int64_t dropped() const { return dropped_; }
  std::optional<Clock::time_point> last_completion() const { return last_; }

 private:
  struct Worker {
    std::unique_ptr<httplib::Client> client;
    std::condition_variable wake;
    std::optional<Job> job;                 // guarded by mutex_
    std::vector<GenerateOutcome> outcomes;  // the worker's thread's until joined
    std::thread thread;
  };

  void finished(size_t index, GenerateOutcome o, bool back_to_idle) {
    workers_[index].outcomes.push_back(std::move(o));
    std::lock_guard<std::mutex> lock(mutex_);
    if (back_to_idle) idle_.push_back(static_cast<int>(index));
    --busy_;
    const Clock::time_point now = Clock::now();
    if (!last_ || now > *last_) last_ = now;
    if (busy_ == 0) all_idle_.notify_all();
  }

  void serve_jobs(size_t index) {
    Worker& w = workers_[index];
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        w.wake.wait(lock, [&] { return w.job.has_value() || stopping_; });
        if (!w.job) return;
        job = std::move(*w.job);
        w.job.reset();
      }
      finished(index, send_one(*w.client, path_, headers_, job), true);
    }
  }

  void loop_until(size_t index, Clock::time_point start, Clock::time_point end) {
    std::this_thread::sleep_until(start);
    for (;;) {
      Job job;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const Clock::time_point now = Clock::now();
        if (stopping_ || now >= end) return;
        job = maker_.next(now);
        ++arrivals_;
        ++busy_;
      }
      finished(index, send_one(*workers_[index].client, path_, headers_, job), false);
    }
  }

  const GenerateBenchOptions& o_;
  PromptMaker& maker_;
  std::string path_;
  httplib::Headers headers_;
  std::vector<Worker> workers_;
  std::mutex mutex_;
  std::condition_variable all_idle_;
  std::vector<int> idle_;
  int busy_ = 0;
  int64_t arrivals_ = 0, dropped_ = 0;
  bool stopping_ = false;
  bool joined_ = false;
  std::optional<Clock::time_point> last_;
};

}  // namespace

Status validate_generate_options(const GenerateBenchOptions& o) {
  if ((o.rate > 0) == (o.concurrency > 0)) {
    return invalid_argument("--generate needs exactly one of --rate (open loop) and --concurrency (closed loop)");
  }
  if (o.concurrency > 4096) return invalid_argument("--concurrency must be at most 4096");
  if (o.max_tokens_min < 1 || o.max_tokens_max < o.max_tokens_min) {
    return invalid_argument("--max-tokens must be N or MIN:MAX with 1 <= MIN <= MAX");
  }
  if (!o.prompt_text.empty()) {
    if (o.prefix_tokens > 0) return invalid_argument("--prefix-tokens needs token-id prompts, not --prompt");
    return ok_status();
  }
  if (o.prompt_tokens_min < 0 || o.prompt_tokens_max < o.prompt_tokens_min || o.prompt_tokens_max > 1000000) {
    return invalid_argument("--prompt-tokens must be N or MIN:MAX with 0 <= MIN <= MAX");
  }
  if (o.prefix_tokens < 0 || o.prefix_tokens > 1000000) return invalid_argument("--prefix-tokens must be >= 0");
  if (o.prefix_tokens + o.prompt_tokens_min < 1) return invalid_argument("prompts must have at least one token");
  if (o.token_id_min < 0 || o.token_id_max <= o.token_id_min) {
    return invalid_argument("--token-ids must be MIN:MAX with 0 <= MIN < MAX (ids are drawn from [MIN, MAX))");
  }
  return ok_status();
}

GenerateRun run_generate_bench(const GenerateBenchOptions& o) {
  GenerateRun run;
  PromptMaker maker(o);
  const bool closed = o.concurrency > 0;
  Clients clients(o, closed ? o.concurrency : o.connections, maker);
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  if (closed) {
    clients.start_closed(start, end);
    std::this_thread::sleep_until(end);
  } else {
    clients.start_open();
    std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ULL);  // arrivals apart from the prompts' draws
    std::exponential_distribution<double> gap_s(o.rate);
    for (double t = gap_s(rng); t < o.duration_s; t += gap_s(rng)) {
      const auto when = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
      std::this_thread::sleep_until(when);
      clients.dispatch(maker.next(when));
    }
    std::this_thread::sleep_until(end);
  }
  run.cut_at_drain = clients.stop(std::chrono::duration<double>(o.timeout_s));
  run.outcomes = clients.take_outcomes();
  run.arrivals = clients.arrivals();
  run.dropped = clients.dropped();
  run.window_s = o.duration_s;
  run.elapsed_s = o.duration_s;
  if (auto last = clients.last_completion()) {
    run.elapsed_s = std::max(run.elapsed_s, std::chrono::duration<double>(*last - start).count());
  }
  return run;
}

}  // namespace mmserve::cli
