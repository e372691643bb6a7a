// W3C Trace Context (https://www.w3.org/TR/trace-context/): parsing the `traceparent` request header and
// making the one we answer with.
//
// A request keeps the caller's trace id when its `traceparent` is valid and gets a fresh random one otherwise;
// either way this server's span gets a new random span id, which goes back in the response's `traceparent`
// (`00-<trace id>-<our span id>-<flags>`) and into the access log. Tests: tests/unit/api/trace_context_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mmserve::api {

struct TraceParent {
  std::string trace_id;   // 32 lower-case hex digits, not all zero
  std::string parent_id;  // 16 lower-case hex digits, not all zero
  std::string flags;      // 2 lower-case hex digits
};

// Parses a `traceparent` value as the spec says: version 00 is exactly `00-<32 hex>-<16 hex>-<2 hex>`; a higher
// version (never ff) may carry more `-`-separated fields after those; hex must be lower case; all-zero ids are
// invalid. Leading/trailing blanks are ignored. nullopt when invalid.
std::optional<TraceParent> parse_traceparent(std::string_view value);

// Random ids (from a per-thread generator seeded by std::random_device), never all zero.
std::string random_trace_id();  // 32 hex digits
std::string random_span_id();   // 16 hex digits

// This server's span of a request.
struct TraceContext {
  std::string trace_id;
  std::string span_id;         // ours
  std::string parent_span_id;  // the caller's, empty when there was no valid traceparent
  std::string flags = "01";
  // `00-<trace id>-<span id>-<flags>`.
  std::string traceparent() const;
};

// The span for a request whose `traceparent` header is `header` (empty when absent).
TraceContext make_trace_context(std::string_view header);

}  // namespace mmserve::api
