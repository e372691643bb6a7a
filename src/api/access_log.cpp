// The JSON access log (see access_log.h).
#include "api/access_log.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "api/json_writer.h"

namespace mmserve::api {
namespace {

std::string utc_timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(ms));
  return buf;
}

}  // namespace

std::string format_access_log_line(const AccessLogEntry& e) {
  nlohmann::ordered_json j;
  j["ts"] = utc_timestamp();
  j["method"] = e.method;
  j["path"] = e.path.substr(0, 1024);
  j["route"] = e.route;
  j["status"] = e.status;
  j["duration_ms"] = std::round(e.duration_ms * 1000.0) / 1000.0;
  j["bytes"] = e.bytes;
  j["bytes_in"] = e.bytes_in;
  j["model"] = e.model;
  j["trace_id"] = e.trace_id;
  j["span_id"] = e.span_id;
  j["tenant"] = e.tenant;
  j["priority"] = e.priority;
  j["remote"] = e.remote;
  if (!e.routing.empty()) {
    nlohmann::ordered_json routing = nlohmann::ordered_json::parse(e.routing, nullptr, false);
    if (!routing.is_discarded()) j["routing"] = std::move(routing);
  }
  if (!e.adapters.empty()) {
    nlohmann::ordered_json adapters = nlohmann::ordered_json::parse(e.adapters, nullptr, false);
    if (!adapters.is_discarded()) j["adapters"] = std::move(adapters);
  }
  return dump_json(j);
}

StatusOr<std::unique_ptr<AccessLog>> AccessLog::open(const std::string& path) {
  if (path.empty()) return std::unique_ptr<AccessLog>(new AccessLog(stderr, false));
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return Status(StatusCode::kUnavailable, "cannot open access log " + path + ": " + std::strerror(errno));
  }
  return std::unique_ptr<AccessLog>(new AccessLog(file, true));
}

AccessLog::~AccessLog() {
  if (owned_) std::fclose(file_);
}

void AccessLog::write(const AccessLogEntry& entry) {
  std::string line = format_access_log_line(entry);
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace mmserve::api
