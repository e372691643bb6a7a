// JSON body parsing with the parser's exceptions turned into Status (see json_parse.h).
#include "api/json_parse.h"

#include <string>

namespace mmserve::api {

StatusOr<nlohmann::json> parse_json(std::string_view text) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ..."; keep from "parse error".
    std::string message = e.what();
    const size_t start = message.find("parse error");
    return invalid_argument("malformed JSON: " + (start == std::string::npos ? message : message.substr(start)));
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("malformed JSON: ") + e.what());
  }
}

}  // namespace mmserve::api
