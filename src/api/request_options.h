// The per-request knobs both API families accept in headers (`x-mmserve-priority`, `x-mmserve-timeout-ms`) and
// KServe also in `parameters`, and the Content-Type classification behind 415.
//
// Priority is a class, 1 = highest; the api only checks it is an integer in [1, 1000] (the model's
// priority_levels bound it further in serving). A timeout is a positive number of milliseconds (fractions
// allowed) up to one day; it becomes RequestOptions.deadline = arrival + timeout. Tests:
// tests/unit/api/codec_test.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace mmserve::api {

inline constexpr int kPriorityMax = 1000;
inline constexpr double kTimeoutMsMax = 24.0 * 3600 * 1000;

// Header values. kInvalidArgument naming the header when malformed.
StatusOr<int> parse_priority_header(std::string_view value);
// `x-mmserve-trace-routing`: "1" or "true" (any case) asks a mixture-of-experts model for its per-token routing;
// anything else (or no header) does not.
bool parse_trace_routing_header(std::string_view value);
StatusOr<double> parse_timeout_header(std::string_view value);

// JSON values (KServe `parameters.priority` / `parameters.timeout_ms`). kInvalidArgument on a wrong type/range.
StatusOr<int> priority_from_json(const nlohmann::json& value);
StatusOr<double> timeout_from_json(const nlohmann::json& value);

enum class BodyKind { kJson, kOctetStream, kMultipart, kOther };
// Classifies a Content-Type value by its media type (parameters such as charset ignored, case-insensitive).
// An absent header (empty value) counts as JSON: clients that send JSON without saying so are common.
BodyKind classify_content_type(std::string_view content_type);

}  // namespace mmserve::api
