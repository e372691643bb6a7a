// What `mmserve bench` measured and how it is reported: the outcome of every request, folded per class and
// overall into sent / ok / 429 / other HTTP errors by code / transport errors / client drops, throughput and
// latency percentiles; printed as a table or JSON.
//
// Definitions (docs/load-testing.md repeats them for users):
// - arrivals: Poisson arrivals in the window; sent + dropped_by_client = arrivals.
// - dropped_by_client: arrivals that found all --connections busy (open loop: never queued or delayed).
// - ok: HTTP 2xx. rejected_429: the server's queue was full. errors: every other HTTP status, by code.
// - transport_errors: no HTTP answer (refused, timed out, reset, cut at the end of the drain), by kind.
// - latency: scheduled arrival -> last response byte, of ok requests only (so client-side dispatch delay
//   counts, as a user would see it); percentiles by nearest rank.
// - throughput_ok_per_s: ok / elapsed, elapsed = first arrival window start -> last response.
// Tested end to end by tests/e2e/client_test.sh bench, which parses the JSON.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_payloads.h"

namespace mmserve::cli {

struct Outcome {
  int class_index = 0;
  int http_status = 0;                    // 0: no HTTP answer
  const char* transport_error = nullptr;  // set when http_status == 0: "connection", "read", ...
  double latency_ms = 0;
};

struct BenchRun {
  std::vector<Outcome> outcomes;
  std::vector<int64_t> arrivals;  // per class
  std::vector<int64_t> dropped;   // per class
  double window_s = 0;            // the arrival window
  double elapsed_s = 0;           // window start -> last completion (at least the window)
  int64_t cut_at_drain = 0;       // requests still in flight when the drain limit passed
};

struct BenchConfig {
  std::string url, model, profile_source;
  double rate = 0, duration_s = 0, timeout_s = 0;
  int connections = 0;
  unsigned seed = 0;
  bool keep_alive = true;
};

// Nearest-rank percentile of sorted values (p in (0, 100]); 0 for an empty list.
double percentile_sorted(const std::vector<double>& sorted, double p);

// The JSON report: {"config": {...}, "elapsed_s", "window_s", "cut_at_drain", "overall": {...},
// "classes": [{"name", "kind", "api", "priority", "weight", ...the same stats as overall}]}.
nlohmann::json bench_report_json(const BenchConfig& config, const std::vector<PreparedClass>& classes,
                                 const BenchRun& run);
// The report as an aligned text table (plus a line per error kind when there are any).
std::string bench_report_table(const nlohmann::json& report);

}  // namespace mmserve::cli
