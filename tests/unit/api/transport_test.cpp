// The connection handling under the HTTP server: slow clients cannot take the workers, incomplete headers and
// idle keep-alive connections time out, pipelined and keep-alive requests work, oversize and chunked bodies
// are refused before they are read, client disconnects reach RequestSpec.cancelled, garbage never kills the
// server, shutdown lets in-flight requests finish, every parked connection keeps its own deadline, and requests
// labelled below priority 1 run on the lower-priority worker set.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <random>

#include "test_server.h"

namespace mmserve::api::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kLive = "GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n";

TEST(Transport, SlowClientsDoNotBlockOtherRequests) {
  HttpServerOptions options;
  options.transport.threads = 2;  // far fewer workers than slow clients
  TestServer s(std::move(options));
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head = "POST /v2/models/clip/infer HTTP/1.1\r\nHost: t\r\nX-Padding: ";
    for (size_t i = 0; i < head.size() && !stop; ++i) {
      for (int fd : slow) ::send(fd, &head[i], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(20ms);
    }
  });
  std::this_thread::sleep_for(100ms);
  httplib::Client c = s.client();
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    auto r = c.Post("/v2/models/clip/infer",
                    R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["x"]}]})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(Clock::now() - start, 1s);
  }
  stop = true;
  trickle.join();
  for (int fd : slow) ::close(fd);
}

TEST(Transport, RequestHeadPriorityIsReadFromTheRawHeaders) {
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nHost: t\r\nX-MMServe-Priority: 3\r\n\r\n"), 3);
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nx-mmserve-priority:2\r\nHost: t\r\n\r\n"), 2);
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nx-mmserve-priority: \t1 \r\n\r\n"), 1);
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nHost: t\r\n\r\n"), 0) << "absent";
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nx-mmserve-priority: high\r\n\r\n"), 0) << "malformed";
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nx-mmserve-priority: -2\r\n\r\n"), 0);
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nx-mmserve-priority-extra: 3\r\n\r\n"), 0);
  // Only the head counts: a body (or a pipelined request) after the blank line is not read.
  EXPECT_EQ(request_head_priority("POST /x HTTP/1.1\r\nHost: t\r\n\r\nx-mmserve-priority: 3\r\n"), 0);
  EXPECT_EQ(request_head_priority("x-mmserve-priority: 3\r\n\r\n"), 0) << "the request line is no header";
}

// background_nice: requests labelled below priority 1 are served by the lower-priority worker set (their
// handler runs at the raised nice value), class 1 and unlabelled requests by the normal set; both on one
// keep-alive connection, whose requests switch sets as their labels change.
TEST(Transport, LowPriorityRequestsRunOnTheLowerPriorityWorkers) {
  auto nice_of_this_thread = [] { return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid))); };
  const int base = nice_of_this_thread();
  HttpServerOptions options;
  options.transport.threads = 2;
  options.transport.background_nice = 4;
  TestServer s(options);
  std::atomic<int> seen{-100};
  s.fake.on_infer = [&](const serving::RequestSpec&) { seen = nice_of_this_thread(); };
  httplib::Client c = s.client();
  const std::string body = R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["x"]}]})";
  const std::pair<const char*, int> cases[] = {{"3", std::min(19, base + 4)}, {"1", base}, {"", base},
                                               {"2", std::min(19, base + 4)}, {"1", base}};
  for (const auto& [priority, nice] : cases) {
    httplib::Headers headers;
    if (*priority != '\0') headers.emplace("x-mmserve-priority", priority);
    auto r = c.Post("/v2/models/clip/infer", headers, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(seen.load(), nice) << "x-mmserve-priority '" << priority << "'";
  }
}

TEST(Transport, IncompleteHeadersTimeOut) {
  HttpServerOptions options;
  options.transport.header_timeout_s = 0.3;
  TestServer s(std::move(options));
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /v2/health/live HTTP/1.1\r\nHost: "));
  const auto start = Clock::now();
  const std::string got = read_until_close(fd, 5s);
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(status_of(got), 408) << got;
  ::close(fd);
  // a connection that never sends anything is closed too
  const int silent = connect_to(s.port());
  EXPECT_EQ(read_until_close(silent, 5s), "");
  EXPECT_LT(Clock::now() - start, 3s);
  ::close(silent);
}

