// libFuzzer target for the W3C `traceparent` header (api/trace_context.h): parse_traceparent and
// make_trace_context on arbitrary header values.
//
// Besides never crashing, it checks the contract: an accepted value has a 32-digit and a 16-digit lower-case hex
// id, neither all zero, and 2 hex flag digits; make_trace_context always answers a traceparent that parses back
// to its own trace id and span id, keeps the caller's trace id exactly when the value was accepted, and clears
// every flag bit but "sampled". A broken invariant aborts (a finding), like a crash.
// Seeds (fuzz/corpus/traceparent_fuzz): the spec's example, blanks around it, a future version with more
// fields, and the malformed kinds tests/unit/api/trace_context_test.cpp lists.
// Run: build/fuzz/fuzz/traceparent_fuzz -max_total_time=60 fuzz/corpus/traceparent_fuzz (docs/testing.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "api/trace_context.h"

namespace {

bool lower_hex(const std::string& s, size_t digits) {
  if (s.size() != digits) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool nonzero(const std::string& s) {
  return s.find_first_not_of('0') != std::string::npos;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // a header value; the HTTP layer caps headers long before this
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  const std::optional<mmserve::api::TraceParent> parent = mmserve::api::parse_traceparent(value);
  if (parent) {
    check(lower_hex(parent->trace_id, 32) && nonzero(parent->trace_id));
    check(lower_hex(parent->parent_id, 16) && nonzero(parent->parent_id));
    check(lower_hex(parent->flags, 2));
  }
  const mmserve::api::TraceContext context = mmserve::api::make_trace_context(value);
  check(context.flags == "00" || context.flags == "01");
  check(context.parent_span_id.empty() == !parent.has_value());
  if (parent) check(context.trace_id == parent->trace_id && context.parent_span_id == parent->parent_id);
  const std::optional<mmserve::api::TraceParent> back = mmserve::api::parse_traceparent(context.traceparent());
  check(back.has_value() && back->trace_id == context.trace_id && back->parent_id == context.span_id &&
        back->flags == context.flags);
  return 0;
}
