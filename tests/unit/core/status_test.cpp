// Tests of Status / StatusOr and the RETURN_IF_ERROR / ASSIGN_OR_RETURN macros (src/core/status.h):
// code names, message formatting, context chaining, and that the macros propagate the first error and bind
// values otherwise.
#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace mmserve {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_TRUE(ok_status().ok());
}

TEST(StatusTest, ToStringUsesCodeName) {
  EXPECT_EQ(invalid_argument("bad shape").to_string(), "INVALID_ARGUMENT: bad shape");
  EXPECT_EQ(not_found("x").to_string(), "NOT_FOUND: x");
  EXPECT_EQ(out_of_range("x").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(resource_exhausted("x").to_string(), "RESOURCE_EXHAUSTED: x");
  EXPECT_EQ(unimplemented("x").to_string(), "UNIMPLEMENTED: x");
  EXPECT_EQ(failed_precondition("x").to_string(), "FAILED_PRECONDITION: x");
  EXPECT_EQ(internal_error("x").to_string(), "INTERNAL: x");
  EXPECT_STREQ(status_code_name(StatusCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(status_code_name(StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_STREQ(status_code_name(StatusCode::kCancelled), "CANCELLED");
  EXPECT_STREQ(status_code_name(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = not_found("tensor 'w' missing").with_context("model.safetensors");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model.safetensors: tensor 'w' missing");
  EXPECT_TRUE(ok_status().with_context("ignored").ok());
  EXPECT_EQ(ok_status().with_context("ignored").message(), "");
}

TEST(StatusOrTest, HoldsValueOrStatus) {
  StatusOr<int> v = 42;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  EXPECT_EQ(v.value(), 42);

  StatusOr<int> e = invalid_argument("nope");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "nope");
}

TEST(StatusOrTest, BuiltFromOkStatusIsInternalError) {
  StatusOr<int> e = ok_status();
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
}

TEST(StatusOrTest, MoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> v = std::make_unique<int>(7);
  ASSERT_TRUE(v.ok());
  std::unique_ptr<int> p = std::move(v).value();
  EXPECT_EQ(*p, 7);
}

Status fail_if_negative(int x) {
  return x < 0 ? invalid_argument("negative") : ok_status();
}
StatusOr<int> half(int x) {
  if (x % 2) return invalid_argument("odd");
  return x / 2;
}

Status chain(int x, int* out) {
  RETURN_IF_ERROR(fail_if_negative(x));
  ASSIGN_OR_RETURN(int h, half(x));
  ASSIGN_OR_RETURN(*out, half(h));  // two ASSIGN_OR_RETURN in one scope must not clash
  return ok_status();
}

TEST(StatusMacrosTest, PropagateFirstErrorAndBindValues) {
  int out = -1;
  EXPECT_TRUE(chain(8, &out).ok());
  EXPECT_EQ(out, 2);

  out = -1;
  Status s = chain(-2, &out);
  EXPECT_EQ(s.message(), "negative");
  EXPECT_EQ(out, -1);

  s = chain(6, &out);  // 6 -> 3 -> odd
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd");
}

TEST(StatusDeathTest, CheckAbortsWithMessage) {
  EXPECT_DEATH(MMSERVE_CHECK(1 + 1 == 3, "arithmetic is broken"), "arithmetic is broken");
}

}  // namespace
}  // namespace mmserve
