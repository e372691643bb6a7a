// JSON config reading: file -> nlohmann::json -> typed getters, every failure a Status naming file and key.
//
// HF configs are user-supplied, so a wrong type ("hidden_size": "768") must become a clear error, not an
// exception from nlohmann's get<>(). The getters inspect the JSON type first and never call a throwing
// accessor; parse errors (the only nlohmann exceptions we can hit) are caught here. Key paths read like
// "config.json: text_config.hidden_size": the first key after a file label is joined with ": ", deeper keys
// with ".". Tests: tests/unit/core/json_config_test.cpp.
#include "core/json_config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace mmserve {
namespace {

using nlohmann::json;

// "file: a.b": labels that already hold a key path get ".key", a bare file label gets ": key".
std::string join_key(const std::string& label, const std::string& key) {
  return label + (label.find(": ") == std::string::npos ? ": " : ".") + key;
}

// What a value is, in the words an error message needs ("string", "number 0.5", ...).
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + v.dump();
    case json::value_t::number_float: return "number " + v.dump();
    default: return v.type_name();
  }
}

Status wrong_type(const std::string& path, const char* expected, const json& v) {
  return invalid_argument(path + ": expected " + expected + ", got " + describe(v));
}

StatusOr<int64_t> to_int(const std::string& path, const json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument(path + ": integer " + v.dump() + " is out of range");
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {
    // Some exporters write 4096.0; a whole number is accepted, a fraction is not.
    const double d = v.get<double>();
    constexpr double kLimit = 9223372036854775808.0;  // 2^63
    if (std::isfinite(d) && std::trunc(d) == d && d >= -kLimit && d < kLimit) return static_cast<int64_t>(d);
  }
  return wrong_type(path, "an integer", v);
}

StatusOr<double> to_double(const std::string& path, const json& v) {
  if (v.is_number()) return v.get<double>();
  return wrong_type(path, "a number", v);
}

}  // namespace

std::string json_error_position(std::string_view text, size_t byte_1based) {
  const size_t pos = std::min(byte_1based == 0 ? 0 : byte_1based - 1, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

StatusOr<json> parse_json(const std::string& text, const std::string& label) {
  // nlohmann stops at a NUL byte as if the input ended there; JSON never contains a raw NUL.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    return invalid_argument(label + ": JSON syntax error at " + json_error_position(text, nul + 1) + ": NUL byte");
  }
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const std::string what = e.what();
    const size_t detail = what.find("syntax error");
    return invalid_argument(label + ": JSON syntax error at " + json_error_position(text, e.byte) + ": " +
                            (detail == std::string::npos ? what : what.substr(detail)));
  } catch (const json::exception& e) {  // out_of_range.406: a number literal too large for a double
    return invalid_argument(label + ": " + e.what());
  }
}

StatusOr<json> read_json_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string message = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT || err == ENOTDIR ? not_found(message) : failed_precondition(message);
  }
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return failed_precondition(path + ": read failed: " + std::strerror(err));  // e.g. a directory
  return parse_json(text, path);
}

StatusOr<JsonObject> JsonObject::wrap(const json& value, const std::string& label) {
  if (!value.is_object()) return wrong_type(label, "an object", value);
  return JsonObject(&value, label);
}

bool JsonObject::has(const std::string& key) const {
  auto it = json_->find(key);  // find() is safe on non-objects (returns end)
  return it != json_->end() && !it->is_null();
}

StatusOr<int64_t> JsonObject::get_int(const std::string& key) const {
  if (!has(key)) return invalid_argument(join_key(label_, key) + ": missing (expected an integer)");
  return to_int(join_key(label_, key), *json_->find(key));
}

StatusOr<double> JsonObject::get_double(const std::string& key) const {
  if (!has(key)) return invalid_argument(join_key(label_, key) + ": missing (expected a number)");
  return to_double(join_key(label_, key), *json_->find(key));
}

StatusOr<std::string> JsonObject::get_string(const std::string& key) const {
  if (!has(key)) return invalid_argument(join_key(label_, key) + ": missing (expected a string)");
  const json& v = *json_->find(key);
  if (!v.is_string()) return wrong_type(join_key(label_, key), "a string", v);
  return v.get<std::string>();
}

StatusOr<bool> JsonObject::get_bool(const std::string& key) const {
  if (!has(key)) return invalid_argument(join_key(label_, key) + ": missing (expected a boolean)");
  const json& v = *json_->find(key);
  if (!v.is_boolean()) return wrong_type(join_key(label_, key), "a boolean", v);
  return v.get<bool>();
}

StatusOr<std::vector<double>> JsonObject::get_double_array(const std::string& key) const {
  const std::string path = join_key(label_, key);
  if (!has(key)) return invalid_argument(path + ": missing (expected an array of numbers)");
  const json& v = *json_->find(key);
  if (!v.is_array()) return wrong_type(path, "an array of numbers", v);
  std::vector<double> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSIGN_OR_RETURN(double d, to_double(path + "[" + std::to_string(i) + "]", v[i]));
    out.push_back(d);
  }
  return out;
}

StatusOr<int64_t> JsonObject::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : StatusOr<int64_t>(fallback);
}

StatusOr<double> JsonObject::get_double_or(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : StatusOr<double>(fallback);
}

StatusOr<std::string> JsonObject::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : StatusOr<std::string>(fallback);
}

StatusOr<bool> JsonObject::get_bool_or(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : StatusOr<bool>(fallback);
}

StatusOr<JsonObject> JsonObject::get_object(const std::string& key) const {
  const std::string path = join_key(label_, key);
  auto it = json_->find(key);
  if (it == json_->end()) return invalid_argument(path + ": missing (expected an object)");
  return wrap(*it, path);
}

}  // namespace mmserve
