// Compact JSON writers for float arrays and strings (see json_writer.h). Tests: tests/unit/api/codec_test.cpp.
#include "api/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace mmserve::api {

void append_json_floats(std::string& out, std::span<const float> values) {
  // Written in place into room for the longest form of every value ("-1.17549435e-38," is 16 characters), then
  // cut to size: one allocation, no per-character appends (an embedding response is mostly this loop).
  constexpr size_t kRoom = 24;
  const size_t start = out.size();
  out.resize(start + 2 + values.size() * kRoom);
  char* p = out.data() + start;
  *p++ = '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) *p++ = ',';
    const float v = values[i];
    if (!std::isfinite(v)) {
      std::memcpy(p, "null", 4);
      p += 4;
      continue;
    }
    p = std::to_chars(p, p + kRoom - 1, v).ptr;
  }
  *p++ = ']';
  out.resize(static_cast<size_t>(p - out.data()));
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
  // Printable ASCII (most of what responses carry: ids, model names, COCO RLE counts of ~50 kB per mask) is
  // copied in spans with only '"' and '\\' escaped, which is what nlohmann writes for it; anything else (control
  // characters, any byte >= 0x80, which may be invalid UTF-8 to replace) goes through nlohmann's dump.
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x80) {
      out += dump_json(nlohmann::json(value));
      return;
    }
  }
  out.reserve(out.size() + value.size() + 2);
  out.push_back('"');
  size_t start = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '"' && value[i] != '\\') continue;
    out.append(value, start, i - start);
    out.push_back('\\');
    out.push_back(value[i]);
    start = i + 1;
  }
  out.append(value, start, std::string::npos);
  out.push_back('"');
}

}  // namespace mmserve::api
