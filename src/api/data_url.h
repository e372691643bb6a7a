// Image references inside request text: RFC 2397 data URLs (`data:image/png;base64,...`) and the http(s) URLs
// this server refuses to fetch.
//
// Only base64 data URLs of the image types the decoders read are images (image/png, image/jpeg (also
// image/jpg), image/webp); media-type parameters such as `;charset=...` are ignored. Fetching http(s) URLs is
// a server-side request forgery risk and is off: the api answers 400 "URL fetches are disabled". Tests:
// tests/unit/api/data_url_test.cpp.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace mmserve::api {

struct DataUrl {
  std::string media_type;  // lower case, e.g. "image/png"
  std::string bytes;       // decoded payload
};

// True when `text` starts with "data:" (case-insensitive): it is meant as a data URL, valid or not.
bool looks_like_data_url(std::string_view text);
// True when `text` is a single http:// or https:// URL (case-insensitive scheme, no whitespace).
bool looks_like_http_url(std::string_view text);

// Parses an image data URL. kInvalidArgument for a non-image or unsupported media type, a missing `;base64`,
// a missing comma, invalid base64 or an empty payload.
StatusOr<DataUrl> parse_image_data_url(std::string_view text);

}  // namespace mmserve::api
