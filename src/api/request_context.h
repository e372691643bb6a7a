// What the api knows about the HTTP request being processed: its arrival time, trace span, route template,
// model, tenant and priority (for metrics, the access log and RequestSpec), decisions the transport took before
// routing (refuse early, close afterwards), and a probe that tells whether the client has gone.
//
// The transport (connection_server.cpp) creates one per request and makes it current on the worker thread
// for exactly the duration of httplib's processing of that request: the pre-routing hook, the handler and the
// logger all run there, so a thread-local pointer is enough and nothing is shared across threads except the
// PeerProbe, which RequestSpec.cancelled may call from a serving thread. Tests: tests/unit/api/http_server_test.cpp.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "api/trace_context.h"
#include "serving/request.h"

namespace mmserve::api {

// Whether the client of a connection has closed it (or reset it), checked with recv(MSG_PEEK | MSG_DONTWAIT):
// 0 bytes = orderly close, ECONNRESET & co = reset, data or EAGAIN = still there. A client that half-closes
// (shutdown(SHUT_WR)) after sending its request also reads as gone: HTTP/1.1 clients do not do that.
// Safe to call from any thread; after detach() (the request is over and the socket may be reused) it answers
// false.
class PeerProbe {
 public:
  explicit PeerProbe(int fd) : fd_(fd) {}
  bool gone() const;
  void detach();

 private:
  mutable std::mutex mutex_;
  int fd_;
};

struct RequestContext {
  serving::Clock::time_point start = serving::Clock::now();  // headers complete
  TraceContext trace;
  std::string route = "unmatched";  // the route template, never the raw path (metrics cardinality)
  int route_index = -1;             // into the route table; -1 when unmatched
  std::string model;                // from the path or the body
  std::string version;              // the {version} path segment, if any
  std::string tenant = "default";
  int priority = 0;          // 0 = the model's default
  size_t request_bytes = 0;  // Content-Length as sent
  // Set by the transport before routing: answer this status with this message without reading the body.
  int early_status = 0;
  std::string early_message;
  bool close_connection = false;  // the body was left unread: close after the response
  bool checked = false;           // the api's pre-routing checks have run
  bool expect_continue = false;   // the client waits for "100 Continue" before sending its body
  // A streamed response (server-sent events): its length is unknown, so the transport bounds each write
  // (response_timeout_s) instead of the whole response.
  bool streaming = false;
  std::shared_ptr<PeerProbe> peer;
  // The span's routing trace (x-mmserve-trace-routing on a Mixtral; a stream's is set when its end events are
  // made, before the access log line is written): a JSON object for the access log line.
  std::string routing;
  // Gate routing's choice of adapters (a JSON array), for the access log line likewise.
  std::string adapters;
};

// The context of the request this thread is processing, or nullptr.
RequestContext* current_request_context();

// Makes `context` current for its lifetime.
class ScopedRequestContext {
 public:
  explicit ScopedRequestContext(RequestContext* context);
  ~ScopedRequestContext();
  ScopedRequestContext(const ScopedRequestContext&) = delete;
  ScopedRequestContext& operator=(const ScopedRequestContext&) = delete;

 private:
  RequestContext* previous_;
};

}  // namespace mmserve::api
