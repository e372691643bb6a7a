// Server-sent events for a streamed response (the audio transcription routes, the completions routes): the engine
// thread pushes events as its output grows, the HTTP worker writes them as they come, and the end (the result, an
// error or the family's closing events) is written last.
//
// The HTTP worker waits for the first event or the end before answering, so a request that fails before any
// output gets an ordinary JSON error with its status code; after that the response is 200 text/event-stream. A
// client that hangs up makes the next write fail; push() then returns false, which the engine side takes as a
// cancel. Tests: through the routes (tests/e2e: the openai npm client's audio and completions tests).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/inference_server.h"

namespace mmserve::api {

class EventStream {
 public:
  // The closing events for the request's result; `pushed_any` says whether any event was pushed before.
  using EndEvents = std::function<std::vector<std::string>(const StatusOr<serving::ResponseData>& result,
                                                           bool pushed_any)>;
  explicit EventStream(EndEvents end) : end_(std::move(end)) {}

  // Engine thread: queues one event (already framed, "data: ...\n\n"). false once the client has gone.
  bool push(std::string event);
  // Called exactly once, after the last push.
  void finish(StatusOr<serving::ResponseData> result);
  // HTTP worker: waits for the first event or the end; the error when the request failed before any event.
  Status wait_started();
  // HTTP worker: writes what is queued (blocking until there is something), the closing events last.
  bool write_some(httplib::DataSink& sink);

 private:
  const EndEvents end_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> events_;
  bool pushed_any_ = false;
  bool finished_ = false;
  bool client_gone_ = false;
  StatusOr<serving::ResponseData> result_ = Status(StatusCode::kInternal, "not finished");
};

}  // namespace mmserve::api
