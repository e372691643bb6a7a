// Parsing request bodies as JSON without exceptions escaping: a malformed body becomes a kInvalidArgument whose
// message says where the parser stopped. nlohmann's parser and its value destruction are iterative, so deeply
// nested input cannot overflow the stack. Tests: tests/unit/api/kserve_codec_test.cpp, openai_codec_test.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/status.h"

namespace mmserve::api {

StatusOr<nlohmann::json> parse_json(std::string_view text);

}  // namespace mmserve::api
