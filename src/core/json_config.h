// Reading HF JSON files (config.json, preprocessor_config.json, tokenizer_config.json) with clear errors.
//
// A thin layer over nlohmann::json: parsing errors and type mismatches become Status values naming the file
// and the key, never exceptions. nlohmann's exceptions are caught here and only here.
// Tests: tests/unit/core/json_config_test.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mmserve {

// "line L, column C" (1-based) of a 1-based byte offset into `text`, as nlohmann reports parse errors.
std::string json_error_position(std::string_view text, size_t byte_1based);

// Reads and parses a JSON file; the error names the path (and line/column for syntax errors).
StatusOr<nlohmann::json> read_json_file(const std::string& path);
StatusOr<nlohmann::json> parse_json(const std::string& text, const std::string& label);

// A JSON object with typed, checked getters. `label` (e.g. "config.json: text_config") prefixes errors.
class JsonObject {
 public:
  JsonObject(const nlohmann::json* json, std::string label) : json_(json), label_(std::move(label)) {}
  static StatusOr<JsonObject> wrap(const nlohmann::json& json, const std::string& label);

  bool has(const std::string& key) const;  // present and not null
  StatusOr<int64_t> get_int(const std::string& key) const;
  StatusOr<double> get_double(const std::string& key) const;
  StatusOr<std::string> get_string(const std::string& key) const;
  StatusOr<bool> get_bool(const std::string& key) const;
  StatusOr<std::vector<double>> get_double_array(const std::string& key) const;
  // The same, returning `fallback` when the key is absent or null (a wrong type is still an error).
  StatusOr<int64_t> get_int_or(const std::string& key, int64_t fallback) const;
  StatusOr<double> get_double_or(const std::string& key, double fallback) const;
  StatusOr<std::string> get_string_or(const std::string& key, const std::string& fallback) const;
  StatusOr<bool> get_bool_or(const std::string& key, bool fallback) const;
  StatusOr<JsonObject> get_object(const std::string& key) const;
  const nlohmann::json& raw() const { return *json_; }
  const std::string& label() const { return label_; }

 private:
  const nlohmann::json* json_;
  std::string label_;
};

}  // namespace mmserve
