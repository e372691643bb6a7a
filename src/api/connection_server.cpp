// Connection handling under httplib: the worker pool, the buffered socket stream and the checks made before
// routing (see connection_server.h for why); parked connections are connection_parker.cpp's.
// Tests: tests/unit/api/transport_test.cpp, tests/unit/api/http_server_test.cpp.
#include "api/connection_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "api/connection_parker.h"
#include "api/request_context.h"
#include "core/thread_pool.h"

namespace mmserve::api {

using namespace transport;  // NOLINT: the transport's own helpers (connection_parker.h)

namespace {

// Waits for `events` on `fd` until `timeout_s` passes without them or `deadline` passes. false on timeout/error.
bool wait_for(int fd, short events, double timeout_s, Clock::time_point deadline) {
  for (;;) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point until = std::min(deadline, now + seconds(timeout_s));
    if (until <= now) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, millis_until(until, now));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Closes after the response when the client may still be sending a body we did not read: stop writing, read
// and discard for a short while, then close. Closing at once would make the kernel answer the client's
// pending data with a reset, which often destroys the response before the client reads it.
void linger_close(int fd, double linger_s) {
  ::shutdown(fd, SHUT_WR);
  const Clock::time_point deadline = Clock::now() + seconds(linger_s);
  char scratch[16384];
  while (wait_for(fd, POLLIN, linger_s, deadline)) {
    const ssize_t n = ::recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
  }
  ::close(fd);
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// httplib's Stream over a non-blocking socket, reading first from bytes the poller already received.
//
// Two shortcuts around httplib's own I/O, both measured on the image path (docs/perf/server_image_path.md,
// "2026-12-06: the HTTP side"): a plain Content-Length body that the api accepted is read by read_planned_body()
// in one buffer of that size, straight from the socket, instead of httplib's 4 KiB reads appended to a doubling
// std::string (a quarter of the worker's CPU per 136 kB image request); and a response's head is held back and
// sent with the body in one sendmsg (one syscall and one segment instead of two). Calls try the socket first and
// poll only when it would block.
class BufferedSocketStream final : public httplib::Stream {
 public:
  BufferedSocketStream(int fd, std::string pending, const TransportOptions& options, Clock::time_point read_deadline,
                       RequestContext* context)
      : fd_(fd), buffer_(std::move(pending)), options_(options), read_deadline_(read_deadline), context_(context) {}

  bool is_readable() const override {
    return pos_ < buffer_.size() || wait_for(fd_, POLLIN, options_.read_timeout_s, read_deadline_);
  }
  bool is_writable() const override {
    return wait_for(fd_, POLLOUT, options_.write_timeout_s, Clock::now() + seconds(options_.write_timeout_s));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (failed_) return -1;  // a planned body read failed: httplib's own read fails too and answers 400
    if (!answer_continue()) return -1;
    if (pos_ < buffer_.size()) {
      const size_t n = std::min(size, buffer_.size() - pos_);
      std::memcpy(ptr, buffer_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    buffer_.clear();
    pos_ = 0;
    for (;;) {
      if (size >= kChunk) {  // large reads (bodies) go straight to the caller's buffer
        const ssize_t n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
        if (n >= 0) return n;
      } else {
        buffer_.resize(kChunk);
        const ssize_t n = ::recv(fd_, buffer_.data(), kChunk, MSG_DONTWAIT);
        if (n >= 0) {
          buffer_.resize(static_cast<size_t>(n));
          return n == 0 ? 0 : read(ptr, size);
        }
        buffer_.clear();
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      if (errno != EINTR && !wait_for(fd_, POLLIN, options_.read_timeout_s, read_deadline_)) return -1;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!write_started_ || context_->streaming) {
      write_started_ = true;
      write_deadline_ = Clock::now() + seconds(options_.response_timeout_s);
      // httplib writes a response's status line and headers in one call, then its body: hold the head for the
      // body's write. Streamed (chunked) responses send their head at once, for the client to see it start.
      if (!head_sent_ && !context_->streaming) {
        head_sent_ = true;
        held_.assign(ptr, size);
        return static_cast<ssize_t>(size);
      }
    }
    while (held_pos_ < held_.size()) {
      iovec parts[2] = {{held_.data() + held_pos_, held_.size() - held_pos_}, {const_cast<char*>(ptr), size}};
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = 2;
      const ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (!wait_writable()) return -1;
        continue;
      }
      const size_t head_left = held_.size() - held_pos_;
      if (static_cast<size_t>(n) < head_left) {
        held_pos_ += static_cast<size_t>(n);
        continue;
      }
      held_.clear();
      held_pos_ = 0;
      if (static_cast<size_t>(n) > head_left) return n - static_cast<ssize_t>(head_left);
    }
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (!wait_writable()) return -1;
    }
  }

  // Sends a held response head that no body followed (HEAD, empty bodies). false when the connection failed.
  bool flush() {
    if (held_pos_ >= held_.size()) return true;
    std::string head = std::move(held_);
    const size_t from = held_pos_;
    held_.clear();
    held_pos_ = 0;
    for (size_t off = from; off < head.size();) {
      const ssize_t n = write(head.data() + off, head.size() - off);
      if (n < 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // setup_request found a body to read here once the api accepts the request: `length` bytes for
  // `request.body`, announced by a plain Content-Length (no chunking, no Content-Encoding, not multipart).
  void plan_body(httplib::Request* request, size_t length) {
    planned_request_ = request;
    planned_length_ = length;
  }

  // Reads the planned body into the request in one buffer of its length: the bytes already buffered, then recv's
  // of everything left, straight into place. On success the request's Content-Length becomes 0 so that httplib
  // reads nothing more; on a short body, a timeout or an error the stream fails, httplib's own read then fails
  // and answers 400 as before, and the connection closes (its remaining bytes are not a request).
  void read_planned_body() {
    httplib::Request* request = planned_request_;
    planned_request_ = nullptr;
    if (request == nullptr || failed_) return;
    if (!answer_continue()) {
      fail();
      return;
    }
    std::string body(planned_length_, '\0');
    size_t got = std::min(planned_length_, buffer_.size() - pos_);
    std::memcpy(body.data(), buffer_.data() + pos_, got);
    pos_ += got;
    while (got < body.size()) {
      const ssize_t n = ::recv(fd_, body.data() + got, body.size() - got, MSG_DONTWAIT);
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
          (errno != EINTR && !wait_for(fd_, POLLIN, options_.read_timeout_s, read_deadline_))) {
        fail();
        return;
      }
    }
    request->body = std::move(body);
    request->headers.erase("Content-Length");
    request->set_header("Content-Length", "0");
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

  // Bytes received but not consumed by the request (the start of a pipelined next request).
  std::string take_unread() { return pos_ < buffer_.size() ? buffer_.substr(pos_) : std::string(); }

 private:
  static constexpr size_t kChunk = 16384;

  // `Expect: 100-continue` is answered when the body is first wanted (see setup_request). false on a failed write.
  bool answer_continue() {
    if (!context_->expect_continue) return true;
    context_->expect_continue = false;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    const Clock::time_point deadline = Clock::now() + seconds(options_.write_timeout_s);
    for (size_t off = 0; off < kContinue.size();) {
      const ssize_t n = ::send(fd_, kContinue.data() + off, kContinue.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        off += static_cast<size_t>(n);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return false;
      } else if (!wait_for(fd_, POLLOUT, options_.write_timeout_s, deadline)) {
        return false;
      }
    }
    return true;
  }

  // After a send that would block or failed: true to try again.
  bool wait_writable() const {
    if (errno == EINTR) return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    return wait_for(fd_, POLLOUT, options_.write_timeout_s, write_deadline_);
  }

  void fail() {
    failed_ = true;
    context_->close_connection = true;
    buffer_.clear();
    pos_ = 0;
  }

  int fd_;
  std::string buffer_;
  size_t pos_ = 0;
  const TransportOptions& options_;
  Clock::time_point read_deadline_;
  bool write_started_ = false;
  Clock::time_point write_deadline_;
  bool head_sent_ = false;  // the response's first write (its head) was taken
  std::string held_;        // the response head, until the body's write or flush()
  size_t held_pos_ = 0;
  httplib::Request* planned_request_ = nullptr;
  size_t planned_length_ = 0;
  bool failed_ = false;
  RequestContext* context_;
};

// The stream of the request this worker thread is processing (serve() sets it around process_request), for
// setup_request and read_accepted_body, which httplib calls without it.
thread_local BufferedSocketStream* t_stream = nullptr;

}  // namespace

int request_head_priority(std::string_view head) {
  static constexpr std::string_view kName = "x-mmserve-priority:";
  const size_t end = std::min(head.find("\r\n\r\n"), head.size());
  for (size_t line = head.find("\r\n"); line != std::string_view::npos && line < end;
       line = head.find("\r\n", line + 2)) {
    const std::string_view rest = head.substr(line + 2, end - std::min(end, line + 2));
    if (rest.size() < kName.size()) return 0;
    bool same = true;
    for (size_t i = 0; i < kName.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(rest[i])) == kName[i];
    }
    if (!same) continue;
    std::string_view value = rest.substr(kName.size(), rest.find("\r\n") - kName.size());
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    int priority = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), priority);
    return ec == std::errc() && ptr == value.data() + value.size() && priority > 0 ? priority : 0;
  }
  return 0;
}

// A fixed pool of threads running tasks in FIFO order; `nice` > 0 lowers its threads' OS priority.
class ConnectionServer::WorkerPool {
 public:
  WorkerPool(int threads, const char* name, int nice) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      threads_.emplace_back([this, name, nice] {
        set_current_thread_name(name);
        if (nice > 0) (void)lower_current_thread_priority(nice);
        work();
      });
    }
  }
  ~WorkerPool() { stop(); }

