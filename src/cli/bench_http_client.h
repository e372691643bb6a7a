// The HTTP/1.1 client behind `mmserve bench`'s open loop: one blocking socket per connection, kept alive
// across requests, that sends a request head built once before the run together with the prepared body in
// one sendmsg, and reads the answer in large recvs, parsing the head out of its buffer. It replaced
// cpp-httplib's Client::Post there, which copied the ~130 kB body into its own Request on every call, formatted
// the head per request, polled before every read and write, and read the response one byte at a time: on the
// 16-core GPU host the load generator shares the cores with the server it measures, so its CPU per request
// is taken from the server (docs/perf/server_image_path.md, "2026-12-06: the HTTP side").
//
// The bytes on the wire are cpp-httplib 0.11.4's (same headers, values, order and path encoding); answers
// may have a Content-Length, a chunked body, or none (read to the close); 1xx interim answers are skipped.
// The body of an answer is read and dropped: the bench keeps only the status.
// Tested end to end by tests/e2e/client_test.sh bench (the real server, and a scripted one for the wire
// bytes, chunked / close-delimited answers and broken ones).
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mmserve::cli {

// httplib's encode_url: percent-encodes space, + , ; ' CR LF and bytes >= 0x80; leaves the rest as it is.
std::string encode_request_path(const std::string& path);

// The head of a POST of `content_length` bytes of JSON to `path` (already encoded), ending in the blank line,
// with `headers` and the ones httplib adds (Connection: close without keep-alive, Content-Length,
// Content-Type, Host, User-Agent), in httplib's order: by name, case-insensitively, stable.
std::string build_post_head(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers,
                            size_t content_length, const std::string& host, int port, bool keep_alive);

struct ExchangeResult {
  int http_status = 0;                    // 0: no HTTP answer
  const char* transport_error = nullptr;  // then: "connection", "connect_timeout", "write" or "read"
};

// One connection, used by one thread at a time; cancel() may come from any thread.
class BenchConnection {
 public:
  // Every connect, send and receive gives up after `timeout_s`. Without `keep_alive` each request gets a
  // fresh connection (its head says Connection: close).
  BenchConnection(std::string host, int port, double timeout_s, bool keep_alive);
  ~BenchConnection();
  BenchConnection(const BenchConnection&) = delete;
  BenchConnection& operator=(const BenchConnection&) = delete;

  // Sends head + body (connecting first when no live connection is open) and reads the whole answer.
  ExchangeResult exchange(const std::string& head, const std::string& body);

  // Cuts the request in flight (its exchange() fails with "read" or "write") and every later one.
  void cancel();

 private:
  ExchangeResult connect_socket();
  bool reusable();
  void close_socket();
  ExchangeResult send_request(const std::string& head, const std::string& body);
  ExchangeResult read_response();
  // Buffer helpers over [pos_, have_): false on EOF, error or timeout.
  bool fill();
  bool next_line(std::string_view& line);
  bool skip(size_t n);
  bool read_chunked_body();
  void skip_to_eof();

  const std::string host_;
  const int port_;
  const double timeout_s_;
  const bool keep_alive_;
  std::mutex fd_mutex_;  // guards fd_ against cancel() shutting down a descriptor being closed and reused
  int fd_ = -1;
  bool canceled_ = false;  // guarded by fd_mutex_
  std::vector<char> buffer_;
  size_t pos_ = 0, have_ = 0;
};

}  // namespace mmserve::cli
