// HTTP request counters and latency histograms (see http_metrics.h).
#include "api/http_metrics.h"

namespace mmserve::api {

HttpMetrics::HttpMetrics(serving::MetricsRegistry& registry)
    : requests_(registry.counter("http_requests_total", "HTTP requests answered, by route template and status code",
                                 {"method", "route", "code"})),
      duration_(registry.histogram("http_request_duration_seconds",
                                   "Time from a request's complete headers to its response written",
                                   {"method", "route"})) {}

void HttpMetrics::observe(std::string_view method, const std::string& route, int status, double seconds) {
  const std::string m = method_label(method);
  requests_.with({m, route, std::to_string(status)}).inc();
  duration_.with({m, route}).observe(seconds);
}

std::string method_label(std::string_view method) {
  static constexpr std::string_view kKnown[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
  for (std::string_view k : kKnown) {
    if (method == k) return std::string(k);
  }
  return "other";
}

}  // namespace mmserve::api