TEST(Transport, KeepAlivePipeliningAndIdleTimeout) {
  HttpServerOptions options;
  options.transport.keep_alive_timeout_s = 0.5;
  TestServer s(std::move(options));
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, kLive + "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));  // two requests in one write
  std::string carry;
  const std::string first = read_response(fd, carry, 2s);
  const std::string second = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(first), 200);
  EXPECT_NE(first.find("\"live\":true"), std::string::npos) << first;
  EXPECT_EQ(status_of(second), 200);
  EXPECT_NE(second.find("\r\n\r\nok"), std::string::npos) << second;
  // the same connection after a pause (it was parked between requests)
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(send_all(fd, kLive));
  EXPECT_EQ(status_of(read_response(fd, carry, 2s)), 200);
  // a request split across writes
  ASSERT_TRUE(send_all(fd, "GET /v2/health/live HT"));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(send_all(fd, "TP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_EQ(status_of(read_response(fd, carry, 2s)), 200);
  // then idle: closed after the keep-alive timeout
  const auto start = Clock::now();
  EXPECT_EQ(read_until_close(fd, 5s), "");
  EXPECT_LT(Clock::now() - start, 2s);
  ::close(fd);
}

// The poller's bookkeeping (connection_parker.cpp): with many connections parked on long header deadlines, one
// that goes idle on a short keep-alive deadline is still closed at its own time (parking it wakes the poller,
// which was sleeping until a later deadline), requests keep being answered among them, and the stalled heads
// get their 408 at theirs.
TEST(Transport, EachParkedConnectionKeepsItsOwnDeadline) {
  HttpServerOptions options;
  options.transport.header_timeout_s = 2.5;
  options.transport.keep_alive_timeout_s = 0.3;
  TestServer s(std::move(options));
  std::vector<int> stalled;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "GET /v2/health/live HTTP/1.1\r\n"));  // a head that never completes
    stalled.push_back(fd);
  }
  std::this_thread::sleep_for(50ms);  // the poller now sleeps for its 1 s cap
  const int fd = connect_to(s.port());
  std::string carry;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(send_all(fd, kLive));
    ASSERT_EQ(status_of(read_response(fd, carry, 2s)), 200) << "request " << i;
  }
  const auto idle_from = Clock::now();
  EXPECT_EQ(read_until_close(fd, 5s), "");
  EXPECT_LT(Clock::now() - idle_from, 800ms) << "the keep-alive deadline (0.3 s) must not wait for the poller's sleep";
  ::close(fd);
  for (int stalled_fd : stalled) {
    EXPECT_EQ(status_of(read_until_close(stalled_fd, 5s)), 408);
    ::close(stalled_fd);
  }
}

TEST(Transport, OversizeBodiesAreRefusedBeforeTheyAreRead) {
  HttpServerOptions options;
  options.transport.body_bytes_max = 1 << 20;
  TestServer s(std::move(options));
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd,
                       "POST /v2/models/clip/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                       "Content-Length: 1000000000\r\n\r\n{\"inputs\":"));
  const auto start = Clock::now();
  std::string carry;
  const std::string response = read_response(fd, carry, 5s);
  EXPECT_LT(Clock::now() - start, 1s);  // answered without waiting for the gigabyte
  EXPECT_EQ(status_of(response), 413) << response;
  EXPECT_NE(response.find("\"error\""), std::string::npos);
  EXPECT_NE(response.find("Connection: close"), std::string::npos);
  ::close(fd);
  EXPECT_EQ(s.fake.infer_calls.load(), 0);
}

TEST(Transport, ExpectContinueIsAnsweredWithTheRefusal) {
  HttpServerOptions options;
  options.transport.body_bytes_max = 1 << 20;
  ASSERT_TRUE(options.keys.add("sk").ok());
  TestServer s(std::move(options));
  int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                       "Expect: 100-continue\r\nContent-Length: 100\r\n\r\n"));
  std::string carry;
  std::string response = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(response), 401) << response;
  EXPECT_NE(response.find("authentication_error"), std::string::npos) << "[" << response << "]";
  ::close(fd);
  fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sk\r\n"
                       "Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 99999999\r\n\r\n"));
  carry.clear();
  response = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(response), 413) << response;
  ::close(fd);
  // accepted: 100 Continue, then the answer
  fd = connect_to(s.port());
  const std::string body = R"({"model": "clip", "input": "x"})";
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sk\r\n"
                       "Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n"));
  carry.clear();
  const std::string proceed = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(proceed), 100) << proceed;
  ASSERT_TRUE(send_all(fd, body));
  response = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(response), 200) << response;
  ::close(fd);
}

