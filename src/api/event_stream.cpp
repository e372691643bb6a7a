// EventStream (see event_stream.h).
#include "api/event_stream.h"

namespace mmserve::api {

EventStream::EventStream(EndEvents end)
    : end_([end = std::move(end)](const std::vector<Result>& results, bool pushed_any) {
        return end(results[0], pushed_any);
      }),
      results_(1, Status(StatusCode::kInternal, "not finished")) {}

EventStream::EventStream(size_t parts, PartEndEvents part_end, AllEndEvents end)
    : part_end_(std::move(part_end)),
      end_(std::move(end)),
      results_(parts, Status(StatusCode::kInternal, "not finished")) {}

bool EventStream::push(std::string event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (client_gone_) return false;
  events_.push_back(std::move(event));
  pushed_any_ = true;
  changed_.notify_all();
  return true;
}

void EventStream::finish_part(size_t part, Result result) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (part >= results_.size()) return;  // a caller's bug; never index out of range
  if (!result.ok() && !pushed_any_ && !early_failure_ && results_.size() > 1) {
    early_failure_ = result.status();
    client_gone_ = true;  // the others cancel at their next push
  }
  if (result.ok() && part_end_ && !client_gone_) {
    for (std::string& e : part_end_(part, result)) {
      events_.push_back(std::move(e));
      pushed_any_ = true;
    }
  }
  results_[part] = std::move(result);
  ++finished_;
  changed_.notify_all();
}

Status EventStream::wait_started() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return finished_ == results_.size() || !events_.empty() || early_failure_; });
  if (early_failure_) return *early_failure_;
  if (events_.empty() && !pushed_any_ && !results_[0].ok()) return results_[0].status();
  return ok_status();
}

bool EventStream::abandoned() {
  std::lock_guard<std::mutex> lock(mutex_);
  return client_gone_;
}

bool EventStream::write_some(httplib::DataSink& sink) {
  std::deque<std::string> events;
  bool finished = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return finished_ == results_.size() || !events_.empty(); });
    events.swap(events_);
    finished = finished_ == results_.size();
    if (finished) {
      for (std::string& e : end_(results_, pushed_any_)) events.push_back(std::move(e));
    }
  }
  for (const std::string& e : events) {
    if (!sink.write(e.data(), e.size())) {
      std::lock_guard<std::mutex> lock(mutex_);
      client_gone_ = true;
      return false;
    }
  }
  if (finished) sink.done();
  return true;
}

}  // namespace mmserve::api
