// Tests of JSON config reading (src/core/json_config.h): missing files, syntax errors with line/column
// worked out by hand, and the typed getters' acceptance rules and messages ("file: a.b: expected X, got Y").
#include "core/json_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace mmserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JsonFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mmserve_json_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(JsonFileTest, ReadsFile) {
  auto json = read_json_file(write("config.json", R"({"hidden_size": 768})"));
  ASSERT_TRUE(json.ok()) << json.status().to_string();
  EXPECT_EQ((*json)["hidden_size"], 768);
}

TEST_F(JsonFileTest, MissingFileIsNotFound) {
  const std::string path = (dir_ / "absent.json").string();
  auto json = read_json_file(path);
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(json.status().message(), HasSubstr(path));
}

TEST_F(JsonFileTest, DirectoryIsAnError) {
  auto json = read_json_file(dir_.string());
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(json.status().message(), HasSubstr(dir_.string()));
}

TEST_F(JsonFileTest, SyntaxErrorHasLineAndColumn) {
  // The stray comma is the 3rd character of line 3.
  const std::string path = write("config.json", "{\n  \"a\": 1,\n  ,\"b\": 2\n}");
  auto json = read_json_file(path);
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(json.status().message(), HasSubstr(path));
  EXPECT_THAT(json.status().message(), HasSubstr("line 3, column 3"));
}

TEST(ParseJsonTest, SyntaxErrors) {
  auto trailing = parse_json(R"({"a": 1,})", "x.json");
  ASSERT_FALSE(trailing.ok());
  EXPECT_EQ(trailing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(trailing.status().message(), HasSubstr("x.json: JSON syntax error at line 1, column 9"));
  auto empty = parse_json("", "empty.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("line 1, column 1"));
  auto nul = parse_json(std::string("{}\n\0junk", 8), "nul.json");
  ASSERT_FALSE(nul.ok());
  EXPECT_THAT(nul.status().message(), HasSubstr("line 2, column 1"));
  auto huge = parse_json("[1e999]", "huge.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.status().message(), HasSubstr("huge.json"));
}

class JsonObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto parsed = parse_json(R"({
      "text_config": {"hidden_size": 768, "name": "clip", "eps": 1e-5, "flag": true,
                      "size_str": "768", "half": 0.5, "whole": 4096.0, "big": 18446744073709551615,
                      "neg": -3, "null_value": null, "mean": [0.48, 0.45, 1], "bad_mean": [0.5, "x"],
                      "one": 1, "zero": 0},
      "not_object": 3})",
                             "config.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    json_ = std::move(parsed).value();
    auto root = JsonObject::wrap(json_, "config.json");
    ASSERT_TRUE(root.ok());
    auto text = root->get_object("text_config");
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    text_.emplace(*text);
  }
  nlohmann::json json_;
  std::optional<JsonObject> text_;
};

TEST_F(JsonObjectTest, LabelsChainKeys) {
  EXPECT_EQ(text_->label(), "config.json: text_config");
}

TEST_F(JsonObjectTest, GetInt) {
  EXPECT_EQ(*text_->get_int("hidden_size"), 768);
  EXPECT_EQ(*text_->get_int("neg"), -3);
  EXPECT_EQ(*text_->get_int("whole"), 4096);  // a float without a fraction is an integer
  auto s = text_->get_int("size_str");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "config.json: text_config.size_str: expected an integer, got string");
  auto half = text_->get_int("half");
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(half.status().message(), HasSubstr("text_config.half: expected an integer, got number 0.5"));
  auto big = text_->get_int("big");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("out of range"));
  EXPECT_FALSE(text_->get_int("flag").ok());
  auto missing = text_->get_int("vocab_size");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("config.json: text_config.vocab_size: missing"));
}

TEST_F(JsonObjectTest, GetDouble) {
  EXPECT_DOUBLE_EQ(*text_->get_double("eps"), 1e-5);
  EXPECT_DOUBLE_EQ(*text_->get_double("hidden_size"), 768.0);  // integers are numbers too
  auto s = text_->get_double("name");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "config.json: text_config.name: expected a number, got string");
  EXPECT_FALSE(text_->get_double("flag").ok());
}

TEST_F(JsonObjectTest, GetString) {
  EXPECT_EQ(*text_->get_string("name"), "clip");
  auto s = text_->get_string("hidden_size");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "config.json: text_config.hidden_size: expected a string, got integer 768");
}

TEST_F(JsonObjectTest, GetBoolAcceptsOnlyBooleans) {
  EXPECT_TRUE(*text_->get_bool("flag"));
  for (const char* key : {"one", "zero", "name"}) {
    auto b = text_->get_bool(key);
    ASSERT_FALSE(b.ok()) << key;
    EXPECT_THAT(b.status().message(), HasSubstr("expected a boolean"));
  }
}

TEST_F(JsonObjectTest, DoubleArray) {
  auto mean = text_->get_double_array("mean");
  ASSERT_TRUE(mean.ok());
  EXPECT_EQ(*mean, (std::vector<double>{0.48, 0.45, 1.0}));
  auto bad = text_->get_double_array("bad_mean");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "config.json: text_config.bad_mean[1]: expected a number, got string");
  EXPECT_FALSE(text_->get_double_array("eps").ok());
}

TEST_F(JsonObjectTest, FallbacksApplyOnlyWhenAbsentOrNull) {
  EXPECT_EQ(*text_->get_int_or("absent", 12), 12);
  EXPECT_EQ(*text_->get_int_or("null_value", 12), 12);
  EXPECT_EQ(*text_->get_int_or("hidden_size", 12), 768);
  EXPECT_FALSE(text_->get_int_or("name", 12).ok());  // present with the wrong type: still an error
  EXPECT_DOUBLE_EQ(*text_->get_double_or("absent", 0.25), 0.25);
  EXPECT_FALSE(text_->get_double_or("name", 0.25).ok());
  EXPECT_EQ(*text_->get_string_or("absent", "gelu"), "gelu");
  EXPECT_EQ(*text_->get_string_or("name", "gelu"), "clip");
  EXPECT_FALSE(text_->get_string_or("flag", "gelu").ok());
  EXPECT_FALSE(*text_->get_bool_or("absent", false));
  EXPECT_TRUE(*text_->get_bool_or("flag", false));
  EXPECT_FALSE(text_->get_bool_or("one", false).ok());
}

TEST_F(JsonObjectTest, HasAndObjects) {
  EXPECT_TRUE(text_->has("name"));
  EXPECT_FALSE(text_->has("null_value"));
  EXPECT_FALSE(text_->has("absent"));
  auto root = JsonObject::wrap(json_, "config.json");
  auto not_object = root->get_object("not_object");
  ASSERT_FALSE(not_object.ok());
  EXPECT_EQ(not_object.status().message(), "config.json: not_object: expected an object, got integer 3");
  auto missing = root->get_object("vision_config");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("config.json: vision_config: missing"));
  auto wrap_array = JsonObject::wrap(nlohmann::json::array(), "x.json");
  ASSERT_FALSE(wrap_array.ok());
  EXPECT_EQ(wrap_array.status().message(), "x.json: expected an object, got array");
}

}  // namespace
}  // namespace mmserve