  void enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  bool wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_cv_.wait_for(lock, timeout, [this] { return tasks_.empty() && running_ == 0; });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopped_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopped and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
        ++running_;
      }
      task();
      // Only the last running task takes the lock to tell wait_idle(): a lock per task here made the workers
      // and the poller's enqueue wake each other through the mutex (a futex wake per request under load).
      if (running_.fetch_sub(1) == 1) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        idle_cv_.notify_all();
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  std::atomic<int> running_{0};  // raised under mutex_ with the pop, lowered without it
  bool stopped_ = false;
};

namespace {

// httplib's listen loop hands accepted sockets to a TaskQueue it creates and deletes; this one forwards to
// the long-lived worker pool, whose lifetime the ConnectionServer controls.
template <typename Pool>
class ForwardingQueue final : public httplib::TaskQueue {
 public:
  explicit ForwardingQueue(Pool& pool) : pool_(pool) {}
  void enqueue(std::function<void()> fn) override { pool_.enqueue(std::move(fn)); }
  void shutdown() override {}

 private:
  Pool& pool_;
};

}  // namespace

ConnectionServer::ConnectionServer(TransportOptions options) : options_(std::move(options)) {
  pool_ = std::make_unique<WorkerPool>(options_.threads, "mm-http", 0);
  if (options_.background_nice > 0) {
    background_pool_ = std::make_unique<WorkerPool>(options_.threads, "mm-http-low", options_.background_nice);
  }
  parker_ = std::make_unique<Parker>(options_, [this](Connection c) { dispatch(std::move(c)); });
  new_task_queue = [this] { return new ForwardingQueue<WorkerPool>(*pool_); };
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which lets a second server silently share
  // the port instead of failing to bind.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  set_keep_alive_max_count(static_cast<size_t>(std::max(1, options_.keep_alive_requests_max)));
  set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, options_.keep_alive_timeout_s)));
  set_payload_max_length(options_.body_bytes_max);
}

