// Status and StatusOr: the error discipline of mmserve.
//
// Everything a user can cause (bad input, a missing tensor, a truncated file, an unknown model) returns a
// Status; nothing throws across a layer boundary. A broken internal invariant is a programmer error and
// aborts through MMSERVE_CHECK. The codes mirror absl/gRPC so the api layer can map them to HTTP codes
// (kInvalidArgument -> 400, kNotFound -> 404, kTooLarge -> 413, kResourceExhausted -> 429, ...).
// Tests: tests/unit/core/status_test.cpp.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace mmserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // malformed input: bad JSON, broken image, wrong shape
  kNotFound,         // missing file, model or tensor
  kAlreadyExists,
  kOutOfRange,          // offsets outside a buffer, truncated data
  kResourceExhausted,   // out of memory, queue full (HTTP 429)
  kTooLarge,            // an input above a size limit: body, image pixels (HTTP 413)
  kUnimplemented,       // a valid but unsupported feature (dtype, architecture)
  kFailedPrecondition,  // not ready, wrong state
  kDeadlineExceeded,
  kUnavailable,
  kCancelled,
  kInternal,  // a dependency failed in a way the user cannot fix
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;
  // Returns a copy whose message is "context: message" (keeps the code).
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() {
  return Status();
}
inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status out_of_range(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}
inline Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status too_large(std::string m) {
  return {StatusCode::kTooLarge, std::move(m)};
}
inline Status unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}             // NOLINT(google-explicit-constructor)
  StatusOr(T&& value) : value_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  StatusOr(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? Status(StatusCode::kInternal, "StatusOr built from an OK status") : std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& message);

}  // namespace mmserve

#define MMSERVE_CONCAT_INNER(a, b) a##b
#define MMSERVE_CONCAT(a, b) MMSERVE_CONCAT_INNER(a, b)

// Propagates a non-OK Status to the caller.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::mmserve::Status _mm_status = (expr);   \
    if (!_mm_status.ok()) return _mm_status; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the Status.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(MMSERVE_CONCAT(_mm_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

// Programmer-error invariant: aborts with a message. Never for anything a user can cause.
#define MMSERVE_CHECK(cond, ...)                                                               \
  do {                                                                                         \
    if (!(cond)) ::mmserve::check_failed(__FILE__, __LINE__, #cond, std::string{__VA_ARGS__}); \
  } while (0)
