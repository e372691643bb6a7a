// Internal to the transport (connection_server.cpp): the Connection record, the socket helpers both files use,
// and the Parker, the one poller thread ("mm-poller") of parked connections: those between requests (keep-alive)
// or still receiving a request head. It reads their bytes without blocking, hands a connection to a worker once
// its head is complete ("\r\n\r\n"), answers 431 when the head outgrows the limit, and closes it at its header
// deadline (408 if a head had started) or keep-alive deadline, or when the client goes away.
//
// Why epoll: the first version rebuilt a pollfd array of every parked socket on each wake and scanned it after
// poll(), and every park woke it: O(parked) per request, with hundreds of keep-alive clients that grows with the
// request rate squared. Here one level-triggered epoll set holds exactly the parked sockets, so a wake costs
// O(ready); workers add their connection to the set themselves, under the Parker's lock, and wake the poller only
// when that connection's deadline is earlier than the one the poller sleeps until; deadlines are an ordered set.
// Tests: tests/unit/api/transport_test.cpp (slow clients, header and keep-alive deadlines, pipelining, 431),
// tests/unit/api/http_server_test.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/connection_server.h"

namespace mmserve::api {

namespace transport {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s);
// Milliseconds from `now` until `deadline` for poll/epoll_wait, rounded up (0 when past).
int millis_until(Clock::time_point deadline, Clock::time_point now);
void close_fd(int fd);  // shutdown both ways, then close
// Leading empty lines before a request line are ignored (RFC 9112 section 2.2).
void strip_leading_newlines(std::string& pending);
bool headers_complete(const std::string& pending);
// A minimal response written by the transport itself (before httplib parsed anything), best effort.
void send_raw_error(int fd, int status, const char* reason, const std::string& message);

}  // namespace transport

struct ConnectionServer::Connection {
  int fd = -1;
  std::string pending;                    // received, not yet processed
  transport::Clock::time_point ready_at;  // when its headers were complete
  int served = 0;                         // requests answered on it
};

class ConnectionServer::Parker {
 public:
  using Clock = transport::Clock;
  // `dispatch` receives each connection whose request head is complete (on the poller thread; it must not block).
  Parker(const TransportOptions& options, std::function<void(Connection)> dispatch);
  ~Parker();
  Parker(const Parker&) = delete;
  Parker& operator=(const Parker&) = delete;

  // Takes ownership of the connection (any thread). `idle`: waiting between requests, so the deadline is the
  // keep-alive one until a byte arrives, then the header timeout from that byte. Closed at once when stopping or
  // when connections_max are parked already.
  void park(Connection connection, Clock::time_point deadline, bool idle);
  // Closes every parked connection and joins the poller; later parks close their connection. Idempotent.
  void stop();

 private:
  struct Entry {
    Connection connection;
    Clock::time_point deadline;
    bool idle = false;
  };
  using Parked = std::unordered_map<int, Entry>;

  void wake();
  void loop();
  void set_deadline(int fd, Entry& e, Clock::time_point deadline);
  Connection unpark(Parked::iterator it);  // out of the epoll set and the maps (the socket stays open)
  void on_readable(int fd, Clock::time_point now, std::vector<Connection>& ready, std::vector<char>& chunk);
  void close_expired(Clock::time_point now);

  const TransportOptions& options_;
  std::function<void(Connection)> dispatch_;
  int wake_fd_;
  int epoll_fd_;
  std::mutex mutex_;  // guards what follows; the poller holds it except while it waits or dispatches
  Parked parked_;     // by socket
  std::set<std::pair<Clock::time_point, int>> deadlines_;  // (deadline, socket) of every parked connection
  Clock::time_point sleeping_until_ = Clock::time_point::min();
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mmserve::api