TEST(Transport, ChunkedMalformedAndOversizeHeadRequests) {
  TestServer s;
  int fd = connect_to(s.port());
  ASSERT_TRUE(
      send_all(fd, "POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"));
  std::string carry;
  std::string response = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(response), 411) << response;
  EXPECT_NE(response.find("invalid_request_error"), std::string::npos) << response;  // OpenAI shape on /v1
  ::close(fd);
  fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /v2/repository/index HTTP/1.1\r\nHost: t\r\nContent-Length: 12abc\r\n\r\n"));
  carry.clear();
  EXPECT_EQ(status_of(read_response(fd, carry, 2s)), 400);
  ::close(fd);
  fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /v2 HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n"));
  const std::string got = read_until_close(fd, 3s);
  EXPECT_TRUE(got.empty() || status_of(got) == 431) << got.substr(0, 200);
  ::close(fd);
  // a POST without Content-Length has no body (not "read until the client closes")
  fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /v2/repository/index HTTP/1.1\r\nHost: t\r\n\r\n"));
  carry.clear();
  const auto start = Clock::now();
  EXPECT_EQ(status_of(read_response(fd, carry, 3s)), 200);
  EXPECT_LT(Clock::now() - start, 1s);
  ::close(fd);
}

// Bodies are read by the transport in one buffer of their Content-Length (read_accepted_body): the bytes that came
// with the head, then the rest in pieces as they arrive, a pipelined request right behind the body, a body far
// larger than one read; a body cut short gets a 400 JSON error and the connection closes.
TEST(Transport, BodiesAreReadWholeInPiecesAndCutShort) {
  TestServer s;
  const std::string text = std::string(300000, 'a');  // many reads' worth; the text is echoed back by length
  const std::string body = R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":[")" + text + R"("]}]})";
  const std::string head =
      "POST /v2/models/clip/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, head + body.substr(0, 100)));  // part of the body with the head
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(send_all(fd, body.substr(100, 150000)));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(send_all(fd, body.substr(150100) + kLive));  // the rest, and the next request behind it
  std::string carry;
  const std::string response = read_response(fd, carry, 5s);
  EXPECT_EQ(status_of(response), 200) << response.substr(0, 300);
  EXPECT_NE(response.find("\"outputs\""), std::string::npos) << response.substr(0, 300);
  EXPECT_EQ(status_of(read_response(fd, carry, 2s)), 200);
  EXPECT_EQ(s.fake.infer_calls.load(), 1);
  ASSERT_EQ(s.fake.last_texts.size(), 1u);
  EXPECT_EQ(s.fake.last_texts[0], text);
  ::close(fd);
  // the whole request in one write, twice on one connection
  fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, head + body + head + body));
  carry.clear();
  EXPECT_EQ(status_of(read_response(fd, carry, 5s)), 200);
  EXPECT_EQ(status_of(read_response(fd, carry, 5s)), 200);
  EXPECT_EQ(s.fake.infer_calls.load(), 3);
  ::close(fd);
  // cut short: the client stops sending (half-close) before Content-Length bytes
  fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, head + body.substr(0, 1000)));
  ::shutdown(fd, SHUT_WR);
  const std::string short_answer = read_until_close(fd, 5s);
  EXPECT_EQ(status_of(short_answer), 400) << short_answer;
  EXPECT_NE(short_answer.find("\"error\""), std::string::npos) << short_answer;
  ::close(fd);
  EXPECT_EQ(s.fake.infer_calls.load(), 3);
}

// A response's head is held back and sent with its body in one write: what arrives is still one well-formed
// response per request, bodyless answers (HEAD, 204-like) included, and streamed answers are unaffected.
TEST(Transport, HeldResponseHeadsArriveWithTheirBodies) {
  TestServer s;
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n" + kLive));
  std::string carry;
  // read_response would wait for a HEAD's Content-Length bytes: read the head alone
  const auto deadline = Clock::now() + 2s;
  while (carry.find("\r\n\r\n") == std::string::npos && Clock::now() < deadline) {
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) carry.append(buf, static_cast<size_t>(n));
    if (n <= 0) std::this_thread::sleep_for(5ms);
  }
  const size_t end = carry.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << carry;
  EXPECT_EQ(status_of(carry.substr(0, end + 4)), 200) << carry;
  carry.erase(0, end + 4);
  const std::string live = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(live), 200) << live;
  EXPECT_NE(live.find("{\"live\":true}"), std::string::npos) << live;
  ::close(fd);
}

