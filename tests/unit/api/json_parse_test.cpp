// parse_json's fast path against nlohmann's parser: the same DOM (types included: unsigned, signed and float
// numbers stay apart) for every well-formed document it takes, nlohmann's own error message for every malformed
// one, and the documents it leaves to nlohmann (escapes, non-ASCII, overflow, BOM, depth) still parsed right.
#include "api/json_parse.h"
#include "api/json_writer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace mmserve::api {
namespace {

using nlohmann::json;

void expect_same_as_nlohmann(const std::string& text) {
  StatusOr<json> reference = parse_json_nlohmann(text);
  StatusOr<json> parsed = parse_json(text);
  ASSERT_EQ(parsed.ok(), reference.ok()) << text;
  if (reference.ok()) {
    EXPECT_TRUE(json_same_dom(*parsed, *reference)) << text << "\n" << parsed->dump() << "\n" << reference->dump();
  } else {
    EXPECT_EQ(parsed.status().message(), reference.status().message()) << text;
  }
}

TEST(JsonParse, FastPathTakesPlainDocumentsAndBuildsNlohmannsDom) {
  const std::vector<std::string> documents = {
      R"({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": ["iVBORw0KGgo="]}]})",
      R"({"a": 1, "b": -1, "c": 1.5, "d": 0, "e": -0, "f": 1e3, "g": 1E-3, "h": 2.5e+2, "i": 18446744073709551615})",
      R"({"min": -9223372036854775808, "t": true, "f": false, "n": null, "s": "", "o": {}, "a": []})",
      R"({"k": 1, "k": "last value wins"})",
      " \t\r\n[ 1 , [ 2 , [ ] ] , { \"x\" : { } } ]\n",
      R"("just a string")", "0", "-0.0", "123456789012", "[0.1, 0.2, 1e-300, 5e-324, 1.7976931348623157e308]",
      std::string("{\"long\": \"") + std::string(100000, 'A') + "\x7f\"}",
  };
  for (const std::string& text : documents) {
    std::optional<json> fast = parse_json_fast(text);
    ASSERT_TRUE(fast.has_value()) << text;
    StatusOr<json> reference = parse_json_nlohmann(text);
    ASSERT_TRUE(reference.ok()) << text;
    EXPECT_TRUE(json_same_dom(*fast, *reference)) << text;
  }
  EXPECT_TRUE(parse_json_fast("18446744073709551615")->is_number_unsigned());
  EXPECT_TRUE(parse_json_fast("-0")->is_number_integer());
  EXPECT_FALSE(parse_json_fast("-0")->is_number_unsigned());
}

TEST(JsonParse, EscapesAndNonAsciiDecodeAsNlohmannDoes) {
  const std::vector<std::string> documents = {
      R"(["a\"b", "\\", "\/", "\b\f\n\r\t", "\u00e9", "\uD83D\uDE00", "x\u0000y"])",
      "[\"caf\xc3\xa9\", \"\xe7\x8c\xab\", \"\xf0\x9f\x98\x80\"]",
      R"({"key\nwith escape": 1, "caf\u00e9": 2})",
      std::string("{\"big\": \"") + std::string(50000, 'B') + "\\n" + std::string(50000, 'C') + "\"}",
  };
  for (const std::string& text : documents) expect_same_as_nlohmann(text);
  EXPECT_EQ((*parse_json(R"(["a\"b\u00e9"])"))[0].get<std::string>(), "a\"b\xc3\xa9");
}

TEST(JsonParse, MalformedDocumentsKeepNlohmannsMessages) {
  const std::vector<std::string> documents = {
      "", " ", "{", "}", "[1,]", "[1 2]", "{\"a\" 1}", "{\"a\":}", "{a: 1}", "{\"a\": 1,}", "[01]", "[1.]", "[.5]",
      "[1e]", "[-]", "[+1]", "[NaN]", "[tru]", "[nulll]", "\"unterminated", "\"bad \\x escape\"", "\"\\uD800\"",
      "\"\\uDC00\"", "\"\\u12\"", "\"ctrl \x01\"", "\"tab \t inside\"", "\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
      "\"\xc0\xaf\"", "[1e400]", "[-1e400]", "{} {}", "[1] x", "\xef\xbb\xbf{}", "{\"a\": [1, 2}",
      std::string(100000, '['), std::string("{\"long\": \"") + std::string(100000, 'A'),
      std::string("{\"long\": \"") + std::string(100000, 'A') + "\x01\"}",
  };
  for (const std::string& text : documents) {
    EXPECT_FALSE(parse_json_fast(text).has_value()) << text.substr(0, 40);
    expect_same_as_nlohmann(text);
  }
  StatusOr<json> bad = parse_json("{\"inputs\": [}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("malformed JSON: parse error at line 1, column ", 0), 0u)
      << bad.status().message();
}

TEST(JsonParse, WellFormedDocumentsTheFastPathLeavesToNlohmann) {
  // A BOM, integers beyond 64 bits (nlohmann makes them doubles), nesting deeper than the fast path recurses.
  const std::vector<std::string> documents = {
      "\xef\xbb\xbf{\"a\": 1}", "[18446744073709551616]", "[-9223372036854775809]",
      std::string(200, '[') + std::string(200, ']'),
  };
  for (const std::string& text : documents) {
    EXPECT_FALSE(parse_json_fast(text).has_value()) << text.substr(0, 40);
    expect_same_as_nlohmann(text);
    EXPECT_TRUE(parse_json(text).ok()) << text.substr(0, 40);
  }
}

// append_json_string's ASCII span copy writes what nlohmann's dump writes, for every single byte (each control
// character, '"', '\\', DEL, every byte >= 0x80 alone: invalid UTF-8), valid multi-byte UTF-8 and random strings.
TEST(JsonWriter, AppendJsonStringEqualsNlohmannsDump) {
  std::vector<std::string> cases = {"", "plain", "a\"b", "back\\slash", "\"\\\"", "tab\there", "caf\xc3\xa9",
                                    "\xe2\x82\xac\xf0\x9f\x98\x80", "cut \xe2\x82"};
  for (int b = 0; b < 256; ++b) cases.push_back(std::string(1, static_cast<char>(b)) + "x");
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 40, ' ');
    for (char& c : s) c = static_cast<char>(i % 2 == 0 ? 32 + rng() % 95 : rng() % 256);
    cases.push_back(s);
  }
  for (const std::string& value : cases) {
    std::string out = "prefix";
    append_json_string(out, value);
    EXPECT_EQ(out, "prefix" + dump_json(json(value))) << value;
  }
}

}  // namespace
}  // namespace mmserve::api
