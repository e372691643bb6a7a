// The bench's HTTP/1.1 client (see bench_http_client.h). Blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO give the
// per-call timeouts without a poll before each call; cancel() shuts the socket down from another thread,
// which wakes a blocked send or recv at once.
#include "cli/bench_http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

namespace mmserve::cli {
namespace {

// Big enough for a head and most answers in one recv; a longer header line than this is refused.
constexpr size_t kBufferBytes = size_t{64} * 1024;
constexpr size_t kHeadBytesMax = size_t{64} * 1024;
constexpr ExchangeResult kReadError{0, "read"};

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

bool icontains(std::string_view text, std::string_view word) {
  if (word.size() > text.size()) return false;
  for (size_t i = 0; i + word.size() <= text.size(); ++i) {
    if (iequals(text.substr(i, word.size()), word)) return true;
  }
  return false;
}

// httplib's header map order (detail::ci): by lower-cased name.
struct CaseInsensitiveLess {
  bool operator()(const std::string& a, const std::string& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](char x, char y) { return lower(x) < lower(y); });
  }
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_decimal(std::string_view s, size_t& out) {
  if (s.empty() || s.size() > 18) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<size_t>(c - '0');
  }
  return true;
}

timeval to_timeval(double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  return tv;
}

}  // namespace

std::string encode_request_path(const std::string& path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    const bool escape =
        u >= 0x80 || c == ' ' || c == '+' || c == '\r' || c == '\n' || c == '\'' || c == ',' || c == ';';
    if (!escape) {
      out += c;
      continue;
    }
    out += '%';
    out += kHex[u >> 4];
    out += kHex[u & 15];
  }
  return out;
}

std::string build_post_head(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers,
                            size_t content_length, const std::string& host, int port, bool keep_alive) {
  std::multimap<std::string, std::string, CaseInsensitiveLess> all(headers.begin(), headers.end());
  if (!keep_alive) all.emplace("Connection", "close");
  if (all.count("Host") == 0) {
    const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    all.emplace("Host", port == 80 ? bracketed : bracketed + ":" + std::to_string(port));
  }
  if (all.count("Accept") == 0) all.emplace("Accept", "*/*");
  if (all.count("User-Agent") == 0) all.emplace("User-Agent", "cpp-httplib/0.11.4");
  all.emplace("Content-Type", "application/json");
  all.emplace("Content-Length", std::to_string(content_length));
  std::string head = "POST " + path + " HTTP/1.1\r\n";
  for (const auto& [name, value] : all) head.append(name).append(": ").append(value).append("\r\n");
  head += "\r\n";
  return head;
}

BenchConnection::BenchConnection(std::string host, int port, double timeout_s, bool keep_alive)
    : host_(std::move(host)), port_(port), timeout_s_(timeout_s), keep_alive_(keep_alive), buffer_(kBufferBytes) {}

BenchConnection::~BenchConnection() {
  close_socket();
}

void BenchConnection::cancel() {
  std::lock_guard<std::mutex> lock(fd_mutex_);
  canceled_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void BenchConnection::close_socket() {
  std::lock_guard<std::mutex> lock(fd_mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  pos_ = have_ = 0;
}

ExchangeResult BenchConnection::connect_socket() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0) return {0, "connection"};
  bool timed_out = false, connected = false;
  for (addrinfo* ai = found; ai != nullptr && !connected; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    {
      std::lock_guard<std::mutex> lock(fd_mutex_);
      if (canceled_) {
        ::close(fd);
        break;
      }
      fd_ = fd;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout_s_ * 1000));
      if (rc == 0) timed_out = true;
      int err = 0;
      socklen_t len = sizeof(err);
      rc = (rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) ? 0 : -1;
    }
    if (rc == 0) {
      connected = true;
    } else {
      close_socket();
    }
  }
  ::freeaddrinfo(found);
  if (!connected) return {0, timed_out ? "connect_timeout" : "connection"};
  // Blocking from here on: the timeouts below bound each send and recv.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const timeval tv = to_timeval(timeout_s_);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return {};
}

