// JSON text output for the api layer: nlohmann's dump() that never throws, and a compact writer for float
// arrays (the bulk of every inference response).
//
// dump() throws on invalid UTF-8 by default; every api response may echo user text, so all output goes through
// dump_json(), which replaces invalid bytes with U+FFFD. Floats are written with std::to_chars' shortest
// round-trip form for *float* (about 9 digits) instead of nlohmann's double form (17 digits), which halves the
// size of embedding responses; non-finite values become null as in nlohmann. Tests:
// tests/unit/api/codec_test.cpp (round trips through nlohmann::json::parse).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace mmserve::api {

template <typename Json>
std::string dump_json(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Appends `[v0,v1,...]`.
void append_json_floats(std::string& out, std::span<const float> values);
// Appends `[n0,n1,...]`.
void append_json_ints(std::string& out, const std::vector<int64_t>& values);
// Appends a JSON string literal (quoted, escaped, invalid UTF-8 replaced).
void append_json_string(std::string& out, const std::string& value);

}  // namespace mmserve::api
