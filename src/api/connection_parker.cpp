// ConnectionServer::Parker and the transport's socket helpers (see connection_parker.h).
// Tests: tests/unit/api/transport_test.cpp.
#include "api/connection_parker.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/thread_pool.h"

namespace mmserve::api {

namespace transport {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

int millis_until(Clock::time_point deadline, Clock::time_point now) {
  if (deadline <= now) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

void close_fd(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

void strip_leading_newlines(std::string& pending) {
  size_t i = 0;
  while (i < pending.size() && (pending[i] == '\r' || pending[i] == '\n')) ++i;
  if (i > 0) pending.erase(0, i);
}

bool headers_complete(const std::string& pending) {
  return pending.find("\r\n\r\n") != std::string::npos || pending.find("\n\n") != std::string::npos;
}

void send_raw_error(int fd, int status, const char* reason, const std::string& message) {
  const std::string body = "{\"error\":\"" + message + "\"}";
  const std::string text =
      "HTTP/1.1 " + std::to_string(status) + " " + reason +
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  [[maybe_unused]] const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace transport

using namespace transport;  // NOLINT: this file is the transport

ConnectionServer::Parker::Parker(const TransportOptions& options, std::function<void(Connection)> dispatch)
    : options_(options),
      dispatch_(std::move(dispatch)),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  thread_ = std::thread([this] {
    set_current_thread_name("mm-poller");
    loop();
  });
}

ConnectionServer::Parker::~Parker() {
  stop();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void ConnectionServer::Parker::park(Connection connection, Clock::time_point deadline, bool idle) {
  const int fd = connection.fd;
  std::unique_lock<std::mutex> lock(mutex_);
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.fd = fd;
  if (stopping_ || parked_.size() >= options_.connections_max ||
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    lock.unlock();
    close_fd(fd);  // shutting down, or too many connections waiting
    return;
  }
  parked_.emplace(fd, Entry{std::move(connection), deadline, idle});
  deadlines_.emplace(deadline, fd);
  if (deadline < sleeping_until_) wake();  // else the poller wakes in time for it anyway
}

void ConnectionServer::Parker::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

void ConnectionServer::Parker::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void ConnectionServer::Parker::set_deadline(int fd, Entry& e, Clock::time_point deadline) {
  deadlines_.erase({e.deadline, fd});
  e.deadline = deadline;
  deadlines_.emplace(deadline, fd);
}

ConnectionServer::Connection ConnectionServer::Parker::unpark(Parked::iterator it) {
  const int fd = it->first;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  deadlines_.erase({it->second.deadline, fd});
  Connection c = std::move(it->second.connection);
  parked_.erase(it);
  return c;
}

void ConnectionServer::Parker::on_readable(int fd, Clock::time_point now, std::vector<Connection>& ready,
                                           std::vector<char>& chunk) {
  auto it = parked_.find(fd);
  if (it == parked_.end()) return;
  Entry& e = it->second;
  const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {  // the client closed (or reset) the connection
    unpark(it);
    close_fd(fd);
    return;
  }
  if (e.idle) {  // a new request starts: its headers get the header timeout from now
    e.idle = false;
    set_deadline(fd, e, now + seconds(options_.header_timeout_s));
  }
  e.connection.pending.append(chunk.data(), static_cast<size_t>(n));
  strip_leading_newlines(e.connection.pending);
  if (headers_complete(e.connection.pending)) {
    e.connection.ready_at = now;
    ready.push_back(unpark(it));
    return;
  }
  if (e.connection.pending.size() > options_.header_bytes_max) {
    unpark(it);
    send_raw_error(fd, 431, "Request Header Fields Too Large",
                   "request headers are larger than " + std::to_string(options_.header_bytes_max) + " bytes");
    for (int reads = 0; reads < 64 && ::recv(fd, chunk.data(), chunk.size(), MSG_DONTWAIT) > 0; ++reads) {
    }
    close_fd(fd);
  }
}

void ConnectionServer::Parker::close_expired(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const int fd = deadlines_.begin()->second;
    auto it = parked_.find(fd);
    const bool head_started = !it->second.idle && !it->second.connection.pending.empty();
    unpark(it);
    if (head_started) send_raw_error(fd, 408, "Request Timeout", "the request headers did not arrive in time");
    close_fd(fd);
  }
}

void ConnectionServer::Parker::loop() {
  std::vector<epoll_event> events(256);  // more ready sockets are reported by the next wait (level-triggered)
  std::vector<char> chunk(16384);
  std::vector<Connection> ready;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    Clock::time_point now = Clock::now();
    sleeping_until_ = now + std::chrono::seconds(1);
    if (!deadlines_.empty()) sleeping_until_ = std::min(sleeping_until_, deadlines_.begin()->first);
    const int timeout_ms = millis_until(sleeping_until_, now);
    lock.unlock();
    const int r = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    lock.lock();
    if (r < 0 && errno != EINTR) break;
    now = Clock::now();
    // Reads first, then deadlines: a connection whose bytes arrived in time is not closed for being late.
    for (int i = 0; i < r; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == wake_fd_) {
        uint64_t value;
        [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &value, sizeof(value));
        continue;
      }
      on_readable(fd, now, ready, chunk);
    }
    close_expired(now);
    if (ready.empty()) continue;
    lock.unlock();
    for (Connection& c : ready) dispatch_(std::move(c));
    ready.clear();
    lock.lock();
  }
  for (auto& [fd, e] : parked_) close_fd(fd);
  parked_.clear();
  deadlines_.clear();
}

}  // namespace mmserve::api
