// Status -> HTTP: the one place that decides which HTTP status code and which JSON error body a failure gets.
//
// Two error shapes exist because two API families are served: KServe v2 answers `{"error": "message"}`, the
// OpenAI-compatible routes answer `{"error": {"message", "type", "param", "code"}}` as OpenAI's clients expect.
// Every StatusCode has exactly one HTTP code (docs/api.md, "Status codes"). Tests:
// tests/unit/api/error_mapping_test.cpp walks every StatusCode.
#pragma once

#include <string>

#include "core/status.h"

namespace mmserve::api {

// Which error body shape a route uses.
enum class ApiFamily { kKServe, kOpenAi, kPlain };

// The HTTP status code for a Status (kOk -> 200). Total over StatusCode.
int http_status_for(StatusCode code);

// The reason phrase clients see in the OpenAI error's `type` for an HTTP status:
// 400/404/409/413/415 -> "invalid_request_error", 401 -> "authentication_error", 429 -> "rate_limit_error",
// 5xx -> "server_error".
const char* openai_error_type(int http_status);

// The JSON error body for `message` in the family's shape (never throws; invalid UTF-8 is replaced).
// `openai_code` fills OpenAI's `code` ("model_not_found", ...); empty -> null.
std::string error_body(ApiFamily family, int http_status, const std::string& message,
                       const std::string& openai_code = "");

}  // namespace mmserve::api
