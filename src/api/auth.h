// API keys: which bearer tokens are accepted and which tenant each belongs to.
//
// Keys come from `--api-key KEY` (tenant "default") and `--api-keys-file FILE` (lines `KEY TENANT`; blank lines
// and lines starting with '#' are skipped; a line with a key alone gets tenant "default"). With no keys at all
// authentication is off and every request is tenant "default". Lookups compare against every key in constant
// time per key, so response timing does not reveal how much of a key matched. Tests:
// tests/unit/api/auth_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mmserve::api {

class ApiKeys {
 public:
  // kInvalidArgument for an empty key, a key or tenant with blanks, a tenant outside [A-Za-z0-9_.-], or a
  // key given twice.
  Status add(const std::string& key, const std::string& tenant = "default");
  // Reads a keys file (see above); errors name the file and line.
  Status add_file(const std::string& path);
  // Parses the text of a keys file; `label` names it in errors.
  Status add_text(const std::string& text, const std::string& label);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // The tenant of `key`, or nullopt.
  std::optional<std::string> tenant_of(std::string_view key) const;

 private:
  struct Entry {
    std::string key;
    std::string tenant;
  };
  std::vector<Entry> keys_;
};

// The token of an `Authorization: Bearer TOKEN` header value (scheme case-insensitive); nullopt when the value
// is not a bearer credential.
std::optional<std::string> bearer_token(std::string_view authorization);

}  // namespace mmserve::api
