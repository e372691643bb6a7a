// Status -> HTTP status code and JSON error bodies (see error_mapping.h). The mapping follows gRPC's
// canonical HTTP mapping, with this project's additions: kTooLarge -> 413 and kResourceExhausted -> 429
// (a full queue: retry later), kFailedPrecondition -> 409 (the model's state forbids the operation),
// kCancelled -> 499 (nginx's "client closed request": only ever logged, the client is gone).
// Tests: tests/unit/api/error_mapping_test.cpp.
#include "api/error_mapping.h"

#include <nlohmann/json.hpp>

#include "api/json_writer.h"

namespace mmserve::api {

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kOutOfRange: return 400;  // offsets past a buffer the client sent: their input is broken
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kTooLarge: return 413;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kInternal: return 500;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
  }
  return 500;  // an out-of-range enum value: a bug, reported as one
}

const char* openai_error_type(int http_status) {
  if (http_status == 401) return "authentication_error";
  if (http_status == 403) return "permission_error";
  if (http_status == 429) return "rate_limit_error";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string error_body(ApiFamily family, int http_status, const std::string& message, const std::string& openai_code) {
  nlohmann::ordered_json body;
  if (family == ApiFamily::kOpenAi) {
    nlohmann::ordered_json error;
    error["message"] = message;
    error["type"] = openai_error_type(http_status);
    error["param"] = nullptr;
    error["code"] = openai_code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(openai_code);
    body["error"] = std::move(error);
  } else {
    body["error"] = message;
  }
  return dump_json(body);
}

}  // namespace mmserve::api
