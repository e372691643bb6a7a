// Compact JSON writers for float arrays and strings (see json_writer.h). Tests: tests/unit/api/codec_test.cpp.
#include "api/json_writer.h"

#include <charconv>
#include <cmath>

namespace mmserve::api {

void append_json_floats(std::string& out, std::span<const float> values) {
  out.push_back('[');
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    const float v = values[i];
    if (!std::isfinite(v)) {
      out += "null";
      continue;
    }
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  }
  out.push_back(']');
}

void append_json_ints(std::string& out, const std::vector<int64_t>& values) {
  out.push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += std::to_string(values[i]);
  }
  out.push_back(']');
}

void append_json_string(std::string& out, const std::string& value) {
  out += dump_json(nlohmann::json(value));
}

}  // namespace mmserve::api
