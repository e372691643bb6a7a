// Helpers for the api's HTTP tests: an HttpServer on a free port over FakeInferenceServer, run on its own
// thread, and raw-socket helpers for what an HTTP client library will not do (trickle bytes, pipeline, hang up).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "api/http_server.h"
#include "fake_inference_server.h"

namespace mmserve::api::testing {

class TestServer {
 public:
  explicit TestServer(HttpServerOptions options = {}) {
    log_path_ = std::filesystem::temp_directory_path() /
                ("mmserve_api_access_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".log");
    std::filesystem::remove(log_path_);
    options.host = "127.0.0.1";
    options.port = 0;
    options.access_log_path = log_path_.string();
    StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::create(fake, std::move(options));
    EXPECT_TRUE(server.ok()) << server.status().to_string();
    server_ = std::move(*server);
    const Status bound = server_->bind();
    EXPECT_TRUE(bound.ok()) << bound.to_string();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~TestServer() {
    stop();
    std::filesystem::remove(log_path_);
  }
  void stop() {
    if (!server_) return;
    server_->begin_shutdown();
    EXPECT_TRUE(server_->finish_shutdown(std::chrono::seconds(20)));
    thread_.join();
    server_.reset();
  }
  int port() const { return server_->port(); }
  HttpServer& http() { return *server_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_for_client());
    c.set_read_timeout(10, 0);
    return c;
  }
  std::string access_log() const {
    std::ifstream in(log_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  FakeInferenceServer fake;  // declared before the server: outlives it

 private:
  int port_for_client() const { return server_->port(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path log_path_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the peer closes or `timeout` passes; returns what arrived.
inline std::string read_until_close(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Reads one HTTP response (headers + Content-Length body) from `fd`; `carry` keeps bytes past it.
inline std::string read_response(int fd, std::string& carry, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  auto complete = [&]() -> size_t {
    const size_t end = carry.find("\r\n\r\n");
    if (end == std::string::npos) return 0;
    size_t length = 0;
    std::string head = carry.substr(0, end);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t cl = head.find("content-length:");
    if (cl != std::string::npos) length = std::stoul(head.substr(cl + 15));
    return carry.size() >= end + 4 + length ? end + 4 + length : 0;
  };
  while (complete() == 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    carry.append(buf, static_cast<size_t>(n));
  }
  const size_t n = complete();
  if (n == 0) return "";
  std::string out = carry.substr(0, n);
  carry.erase(0, n);
  return out;
}

inline int status_of(const std::string& response) {
  if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return -1;
  return std::atoi(response.c_str() + 9);
}

}  // namespace mmserve::api::testing
