// Parsing request bodies as JSON without exceptions escaping: a malformed body becomes a kInvalidArgument whose
// message says where the parser stopped. A fast path (json_parse.cpp) builds the DOM of well-formed bodies with
// bulk copies of their plain strings (a base64 image element costs one scan and one memcpy); anything it is not
// sure of goes to nlohmann's parser, whose parser and value destruction are iterative, so deeply nested input
// cannot overflow the stack. Tests: tests/unit/api/json_parse_test.cpp, kserve_codec_test.cpp, openai_codec_test.cpp;
// fuzz/json_parse_fuzz.cpp (the two paths agree).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace mmserve::api {

// The DOM nlohmann's parser builds, or kInvalidArgument "malformed JSON: <nlohmann's message>".
StatusOr<nlohmann::json> parse_json(std::string_view text);

// The two halves of parse_json, public for the benchmark and the differential fuzz target. parse_json_fast
// returns nlohmann's DOM for the text, or nullopt when it gives up (on every malformed text, and on some
// well-formed ones); parse_json_nlohmann is nlohmann's parser alone.
std::optional<nlohmann::json> parse_json_fast(std::string_view text);
StatusOr<nlohmann::json> parse_json_nlohmann(std::string_view text);

// Equal values of equal types all the way down: unlike nlohmann's operator==, 1u (unsigned) and 1 (signed) differ,
// as they do to the codec (is_number_unsigned). What the fast path's tests and fuzz target compare with.
bool json_same_dom(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace mmserve::api
