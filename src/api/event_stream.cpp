// EventStream (see event_stream.h).
#include "api/event_stream.h"

namespace mmserve::api {

bool EventStream::push(std::string event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (client_gone_) return false;
  events_.push_back(std::move(event));
  pushed_any_ = true;
  changed_.notify_all();
  return true;
}

void EventStream::finish(StatusOr<serving::ResponseData> result) {
  std::lock_guard<std::mutex> lock(mutex_);
  result_ = std::move(result);
  finished_ = true;
  changed_.notify_all();
}

Status EventStream::wait_started() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return finished_ || !events_.empty(); });
  if (events_.empty() && !pushed_any_ && !result_.ok()) return result_.status();
  return ok_status();
}

bool EventStream::write_some(httplib::DataSink& sink) {
  std::deque<std::string> events;
  bool finished = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return finished_ || !events_.empty(); });
    events.swap(events_);
    finished = finished_;
    if (finished) {
      for (std::string& e : end_(result_, pushed_any_)) events.push_back(std::move(e));
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
