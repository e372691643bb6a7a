// mmserve's HTTP server: the KServe v2 and OpenAI-compatible routes of docs/api.md, /metrics and /healthz, over
// ConnectionServer (cpp-httplib with slow-client-proof connection handling).
//
// For every request: the transport makes a RequestContext (trace span from `traceparent`, early refusals),
// then the pre-routing check matches the route table (404/405), checks the API key (401) and the Content-Type
// (415) before any body is read, the handler parses -> calls InferenceServer -> serialises, and after the
// response is written the HTTP metrics and one access-log line are recorded. Every response carries
// `traceparent`; inference responses carry `Server-Timing`. Health routes (/v2/health/*, /healthz) never need a
// key; /metrics needs one when keys are configured (docs/api.md). Tests: tests/unit/api/http_server_test.cpp
// (a test double of InferenceServer), tests/e2e/server_test.cpp (the real binary).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "api/access_log.h"
#include "api/auth.h"
#include "api/connection_server.h"
#include "api/http_metrics.h"
#include "api/kserve_codec.h"
#include "core/cuda/topology.h"
#include "core/status.h"
#include "serving/inference_server.h"

namespace mmserve::api {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;               // 0 = any free port (see port())
  TransportOptions transport;    // threads, timeouts, body limit
  ApiKeys keys;                  // none = no authentication
  std::string access_log_path;   // empty = stderr
  const TopologyMonitor* topology = nullptr;  // GET /v2/debug/topology; null: telemetry off (must outlive us)
};

class HttpServer {
 public:
  // `server` must outlive the HttpServer. Fails when the access log cannot be opened.
  static StatusOr<std::unique_ptr<HttpServer>> create(serving::InferenceServer& server, HttpServerOptions options);
  ~HttpServer();

  // Binds and listens; from then on connections queue and port() is the bound port.
  Status bind();
  int port() const { return http_.port(); }
  // Serves until begin_shutdown(); blocking.
  void run();
  // Stops accepting and closes idle connections; /healthz and ready routes answer 503 from now on.
  void begin_shutdown();
  // Waits for requests being processed to be answered (at most `timeout`); false if some were not.
  bool finish_shutdown(std::chrono::milliseconds timeout);

 private:
  HttpServer(serving::InferenceServer& server, HttpServerOptions options, std::unique_ptr<AccessLog> log);
  void install();
  // The checks made before the body is read; true when they answered the request.
  bool precheck(const httplib::Request& request, httplib::Response& response);
  void handle(const httplib::Request& request, httplib::Response& response);
  httplib::Server::HandlerResponse fill_error(const httplib::Request& request, httplib::Response& response);
  void record(const httplib::Request& request, const httplib::Response& response);

  serving::InferenceServer& server_;
  HttpServerOptions options_;
  std::unique_ptr<AccessLog> log_;
  HttpMetrics metrics_;
  ConnectionServer http_;
};

}  // namespace mmserve::api
