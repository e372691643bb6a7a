// Base64 (strict decoding, round trips) and image data URL parsing, including every refusal.
#include "api/data_url.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "api/base64.h"

namespace mmserve::api {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                    {"f", "Zg=="},
                                                                    {"fo", "Zm8="},
                                                                    {"foo", "Zm9v"},
                                                                    {"foob", "Zm9vYg=="},
                                                                    {"fooba", "Zm9vYmE="},
                                                                    {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    StatusOr<std::string> back = base64_decode(encoded);
    ASSERT_TRUE(back.ok()) << encoded;
    EXPECT_EQ(*back, plain);
  }
}

TEST(Base64, AcceptsUnpaddedInput) {
  StatusOr<std::string> d = base64_decode("Zm9vYg");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "foob");
}

TEST(Base64, RandomBinaryRoundTrips) {
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string bytes(static_cast<size_t>(n), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    StatusOr<std::string> back = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, bytes);
  }
}

TEST(Base64, RejectsBrokenInput) {
  for (const char* bad :
       {"Zm9v!", "Zm 9v", "Zm9vY", "Zg=", "Zg===", "=Zg=", "Z=g=", "Zm9\n", "Zh==", "Zm9=A", "Zm-v", "Zm_v"}) {
    StatusOr<std::string> d = base64_decode(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(d.status().message().find("invalid base64"), std::string::npos);
    }
  }
}

// The table decoder against the bitwise one it falls back to: the same bytes, or the same error message (first bad
// offset, padding, length, trailing bits), for long texts broken at every kind of place.
TEST(Base64, FastDecoderEqualsBitwiseOnGoodAndBrokenInput) {
  std::mt19937 rng(11);
  std::vector<std::string> texts;
  for (int n = 0; n < 200; ++n) {
    std::string bytes(static_cast<size_t>(rng() % 400), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    std::string text = base64_encode(bytes);
    texts.push_back(text);
    if (text.empty()) continue;
    std::string broken = text;
    broken[rng() % broken.size()] = "!= -_\n\x80"[rng() % 7];
    texts.push_back(broken);
    texts.push_back(text.substr(0, text.size() - 1 - rng() % std::min<size_t>(text.size(), 3)));  // cut short
    texts.push_back(text + "=");
    texts.push_back(text + "A");
    std::string unpadded = text;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    texts.push_back(unpadded);
    if (unpadded.size() % 4 != 0) {  // non-zero unused bits in the last character
      unpadded.back() = unpadded.back() == '/' ? '+' : '/';
      texts.push_back(unpadded);
    }
  }
  for (const std::string& text : texts) {
    StatusOr<std::string> fast = base64_decode(text);
    StatusOr<std::string> slow = base64_decode_bitwise(text);
    ASSERT_EQ(fast.ok(), slow.ok()) << text;
    if (fast.ok()) {
      EXPECT_EQ(*fast, *slow);
    } else {
      EXPECT_EQ(fast.status().message(), slow.status().message()) << text;
    }
  }
}

TEST(DataUrl, ParsesImageDataUrls) {
  StatusOr<DataUrl> png = parse_image_data_url("data:image/png;base64,iVBORw0KGgo=");
  ASSERT_TRUE(png.ok()) << png.status().to_string();
  EXPECT_EQ(png->media_type, "image/png");
  EXPECT_EQ(png->bytes, std::string("\x89PNG\r\n\x1a\n", 8));
  StatusOr<DataUrl> jpg = parse_image_data_url("DATA:Image/JPG;charset=binary;base64,/9j/4A==");
  ASSERT_TRUE(jpg.ok()) << jpg.status().to_string();
  EXPECT_EQ(jpg->media_type, "image/jpeg");
  EXPECT_TRUE(parse_image_data_url("data:image/webp;base64,UklGRg==").ok());
}

TEST(DataUrl, RefusesWhatIsNotAnImageDataUrl) {
  const std::vector<std::string> bad = {
      "image/png;base64,AAAA",           // no scheme
      "data:image/png;base64",           // no comma
      "data:image/png,AAAA",             // not base64
      "data:text/plain;base64,AAAA",     // not an image
      "data:image/gif;base64,R0lGOA==",  // an image we do not decode
      "data:;base64,AAAA",               // no media type
      "data:image/png;base64,@@@@",      // bad base64
      "data:image/png;base64,",          // empty
  };
  for (const std::string& url : bad) {
    StatusOr<DataUrl> d = parse_image_data_url(url);
    EXPECT_FALSE(d.ok()) << url;
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << url;
    }
  }
}

TEST(DataUrl, RecognisesUrls) {
  EXPECT_TRUE(looks_like_data_url("data:anything"));
  EXPECT_TRUE(looks_like_data_url("Data:image/png"));
  EXPECT_FALSE(looks_like_data_url("a photo of data:"));
  EXPECT_TRUE(looks_like_http_url("https://example.com/cat.png"));
  EXPECT_TRUE(looks_like_http_url("HTTP://example.com/cat.png"));
  EXPECT_FALSE(looks_like_http_url("https://example.com is a website"));  // text, not a single URL
  EXPECT_FALSE(looks_like_http_url("ftp://example.com/cat.png"));
  EXPECT_FALSE(looks_like_http_url("a photo of a cat"));
}

}  // namespace
}  // namespace mmserve::api
