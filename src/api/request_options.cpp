// Priority/timeout parsing and Content-Type classification (see request_options.h).
// Tests: tests/unit/api/codec_test.cpp.
#include "api/request_options.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace mmserve::api {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Status priority_range_error(const std::string& where) {
  return invalid_argument(where + " must be an integer from 1 (highest) to " + std::to_string(kPriorityMax));
}

Status timeout_range_error(const std::string& where) {
  return invalid_argument(where + " must be a positive number of milliseconds up to one day");
}

}  // namespace

bool parse_trace_routing_header(std::string_view value) {
  if (value == "1") return true;
  if (value.size() != 4) return false;
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "true";
}

StatusOr<int> parse_priority_header(std::string_view value) {
  value = trim(value);
  int out = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty() || out < 1 || out > kPriorityMax) {
    return priority_range_error("x-mmserve-priority");
  }
  return out;
}

StatusOr<double> parse_timeout_header(std::string_view value) {
  value = trim(value);
  double out = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty() || !std::isfinite(out) || out <= 0 ||
      out > kTimeoutMsMax) {
    return timeout_range_error("x-mmserve-timeout-ms");
  }
  return out;
}

StatusOr<int> priority_from_json(const nlohmann::json& value) {
  if (!value.is_number_integer()) return priority_range_error("parameters.priority");
  const int64_t v = value.get<int64_t>();
  if (v < 1 || v > kPriorityMax) return priority_range_error("parameters.priority");
  return static_cast<int>(v);
}

StatusOr<double> timeout_from_json(const nlohmann::json& value) {
  if (!value.is_number()) return timeout_range_error("parameters.timeout_ms");
  const double v = value.get<double>();
  if (!std::isfinite(v) || v <= 0 || v > kTimeoutMsMax) return timeout_range_error("parameters.timeout_ms");
  return v;
}

BodyKind classify_content_type(std::string_view content_type) {
  std::string media(trim(content_type.substr(0, content_type.find(';'))));
  for (char& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media.empty() || media == "application/json") return BodyKind::kJson;
  if (media == "application/octet-stream") return BodyKind::kOctetStream;
  if (media == "multipart/form-data") return BodyKind::kMultipart;
  return BodyKind::kOther;
}

}  // namespace mmserve::api
