// One JSON line per HTTP request, to the --access-log file (appended) or stderr:
//   {"ts":"2026-11-29T16:47:01.123Z","method":"POST","path":"/v2/models/demo-clip/infer",
//    "route":"/v2/models/{model}/infer","status":200,"duration_ms":12.3,"bytes":1234,"bytes_in":456,
//    "model":"demo-clip","trace_id":"...","span_id":"...","tenant":"default","priority":0,"remote":"127.0.0.1"}
// Lines are written whole under a mutex and flushed, so concurrent requests never interleave and `tail -f`
// sees every request. Tests: tests/unit/api/http_server_test.cpp (format), tests/e2e/server_test.cpp (file).
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"

namespace mmserve::api {

struct AccessLogEntry {
  std::string method, path, route;
  int status = 0;
  double duration_ms = 0;
  size_t bytes = 0;     // response body
  size_t bytes_in = 0;  // request body (Content-Length)
  std::string model, trace_id, span_id, tenant, remote;
  int priority = 0;
  std::string routing;  // a JSON object (x-mmserve-trace-routing on a Mixtral): written as "routing" when set
  std::string adapters;  // a JSON array (gate routing's choice, [{"name", "weight"}]): written as "adapters" when set
};

// The JSON line (without the newline) for an entry logged at the current time.
std::string format_access_log_line(const AccessLogEntry& entry);

class AccessLog {
 public:
  // Empty path: stderr. kUnavailable when the file cannot be opened for appending.
  static StatusOr<std::unique_ptr<AccessLog>> open(const std::string& path);
  ~AccessLog();
  void write(const AccessLogEntry& entry);

 private:
  AccessLog(std::FILE* file, bool owned) : file_(file), owned_(owned) {}
  std::mutex mutex_;
  std::FILE* file_;
  bool owned_;
};

}  // namespace mmserve::api