ConnectionServer::~ConnectionServer() {
  begin_shutdown();
  finish_shutdown(std::chrono::hours(1));
}

Status ConnectionServer::bind(const std::string& host, int port) {
  if (port == 0) {
    port_ = bind_to_any_port(host);
    if (port_ < 0) return Status(StatusCode::kUnavailable, "cannot listen on " + host + " (any port)");
  } else {
    if (!bind_to_port(host, port)) {
      return Status(StatusCode::kUnavailable,
                    "cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(errno));
    }
    port_ = port;
  }
  ::listen(svr_sock_, 1024);  // httplib listens with a backlog of 5; a burst of connects needs more
  return ok_status();
}

void ConnectionServer::run() {
  set_current_thread_name("mm-accept");  // httplib's accept loop runs on the caller's thread
  run_active_ = true;
  if (!stopping_) listen_after_bind();
  run_active_ = false;
}

void ConnectionServer::begin_shutdown() {
  stopping_ = true;
  // stop() only acts once the listen loop runs; wait for run() to get there, or to have returned.
  while (run_active_ && !is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop();
  parker_->stop();
}

bool ConnectionServer::finish_shutdown(std::chrono::milliseconds timeout) {
  if (finished_) return true;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (run_active_ && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (run_active_ || !pool_->wait_idle(std::max(left, std::chrono::milliseconds(0)))) return false;
  if (background_pool_) {
    const auto rest = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!background_pool_->wait_idle(std::max(rest, std::chrono::milliseconds(0)))) return false;
    // A background worker may have handed a connection to the normal set meanwhile.
    if (!pool_->wait_idle(std::max(rest, std::chrono::milliseconds(0)))) return false;
    background_pool_->stop();
  }
  pool_->stop();
  finished_ = true;
  return true;
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // headers and body go in separate writes
  ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
  if (stopping_) {
    close_fd(sock);
    return true;
  }
  Connection c;
  c.fd = sock;
  // Most clients send the request right after connecting: serve it now if it is already complete.
  char chunk[16384];
  const ssize_t n = ::recv(sock, chunk, sizeof(chunk), MSG_DONTWAIT);
  if (n == 0) {
    close_fd(sock);
    return true;
  }
  if (n > 0) {
    c.pending.assign(chunk, static_cast<size_t>(n));
    strip_leading_newlines(c.pending);
    if (headers_complete(c.pending)) {
      c.ready_at = Clock::now();
      if (is_background(c)) {
        dispatch(std::move(c));  // this is a normal-set worker (httplib's accept loop hands sockets to pool_)
      } else {
        serve(std::move(c), false);
      }
      return true;
    }
  }
  parker_->park(std::move(c), Clock::now() + seconds(options_.header_timeout_s), false);
  return true;
}

bool ConnectionServer::is_background(const Connection& c) const {
  return background_pool_ != nullptr && request_head_priority(c.pending) > 1;
}

void ConnectionServer::dispatch(Connection c) {
  const bool background = is_background(c);
  (background ? background_pool_ : pool_)->enqueue([this, background, c = std::move(c)]() mutable {
    serve(std::move(c), background);
  });
}

void ConnectionServer::serve(Connection c, bool background) {
  for (;;) {
    RequestContext context;
    context.start = c.ready_at;
    context.peer = std::make_shared<PeerProbe>(c.fd);
    ScopedRequestContext scope(&context);
    BufferedSocketStream stream(c.fd, std::move(c.pending), options_, c.ready_at + seconds(options_.body_timeout_s),
                                &context);
    const bool last = stopping_ || ++c.served >= options_.keep_alive_requests_max;
    bool client_closes = false;
    t_stream = &stream;
    bool ok =
        process_request(stream, last, client_closes, [this](httplib::Request& request) { setup_request(request); });
    t_stream = nullptr;
    ok = stream.flush() && ok;
    context.peer->detach();
    if (!ok || last || client_closes || context.close_connection || stopping_) {
      if (context.close_connection) {
        linger_close(c.fd, options_.linger_s);
      } else {
        close_fd(c.fd);
      }
      return;
    }
    c.pending = stream.take_unread();
    strip_leading_newlines(c.pending);
    if (!headers_complete(c.pending)) break;
    c.ready_at = Clock::now();  // a pipelined request is already here
    if (is_background(c) != background) return dispatch(std::move(c));
  }
  const bool idle = c.pending.empty();
  const double wait_s = idle ? options_.keep_alive_timeout_s : options_.header_timeout_s;
  parker_->park(std::move(c), Clock::now() + seconds(wait_s), idle);
}

void ConnectionServer::read_accepted_body() {
  if (t_stream != nullptr) t_stream->read_planned_body();
}

void ConnectionServer::setup_request(httplib::Request& request) {
  RequestContext* context = current_request_context();
  if (context == nullptr) return;
  context->trace = make_trace_context(request.get_header_value("traceparent"));
  auto refuse = [&](int status, std::string message) {
    context->early_status = status;
    context->early_message = std::move(message);
    context->close_connection = true;
    // Make sure nothing reads a body: the refusal is answered before routing and the connection closed.
    request.headers.erase("Transfer-Encoding");
    request.headers.erase("Content-Length");
    request.set_header("Content-Length", "0");
    request.headers.erase("Connection");
    request.set_header("Connection", "close");
  };
  // `Expect: 100-continue` is answered by the stream when the body is first read, i.e. only after the api's
  // checks passed; a refused request gets its full answer instead (httplib would send 100 before routing).
  std::string expect = request.get_header_value("Expect");
  for (char& ch : expect) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (expect == "100-continue") {
    request.headers.erase("Expect");
    context->expect_continue = true;
  }
  const std::string encoding = request.get_header_value("Transfer-Encoding");
  if (!encoding.empty()) {
    refuse(411, "Transfer-Encoding request bodies (chunked) are not supported; send Content-Length");
    return;
  }
  if (request.has_header("Content-Length")) {
    const std::string value = request.get_header_value("Content-Length");
    uint64_t length = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec != std::errc() || end != value.data() + value.size() || value.empty() ||
        request.get_header_value_count("Content-Length") != 1) {
      refuse(400, "malformed Content-Length");
      return;
    }
    context->request_bytes = length;
    if (length > options_.body_bytes_max) {
      refuse(413, "request body of " + std::to_string(length) + " bytes is larger than the limit of " +
                      std::to_string(options_.body_bytes_max) + " bytes (--max-body-mb)");
      return;
    }
    // httplib reads a POST's body itself unless it is multipart (parsed into files) or compressed (inflated):
    // those stay with httplib; the rest is read by read_accepted_body() once the api accepts the request.
    if (t_stream != nullptr && length > 0 && request.method == "POST" && !request.is_multipart_form_data() &&
        !request.has_header("Content-Encoding")) {
      t_stream->plan_body(&request, static_cast<size_t>(length));
    }
    return;
  }
  // No length and no chunking: no body. httplib would otherwise read a POST's body until the client closes.
  request.set_header("Content-Length", "0");
}

}  // namespace mmserve::api
