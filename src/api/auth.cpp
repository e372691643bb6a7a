// API key storage, the keys file format and bearer-token extraction (see auth.h).
// Tests: tests/unit/api/auth_test.cpp.
#include "api/auth.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace mmserve::api {
namespace {

bool valid_tenant(const std::string& tenant) {
  if (tenant.empty() || tenant.size() > 128) return false;
  for (unsigned char c : tenant) {
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

bool has_blank(const std::string& s) {
  for (unsigned char c : s) {
    if (std::isspace(c) || std::iscntrl(c)) return true;
  }
  return false;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Status ApiKeys::add(const std::string& key, const std::string& tenant) {
  if (key.empty()) return invalid_argument("empty API key");
  if (has_blank(key)) return invalid_argument("an API key must not contain blanks or control characters");
  if (!valid_tenant(tenant)) {
    return invalid_argument("tenant '" + tenant.substr(0, 64) + "' must be 1-128 characters of [A-Za-z0-9_.-]");
  }
  for (const Entry& e : keys_) {
    if (e.key == key) return invalid_argument("API key given twice");
  }
  keys_.push_back({key, tenant});
  return ok_status();
}

Status ApiKeys::add_text(const std::string& text, const std::string& label) {
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream fields(line);
    std::string key, tenant, extra;
    if (!(fields >> key) || key[0] == '#') continue;
    if (!(fields >> tenant)) tenant = "default";
    if (fields >> extra) {
      return invalid_argument(label + ":" + std::to_string(number) + ": expected 'KEY TENANT', found more fields");
    }
    RETURN_IF_ERROR(add(key, tenant).with_context(label + ":" + std::to_string(number)));
  }
  return ok_status();
}

Status ApiKeys::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read API keys file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return add_text(text.str(), path);
}

std::optional<std::string> ApiKeys::tenant_of(std::string_view key) const {
  std::optional<std::string> tenant;
  for (const Entry& e : keys_) {  // no early exit: every key is compared
    if (constant_time_equal(e.key, key) && !tenant) tenant = e.tenant;
  }
  return tenant;
}

std::optional<std::string> bearer_token(std::string_view authorization) {
  while (!authorization.empty() && authorization.front() == ' ') authorization.remove_prefix(1);
  if (authorization.size() < 7) return std::nullopt;
  std::string scheme(authorization.substr(0, 6));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer" || authorization[6] != ' ') return std::nullopt;
  std::string_view token = authorization.substr(7);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  if (token.empty()) return std::nullopt;
  return std::string(token);
}

}  // namespace mmserve::api
