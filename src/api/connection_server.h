// The HTTP transport under the api: cpp-httplib's request parsing, routing and response writing, with this
// file's own connection handling so that slow or idle clients cannot take the worker threads.
//
// httplib 0.11 gives each accepted connection a worker thread for its whole life, blocked in read() while a
// client trickles its headers or idles on keep-alive: ~N slow clients wedge an N-thread server (slowloris).
// Here a worker only ever runs a request whose headers have fully arrived. Connections waiting for their next
// request's headers are "parked" with one poller thread (connection_parker.h: an epoll set, non-blocking reads
// into a per-connection buffer), which hands a connection to the worker pool once it holds "\r\n\r\n", and
// closes it when its header deadline (from connection or first byte) or keep-alive deadline passes, or answers
// 431 when the headers grow past the limit. Workers read the rest through BufferedSocketStream (poll + recv
// with a per-read timeout and a deadline for the whole body; writes likewise), call httplib's
// Server::process_request, and park the connection again. Before routing, setup checks what can be refused
// without reading the body (chunked bodies 411, Content-Length above the limit 413, a malformed Content-Length
// 400) and then closes the connection after a short lingering drain so the client still reads the answer.
// `Expect: 100-continue` is answered by the stream when the body is first read, so a request the api refuses
// before reading its body (401, 413, 415, ...) gets that answer instead of "100 Continue".
// It overrides httplib's private virtual process_and_close_socket(), the extension point SSLServer uses.
// Threads are named for `top -H`: mm-http (workers), mm-http-low (the low-priority set, when
// background_nice > 0), mm-poller, mm-accept (the thread that calls run()).
// Tests: tests/unit/api/transport_test.cpp (slow clients, keep-alive, pipelining, early 413, 431),
// tests/unit/api/http_server_test.cpp, tests/e2e/server_test.cpp.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mmserve::api {

struct TransportOptions {
  int threads = 8;                  // workers running requests
  double read_timeout_s = 5;        // longest wait for any one read to make progress
  double write_timeout_s = 5;       // ... or write
  double header_timeout_s = 10;     // a request's headers must arrive within this of its first byte
  double body_timeout_s = 60;       // the whole body must arrive within this of the headers
  double response_timeout_s = 60;   // the whole response must be written within this
  double keep_alive_timeout_s = 5;  // an idle keep-alive connection is closed after this
  int keep_alive_requests_max = 1000;
  size_t connections_max = 10000;  // parked connections; beyond it new connections are closed
  size_t header_bytes_max = 64 * 1024;
  size_t body_bytes_max = 64u << 20;
  double linger_s = 2;  // draining an unread body before closing after an early refusal
  // > 0: requests whose headers say `x-mmserve-priority: p` with p > 1 run on a second set of `threads` workers
  // (mm-http-low) at this much lower OS priority (nice), chosen from the raw headers before the body is read or
  // parsed, so a low-priority flood's JSON/base64 work yields the cores to urgent requests. 0: one set.
  int background_nice = 0;
};

// The value of the request head's first `x-mmserve-priority` header (name case-insensitive) when it is a
// positive integer, else 0 (absent or malformed: the api answers a malformed one). `head` is the raw request
// line and headers, up to and including the blank line or not.
int request_head_priority(std::string_view head);

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(TransportOptions options);
  ~ConnectionServer() override;
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // Binds and listens (port 0 = any free port). kUnavailable when the address cannot be bound.
  Status bind(const std::string& host, int port);
  int port() const { return port_; }
  // Accepts connections until begin_shutdown(); call once, after bind().
  void run();
  // Stops accepting, closes parked (idle or incomplete) connections; requests being processed finish and
  // their connections close after the response. Safe from any thread, also before run().
  void begin_shutdown();
  // Waits (at most `timeout`) until every request being processed has been answered, then joins the workers.
  // false when requests were still running at the timeout (the workers are then left running).
  bool finish_shutdown(std::chrono::milliseconds timeout);
  bool shutting_down() const { return stopping_.load(); }
  // For the pre-routing handler, once the api has accepted the request it is routing on this thread: reads the
  // request's body now, when it has a plain Content-Length (not chunked, compressed or multipart) and the method
  // is POST, in one buffer of that length straight from the socket (httplib would read it 4 KiB at a time into a
  // doubling string). A request refused before this call never has its body read. Does nothing for other requests
  // or when called twice; a short or timed-out body is answered 400 by httplib as before, and the connection
  // closes after the answer.
  void read_accepted_body();
  const TransportOptions& transport_options() const { return options_; }

 private:
  struct Connection;
  class WorkerPool;
  class Parker;

  bool process_and_close_socket(socket_t sock) override;  // httplib's per-connection entry point
  // On a worker of the set `background` names: requests with complete headers, until the connection idles or
  // its next (pipelined) request belongs to the other set.
  void serve(Connection connection, bool background);
  bool is_background(const Connection& connection) const;  // its next request runs on the low-priority set
  void dispatch(Connection connection);                    // to the worker set its next request belongs to
  void setup_request(httplib::Request& request);           // before routing: early refusals

  TransportOptions options_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<WorkerPool> background_pool_;  // only when background_nice > 0
  std::unique_ptr<Parker> parker_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> run_active_{false};
  bool finished_ = false;
  int port_ = -1;
};

}  // namespace mmserve::api
