// W3C traceparent parsing and id generation (see trace_context.h). Tests: tests/unit/api/trace_context_test.cpp.
#include "api/trace_context.h"

#include <random>

namespace mmserve::api {
namespace {

bool is_lower_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool all_zero(std::string_view s) {
  return s.find_first_not_of('0') == std::string_view::npos;
}

std::string random_hex(size_t digits) {
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(digits, '0');
  do {
    for (size_t i = 0; i < digits; i += 16) {
      uint64_t bits = rng();
      for (size_t j = i; j < digits && j < i + 16; ++j, bits >>= 4) out[j] = kHex[bits & 15];
    }
  } while (all_zero(out));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<TraceParent> parse_traceparent(std::string_view value) {
  value = trim(value);
  constexpr size_t kLength = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
  if (value.size() < kLength) return std::nullopt;
  const std::string_view version = value.substr(0, 2);
  if (!is_lower_hex(version) || version == "ff") return std::nullopt;
  if (version == "00" ? value.size() != kLength : (value.size() > kLength && value[kLength] != '-')) {
    return std::nullopt;
  }
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  TraceParent out;
  out.trace_id = std::string(value.substr(3, 32));
  out.parent_id = std::string(value.substr(36, 16));
  out.flags = std::string(value.substr(53, 2));
  if (!is_lower_hex(out.trace_id) || !is_lower_hex(out.parent_id) || !is_lower_hex(out.flags)) return std::nullopt;
  if (all_zero(out.trace_id) || all_zero(out.parent_id)) return std::nullopt;
  return out;
}

std::string random_trace_id() {
  return random_hex(32);
}
std::string random_span_id() {
  return random_hex(16);
}

std::string TraceContext::traceparent() const {
  return "00-" + trace_id + "-" + span_id + "-" + flags;
}

TraceContext make_trace_context(std::string_view header) {
  TraceContext out;
  out.span_id = random_span_id();
  if (std::optional<TraceParent> parent = parse_traceparent(header)) {
    out.trace_id = parent->trace_id;
    out.parent_span_id = parent->parent_id;
    // Version 00 defines only the "sampled" bit; keep it and clear the others, as the spec asks.
    const int flags = std::stoi(parent->flags, nullptr, 16) & 1;
    out.flags = flags ? "01" : "00";
  } else {
    out.trace_id = random_trace_id();
  }
  return out;
}

}  // namespace mmserve::api
