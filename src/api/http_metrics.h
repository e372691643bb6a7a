// The HTTP layer's Prometheus metrics, registered in the serving layer's registry so that GET /metrics exposes
// everything in one scrape:
//   http_requests_total{method, route, code}          counter
//   http_request_duration_seconds{method, route}      histogram (headers received -> response written)
// `route` is the route template ("/v2/models/{model}/infer", "unmatched"), `method` one of the HTTP methods or
// "other": the label sets stay bounded whatever clients send. Names are fixed (SPEC 5.3 queries them); see
// docs/metrics.md. Tests: tests/unit/api/http_server_test.cpp reads them back from /metrics.
#pragma once

#include <string>
#include <string_view>

#include "serving/metrics.h"

namespace mmserve::api {

class HttpMetrics {
 public:
  explicit HttpMetrics(serving::MetricsRegistry& registry);
  void observe(std::string_view method, const std::string& route, int status, double seconds);

 private:
  serving::Family<serving::Counter>& requests_;
  serving::Family<serving::Histogram>& duration_;
};

// "GET", "POST", ... for the standard methods; "other" for anything else.
std::string method_label(std::string_view method);

}  // namespace mmserve::api