TEST(Transport, GetWithABodyIsAnsweredThenClosed) {
  TestServer s;
  const int fd = connect_to(s.port());
  // the body would parse as a second request if it were left on the connection
  ASSERT_TRUE(
      send_all(fd, "GET /v2/health/live HTTP/1.1\r\nHost: t\r\nContent-Length: 18\r\n\r\n" + kLive.substr(0, 18)));
  std::string carry;
  const std::string response = read_response(fd, carry, 2s);
  EXPECT_EQ(status_of(response), 200) << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;
  EXPECT_EQ(read_until_close(fd, 3s), "");
  ::close(fd);
  // HEAD answers the headers only
  const int head = connect_to(s.port());
  ASSERT_TRUE(send_all(head, "HEAD /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  const std::string got = read_until_close(head, 3s);
  EXPECT_EQ(status_of(got), 200) << got;
  EXPECT_EQ(got.substr(got.find("\r\n\r\n") + 4), "");
  ::close(head);
}

TEST(Transport, ClientDisconnectReachesCancelled) {
  TestServer s;
  std::atomic<bool> saw_cancel{false};
  std::atomic<bool> started{false};
  s.fake.on_infer = [&](const serving::RequestSpec& spec) {
    started = true;
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      if (spec.cancelled && spec.cancelled()) {
        saw_cancel = true;
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  };
  const std::string body = R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["x"]}]})";
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd,
                       "POST /v2/models/clip/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                       "Content-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body));
  for (int i = 0; i < 200 && !started; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(started);
  ::close(fd);
  for (int i = 0; i < 300 && !saw_cancel; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(saw_cancel);
  // a client that stays sees cancelled() == false throughout
  saw_cancel = false;
  s.fake.on_infer = [&](const serving::RequestSpec& spec) {
    for (int i = 0; i < 20; ++i) {
      if (spec.cancelled()) saw_cancel = true;
      std::this_thread::sleep_for(5ms);
    }
  };
  httplib::Client c = s.client();
  EXPECT_EQ(c.Post("/v2/models/clip/infer", body, "application/json")->status, 200);
  EXPECT_FALSE(saw_cancel);
}

TEST(Transport, GarbageNeverKillsTheServer) {
  TestServer s;
  std::mt19937 rng(11);
  const std::vector<std::string> nasty = {
      "\r\n\r\n",
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "POST /v2/models/clip/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
      "POST /v2/models/clip/infer HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n",
      "GET /v2/models/%ff%fe/ready HTTP/1.1\r\n\r\n",
      "GET /v2/health/live HTTP/1.1\r\nRange: bytes=99999-\r\n\r\n",
      std::string("\0\0\0\0\r\n\r\n", 8),
  };
  std::vector<std::string> inputs = nasty;
  for (int i = 0; i < 20; ++i) {
    std::string junk(static_cast<size_t>(rng() % 3000), '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    inputs.push_back(junk + "\r\n\r\n");
  }
  for (const std::string& input : inputs) {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    send_all(fd, input);
    read_until_close(fd, 100ms);
    ::close(fd);
  }
  httplib::Client c = s.client();
  auto r = c.Get("/v2/health/live");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(Transport, ShutdownLetsInFlightRequestsFinish) {
  auto s = std::make_unique<TestServer>();
  std::atomic<bool> started{false};
  s->fake.on_infer = [&](const serving::RequestSpec&) {
    started = true;
    std::this_thread::sleep_for(500ms);
  };
  const int port = s->port();
  std::thread client([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(10, 0);
    auto r = c.Post("/v2/models/clip/infer",
                    R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["x"]}]})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Connection"), "close");
  });
  for (int i = 0; i < 200 && !started; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(started);
  const int idle = connect_to(port);  // an idle connection is closed at shutdown
  std::this_thread::sleep_for(50ms);
  s->http().begin_shutdown();
  EXPECT_EQ(connect_to(port), -1);  // no longer accepting
  client.join();
  EXPECT_EQ(read_until_close(idle, 2s), "");
  ::close(idle);
  s->stop();
}

}  // namespace
}  // namespace mmserve::api::testing
