// W3C traceparent parsing (valid, each kind of invalid, future versions) and id generation.
#include "api/trace_context.h"

#include <gtest/gtest.h>

#include <set>

namespace mmserve::api {
namespace {

constexpr const char* kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceParent, ParsesTheSpecExample) {
  const auto t = parse_traceparent(kValid);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(t->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(t->flags, "01");
  EXPECT_TRUE(parse_traceparent(std::string(" ") + kValid + " ").has_value());  // surrounding blanks
}

TEST(TraceParent, RejectsMalformedValues) {
  const std::vector<std::string> bad = {
      "",
      "00",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",           // no flags
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",        // upper case
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",        // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",        // zero parent id
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        // version ff
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // 00 has no more fields
      "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",        // separators
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",        // non-hex
      "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",         // short version
      "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-0100",        // shifted fields
      "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",       // future: 56th char must be '-'
  };
  for (const std::string& value : bad) EXPECT_FALSE(parse_traceparent(value).has_value()) << value;
}

TEST(TraceParent, AcceptsFutureVersionsWithMoreFields) {
  const auto t = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(TraceContext, KeepsTheCallersTraceWithANewSpan) {
  const TraceContext c = make_trace_context(kValid);
  EXPECT_EQ(c.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(c.parent_span_id, "00f067aa0ba902b7");
  EXPECT_NE(c.span_id, "00f067aa0ba902b7");
  EXPECT_EQ(c.flags, "01");
  const auto back = parse_traceparent(c.traceparent());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->trace_id, c.trace_id);
  EXPECT_EQ(back->parent_id, c.span_id);
}

TEST(TraceContext, UnsampledFlagIsKeptAndUnknownBitsCleared) {
  EXPECT_EQ(make_trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").flags, "00");
  EXPECT_EQ(make_trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff").flags, "01");
}

TEST(TraceContext, GeneratesAValidTraceWhenAbsentOrInvalid) {
  for (const char* header : {"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}) {
    const TraceContext c = make_trace_context(header);
    EXPECT_TRUE(c.parent_span_id.empty());
    EXPECT_TRUE(parse_traceparent(c.traceparent()).has_value()) << c.traceparent();
  }
}

TEST(TraceContext, RandomIdsAreWellFormedAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string t = random_trace_id(), s = random_span_id();
    ASSERT_EQ(t.size(), 32u);
    ASSERT_EQ(s.size(), 16u);
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace mmserve::api
