// Data URL parsing for images and the http(s) URL test (see data_url.h). Tests: tests/unit/api/data_url_test.cpp.
#include "api/data_url.h"

#include <algorithm>
#include <cctype>

#include "api/base64.h"

namespace mmserve::api {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && lower(text.substr(0, prefix.size())) == prefix;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool looks_like_data_url(std::string_view text) {
  return starts_with_nocase(text, "data:");
}

bool looks_like_http_url(std::string_view text) {
  if (!starts_with_nocase(text, "http://") && !starts_with_nocase(text, "https://")) return false;
  return std::none_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); });
}

StatusOr<DataUrl> parse_image_data_url(std::string_view text) {
  if (!looks_like_data_url(text)) return invalid_argument("not a data URL (expected data:image/...;base64,...)");
  const size_t comma = text.find(',');
  if (comma == std::string_view::npos) return invalid_argument("bad data URL: no ',' before the payload");
  // Header: "<media type>[;param=value]*[;base64]".
  std::string_view header = text.substr(5, comma - 5);
  bool is_base64 = false;
  std::string media_type;
  size_t field = 0;
  while (true) {
    const size_t semicolon = header.find(';');
    const std::string_view part = trim(header.substr(0, semicolon));
    if (field == 0) {
      media_type = lower(part);
    } else if (lower(part) == "base64") {
      is_base64 = true;
    }
    ++field;
    if (semicolon == std::string_view::npos) break;
    header.remove_prefix(semicolon + 1);
  }
  if (media_type == "image/jpg") media_type = "image/jpeg";
  if (media_type != "image/png" && media_type != "image/jpeg" && media_type != "image/webp") {
    return invalid_argument("bad data URL: media type '" + media_type.substr(0, 64) +
                            "' is not an image this server reads (image/png, image/jpeg, image/webp)");
  }
  if (!is_base64) return invalid_argument("bad data URL: only ';base64' payloads are accepted");
  StatusOr<std::string> bytes = base64_decode(text.substr(comma + 1));
  if (!bytes.ok()) return bytes.status().with_context("bad data URL");
  if (bytes->empty()) return invalid_argument("bad data URL: empty image");
  return DataUrl{media_type, std::move(*bytes)};
}

}  // namespace mmserve::api
