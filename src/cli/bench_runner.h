// The open-loop engine of `mmserve bench`. Arrivals are a Poisson process at `rate` (exponential gaps from a
// seeded generator, class and variant drawn per arrival by weight); each arrival is handed at its scheduled
// time to an idle connection (one thread + one BenchConnection each, bench_http_client.h; most recently used first so
// few connections stay warm at low rates). An arrival that finds every connection busy is dropped and counted, never
// queued: the offered load does not bend to the server's speed, so latencies have no coordinated omission. Latency runs
// from the scheduled arrival to the last response byte.
//
// Never hangs: connect/read/write each time out after timeout_s; after the window the run waits at most
// timeout_s for in-flight requests, then shuts their sockets and counts them as cut.
// Tested end to end by tests/e2e/client_test.sh bench (against the real server, including client drops) and
// bench-wire (its HTTP client against a scripted server).
#pragma once

#include <string>
#include <vector>

#include "cli/bench_payloads.h"
#include "cli/bench_report.h"
#include "core/status.h"

namespace mmserve::cli {

struct ServerUrl {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing slash)
};

// Parses "http://host[:port][/base]"; https is refused (mmserve bench speaks plain HTTP on trusted networks).
StatusOr<ServerUrl> parse_server_url(const std::string& url);

struct RunnerOptions {
  ServerUrl server;
  std::string api_key;
  double rate = 10;
  double duration_s = 10;
  double timeout_s = 30;
  int connections = 64;
  unsigned seed = 1;
  bool keep_alive = true;
};

BenchRun run_open_loop(const RunnerOptions& options, const std::vector<PreparedClass>& classes);

}  // namespace mmserve::cli
