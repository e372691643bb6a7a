// Status -> HTTP mapping over every StatusCode, and both JSON error shapes.
#include "api/error_mapping.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mmserve::api {
namespace {

TEST(ErrorMapping, EveryStatusCodeHasItsHttpCode) {
  const std::vector<std::pair<StatusCode, int>> expected = {
      {StatusCode::kOk, 200},
      {StatusCode::kInvalidArgument, 400},
      {StatusCode::kNotFound, 404},
      {StatusCode::kAlreadyExists, 409},
      {StatusCode::kOutOfRange, 400},
      {StatusCode::kResourceExhausted, 429},
      {StatusCode::kTooLarge, 413},
      {StatusCode::kUnimplemented, 501},
      {StatusCode::kFailedPrecondition, 409},
      {StatusCode::kDeadlineExceeded, 504},
      {StatusCode::kUnavailable, 503},
      {StatusCode::kCancelled, 499},
      {StatusCode::kInternal, 500},
  };
  // The table covers the whole enum: kInternal is its last enumerator.
  ASSERT_EQ(expected.size(), static_cast<size_t>(StatusCode::kInternal) + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(expected[i].first), i) << "table out of enum order";
    EXPECT_EQ(http_status_for(expected[i].first), expected[i].second) << status_code_name(expected[i].first);
  }
  // An out-of-range value (a bug) is still an error, never 200.
  EXPECT_EQ(http_status_for(static_cast<StatusCode>(999)), 500);
}

TEST(ErrorMapping, OpenAiErrorTypes) {
  EXPECT_STREQ(openai_error_type(400), "invalid_request_error");
  EXPECT_STREQ(openai_error_type(404), "invalid_request_error");
  EXPECT_STREQ(openai_error_type(413), "invalid_request_error");
  EXPECT_STREQ(openai_error_type(401), "authentication_error");
  EXPECT_STREQ(openai_error_type(429), "rate_limit_error");
  EXPECT_STREQ(openai_error_type(500), "server_error");
  EXPECT_STREQ(openai_error_type(503), "server_error");
}

TEST(ErrorMapping, KServeShape) {
  const nlohmann::json body = nlohmann::json::parse(error_body(ApiFamily::kKServe, 400, "bad \"shape\""));
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body.size(), 1u);
  EXPECT_EQ(body["error"], "bad \"shape\"");
}

TEST(ErrorMapping, OpenAiShape) {
  const nlohmann::json body =
      nlohmann::json::parse(error_body(ApiFamily::kOpenAi, 404, "no such model", "model_not_found"));
  ASSERT_TRUE(body["error"].is_object());
  EXPECT_EQ(body["error"]["message"], "no such model");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  const nlohmann::json plain = nlohmann::json::parse(error_body(ApiFamily::kOpenAi, 500, "boom"));
  EXPECT_TRUE(plain["error"]["code"].is_null());
  EXPECT_EQ(plain["error"]["type"], "server_error");
}

TEST(ErrorMapping, InvalidUtf8InMessagesNeverThrows) {
  const std::string message = std::string("bad \xff\xfe bytes");
  std::string body;
  ASSERT_NO_THROW(body = error_body(ApiFamily::kKServe, 400, message));
  EXPECT_NO_THROW(nlohmann::json::parse(body));
  ASSERT_NO_THROW(body = error_body(ApiFamily::kOpenAi, 400, message));
  EXPECT_NO_THROW(nlohmann::json::parse(body));
}

}  // namespace
}  // namespace mmserve::api
