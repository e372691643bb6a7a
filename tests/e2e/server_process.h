// Helpers of the server's end-to-end tests (server_test.cpp, audio_server_test.cpp): `mmserve serve` as a child
// process on a free loopback port (stderr and access log in files), curl through popen, raw sockets, base64.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

// Skips the calling test, saying why, where no GPU is usable (kernels/testing's check) or the build has no CUDA
// backend.
#if MMSERVE_HAS_CUDA
#include "kernels/testing/cuda_test_util.h"
#define MMSERVE_E2E_REQUIRE_GPU() MMSERVE_REQUIRE_GPU()
#else
#define MMSERVE_E2E_REQUIRE_GPU() GTEST_SKIP() << "GPU test skipped: this build has no CUDA backend"
#endif

namespace mmserve::e2e {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

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

// The binary under test: the build's, or MMSERVE_TEST_BINARY (scripts/gpu-check.sh runs these tests on the GPU
// host, where the carried binaries are unpacked elsewhere than the build tree).
inline std::string mmserve_binary() {
  const char* env = std::getenv("MMSERVE_TEST_BINARY");
  return env != nullptr && *env != '\0' ? env : MMSERVE_BINARY;
}

// `mmserve serve` as a child process with its stderr in a file.
class ServerProcess {
 public:
  ServerProcess(const fs::path& repository, std::vector<std::string> extra = {}) : port_(free_port()) {
    err_ = repository.string() + ".stderr";
    log_ = repository.string() + ".access.log";
    std::vector<std::string> args = {mmserve_binary(),    "serve",      "--model-repository",
                                     repository.string(), "--port",     std::to_string(port_),
                                     "--access-log",      log_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test that crashes must not leave its server behind: an orphan keeps the test's stdout pipe open, and ctest
      // then waits for that pipe until its timeout instead of reporting the crash.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Waits for the "serving on" line, then for /v2/health/ready.
  bool wait_ready(std::chrono::seconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (stderr_text().find("mmserve: serving on http://127.0.0.1:" + std::to_string(port_)) != std::string::npos) {
        auto r = client().Get("/v2/health/ready");
        if (r && r->status == 200) return true;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // Sends SIGTERM and returns the exit code (-1 on timeout, 128 + signal when killed).
  int terminate(std::chrono::seconds timeout = 60s) {
    ::kill(pid_, SIGTERM);
    return wait_exit(timeout);
  }

  // Waits for the process to exit by itself; its exit code, or -1 on timeout.
  int wait_exit(std::chrono::seconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string stderr_text() const { return read_file(err_); }
  std::string access_log() const { return read_file(log_); }

 private:
  int port_;
  pid_t pid_ = -1;
  fs::path err_, log_;
};

struct CurlResult {
  int status = 0;
  std::string body;
};

// Runs curl with `args` (already shell-quoted where needed) and returns the status code and body.
inline CurlResult curl(const std::string& args) {
  const std::string body_file = (fs::temp_directory_path() / ("mmserve_curl_" + std::to_string(::getpid()))).string();
  const std::string command = "curl -s -o " + body_file + " -w '%{http_code}' " + args;
  CurlResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 64> buf{};
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  ::pclose(pipe);
  r.status = std::atoi(out.c_str());
  r.body = read_file(body_file);
  fs::remove(body_file);
  return r;
}

}  // namespace mmserve::e2e