// A kept-alive connection the server has since closed (its idle timeout) reads as EOF; one non-blocking peek
// finds out before the request is sent into it.
bool BenchConnection::reusable() {
  if (fd_ < 0) return false;
  char c;
  const ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

ExchangeResult BenchConnection::exchange(const std::string& head, const std::string& body) {
  if (!reusable()) {
    close_socket();
    if (ExchangeResult r = connect_socket(); r.transport_error != nullptr) return r;
  }
  if (ExchangeResult r = send_request(head, body); r.transport_error != nullptr) {
    close_socket();
    return r;
  }
  ExchangeResult r = read_response();
  if (r.transport_error != nullptr) close_socket();
  return r;
}

ExchangeResult BenchConnection::send_request(const std::string& head, const std::string& body) {
  iovec iov[2] = {{const_cast<char*>(head.data()), head.size()}, {const_cast<char*>(body.data()), body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = body.empty() ? 1 : 2;
  while (msg.msg_iovlen > 0) {
    const ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return {0, "write"};
    }
    size_t left = static_cast<size_t>(sent);
    while (msg.msg_iovlen > 0 && left >= msg.msg_iov[0].iov_len) {
      left -= msg.msg_iov[0].iov_len;
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
    if (msg.msg_iovlen > 0) {
      msg.msg_iov[0].iov_base = static_cast<char*>(msg.msg_iov[0].iov_base) + left;
      msg.msg_iov[0].iov_len -= left;
    }
  }
  return {};
}

bool BenchConnection::fill() {
  if (pos_ == have_) pos_ = have_ = 0;
  if (have_ == buffer_.size()) {
    if (pos_ == 0) return false;  // a line longer than the buffer
    std::memmove(buffer_.data(), buffer_.data() + pos_, have_ - pos_);
    have_ -= pos_;
    pos_ = 0;
  }
  for (;;) {
    const ssize_t r = ::recv(fd_, buffer_.data() + have_, buffer_.size() - have_, 0);
    if (r > 0) {
      have_ += static_cast<size_t>(r);
      return true;
    }
    if (r < 0 && errno == EINTR) continue;
    return false;  // EOF, a reset, the timeout or cancel()
  }
}

bool BenchConnection::next_line(std::string_view& line) {
  size_t scanned = pos_;
  for (;;) {
    const char* begin = buffer_.data();
    const char* crlf = nullptr;
    for (size_t i = scanned; i + 1 < have_; ++i) {
      if (begin[i] == '\r' && begin[i + 1] == '\n') {
        crlf = begin + i;
        break;
      }
    }
    if (crlf != nullptr) {
      line = std::string_view(begin + pos_, static_cast<size_t>(crlf - (begin + pos_)));
      pos_ = static_cast<size_t>(crlf - begin) + 2;
      return true;
    }
    const size_t scanned_from_pos = (have_ > pos_ + 1 ? have_ - 1 : pos_) - pos_;
    if (!fill()) return false;
    scanned = pos_ + scanned_from_pos;  // fill() may have moved the unread bytes to the front
  }
}

bool BenchConnection::skip(size_t n) {
  for (;;) {
    const size_t take = std::min(n, have_ - pos_);
    pos_ += take;
    n -= take;
    if (n == 0) return true;
    if (!fill()) return false;
  }
}

void BenchConnection::skip_to_eof() {
  pos_ = have_;
  while (fill()) pos_ = have_;
}

bool BenchConnection::read_chunked_body() {
  std::string_view line;
  for (;;) {
    if (!next_line(line)) return false;
    const std::string_view digits = trim(line.substr(0, line.find(';')));
    size_t size = 0;
    if (digits.empty() || digits.size() > 15) return false;
    for (char c : digits) {
      const char l = lower(c);
      const int v = (l >= '0' && l <= '9') ? l - '0' : (l >= 'a' && l <= 'f') ? l - 'a' + 10 : -1;
      if (v < 0) return false;
      size = size * 16 + static_cast<size_t>(v);
    }
    if (size == 0) break;
    if (!skip(size) || !next_line(line) || !line.empty()) return false;
  }
  do {  // trailers, up to the blank line
    if (!next_line(line)) return false;
  } while (!line.empty());
  return true;
}

ExchangeResult BenchConnection::read_response() {
  for (;;) {
    std::string_view line;
    if (!next_line(line)) return kReadError;
    // "HTTP/1.x NNN[ reason]"
    if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ' || (line.size() > 12 && line[12] != ' ')) {
      return kReadError;
    }
    size_t status = 0;
    if (!parse_decimal(line.substr(9, 3), status) || status < 100) return kReadError;
    const bool http10 = line[7] == '0';
    bool chunked = false, close = false, keep = false, has_length = false;
    size_t length = 0, head_bytes = line.size();
    for (;;) {
      if (!next_line(line)) return kReadError;
      if (line.empty()) break;
      head_bytes += line.size() + 2;
      if (head_bytes > kHeadBytesMax) return kReadError;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) return kReadError;
      const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
      if (iequals(name, "Content-Length")) {
        if (!parse_decimal(value, length)) return kReadError;
        has_length = true;
      } else if (iequals(name, "Transfer-Encoding")) {
        chunked = icontains(value, "chunked");
      } else if (iequals(name, "Connection")) {
        close = close || icontains(value, "close");
        keep = keep || icontains(value, "keep-alive");
      }
    }
    if (status < 200) continue;  // 100 Continue and other interim answers: the real one follows
    bool framed = true;
    if (status == 204 || status == 304) {
      // no body
    } else if (chunked) {
      if (!read_chunked_body()) return kReadError;
    } else if (has_length) {
      if (!skip(length)) return kReadError;
    } else {
      skip_to_eof();  // the body runs to the close
      framed = false;
    }
    // Bytes beyond the answer would be taken for the next one's: start over on a fresh connection instead.
    const bool reuse = keep_alive_ && framed && !close && (!http10 || keep) && pos_ == have_;
    if (!reuse) close_socket();
    return {static_cast<int>(status), nullptr};
  }
}

}  // namespace mmserve::cli
