// API keys: flags, the keys file format and its errors, tenant lookup, bearer parsing.
#include "api/auth.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace mmserve::api {
namespace {

TEST(ApiKeys, EmptyMeansDisabled) {
  ApiKeys keys;
  EXPECT_FALSE(keys.enabled());
  EXPECT_FALSE(keys.tenant_of("anything").has_value());
}

TEST(ApiKeys, FlagKeysBelongToDefault) {
  ApiKeys keys;
  ASSERT_TRUE(keys.add("sk-one").ok());
  EXPECT_TRUE(keys.enabled());
  EXPECT_EQ(keys.tenant_of("sk-one").value_or(""), "default");
  EXPECT_FALSE(keys.tenant_of("sk-on").has_value());
  EXPECT_FALSE(keys.tenant_of("sk-one2").has_value());
  EXPECT_FALSE(keys.tenant_of("").has_value());
}

TEST(ApiKeys, ParsesKeysFileText) {
  ApiKeys keys;
  const Status s = keys.add_text("# comment\n\nkey-a team-a\r\n  key-b   team.b  \nkey-c\n", "keys.txt");
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys.tenant_of("key-a").value_or(""), "team-a");
  EXPECT_EQ(keys.tenant_of("key-b").value_or(""), "team.b");
  EXPECT_EQ(keys.tenant_of("key-c").value_or(""), "default");
}

TEST(ApiKeys, FileErrorsNameTheLine) {
  ApiKeys keys;
  Status s = keys.add_text("ok-key t\nkey tenant extra\n", "keys.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("keys.txt:2"), std::string::npos) << s.message();
  ApiKeys dup;
  s = dup.add_text("k1 a\nk1 b\n", "keys.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("keys.txt:2"), std::string::npos) << s.message();
  ApiKeys bad_tenant;
  EXPECT_FALSE(bad_tenant.add_text("k1 team/a\n", "keys.txt").ok());
  EXPECT_FALSE(bad_tenant.add("", "x").ok());
  EXPECT_FALSE(bad_tenant.add("with space").ok());
}

TEST(ApiKeys, ReadsAFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "mmserve_api_keys_test.txt";
  {
    std::ofstream out(path);
    out << "file-key tenant-x\n";
  }
  ApiKeys keys;
  ASSERT_TRUE(keys.add_file(path.string()).ok());
  EXPECT_EQ(keys.tenant_of("file-key").value_or(""), "tenant-x");
  std::filesystem::remove(path);
  EXPECT_FALSE(ApiKeys().add_file(path.string()).ok());
}

TEST(BearerToken, ParsesTheHeader) {
  EXPECT_EQ(bearer_token("Bearer abc").value_or(""), "abc");
  EXPECT_EQ(bearer_token("bearer   abc  ").value_or(""), "abc");
  EXPECT_EQ(bearer_token("BEARER abc").value_or(""), "abc");
  EXPECT_FALSE(bearer_token("").has_value());
  EXPECT_FALSE(bearer_token("Bearer").has_value());
  EXPECT_FALSE(bearer_token("Bearer ").has_value());
  EXPECT_FALSE(bearer_token("Basic dXNlcjpwYXNz").has_value());
  EXPECT_FALSE(bearer_token("Bearerabc").has_value());
}

}  // namespace
}  // namespace mmserve::api
