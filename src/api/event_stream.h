// Server-sent events for a streamed response (the audio transcription routes, the completions routes): the engine
// thread pushes events as its output grows, the HTTP worker writes them as they come, and the end (the result, an
// error or the family's closing events) is written last.
//
// The HTTP worker waits for the first event or the end before answering, so a request that fails before any
// output gets an ordinary JSON error with its status code; after that the response is 200 text/event-stream. A
// client that hangs up makes the next write fail; push() then returns false, which the engine side takes as a
// cancel. A stream may merge several requests (OpenAI's n choices): each finishes its part, whose closing events
// are queued as it ends; the stream's closing events come once every part has ended. A part that fails before any
// event makes the stream fail at once (wait_started returns its error) and abandons it, so the other parts cancel.
// Tests: through the routes (tests/e2e: the openai npm client's audio and completions tests).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/inference_server.h"

namespace mmserve::api {

class EventStream {
 public:
  using Result = StatusOr<serving::ResponseData>;
  // The closing events for the request's result; `pushed_any` says whether any event was pushed before.
  using EndEvents = std::function<std::vector<std::string>(const Result& result, bool pushed_any)>;
  // Several parts: `part_end` gives part i's closing events when it succeeds (queued at once; may be empty),
  // `end` the stream's once all parts ended, given every part's result.
  using PartEndEvents = std::function<std::vector<std::string>(size_t part, const Result& result)>;
  using AllEndEvents = std::function<std::vector<std::string>(const std::vector<Result>& results, bool pushed_any)>;

  explicit EventStream(EndEvents end);
  EventStream(size_t parts, PartEndEvents part_end, AllEndEvents end);

  // Engine thread: queues one event (already framed, "data: ...\n\n"). false once the client has gone.
  bool push(std::string event);
  // Called exactly once per part, after its last push (finish() is finish_part(0, ...)).
  void finish(Result result) { finish_part(0, std::move(result)); }
  void finish_part(size_t part, Result result);
  // HTTP worker: waits for the first event, a part failing before any event, or the end; that failure's error.
  Status wait_started();
  // HTTP worker: writes what is queued (blocking until there is something), the closing events last.
  bool write_some(httplib::DataSink& sink);
  // True once the client has gone or the stream failed before its first event: parts still queued should drop.
  bool abandoned();

 private:
  const PartEndEvents part_end_;
  const AllEndEvents end_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> events_;
  bool pushed_any_ = false;
  size_t finished_ = 0;
  bool client_gone_ = false;
  std::optional<Status> early_failure_;  // a part's error before any event
  std::vector<Result> results_;
};

}  // namespace mmserve::api
