// take_chat_images (api/chat_images.h): image_url parts become {"type": "image"} and their bytes InputItems in
// order; text parts and string contents pass; data URLs, local paths (CLI only) and http(s) URLs (400, never
// fetched); malformed parts, broken data URLs, unreadable files and too many images are errors naming the
// part. Also through parse_completion_request (the chat codec carries the images).
#include "api/chat_images.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "api/base64.h"
#include "api/openai_completions_codec.h"

namespace mmserve::api {
namespace {

using ojson = nlohmann::ordered_json;

std::string data_url(const std::string& bytes) {
  return "data:image/png;base64," + base64_encode(bytes);
}

TEST(ChatImages, ImagePartsBecomeImageMarkersAndInputsInOrder) {
  const ojson messages = ojson::parse(R"([
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [
      {"type": "text", "text": "compare"},
      {"type": "image_url", "image_url": {"url": ")" +
                                      data_url("first") + R"("}},
      {"type": "image_url", "image_url": ")" +
                                      data_url("second") + R"("}
    ]},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": ")" +
                                      data_url("third") + R"(", "detail": "low"}}]}
  ])");
  std::vector<engine::InputItem> images;
  auto out = take_chat_images(messages, {}, images);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(images.size(), 3u);
  EXPECT_EQ(images[0].image_bytes, "first");
  EXPECT_EQ(images[1].image_bytes, "second");
  EXPECT_EQ(images[2].image_bytes, "third");
  for (const auto& i : images) EXPECT_EQ(i.kind, engine::InputKind::kImageBytes);
  EXPECT_EQ((*out)[0], messages[0]);
  EXPECT_EQ((*out)[1]["content"][0], messages[1]["content"][0]);
  EXPECT_EQ((*out)[1]["content"][1], ojson({{"type", "image"}}));
  EXPECT_EQ((*out)[1]["content"][2], ojson({{"type", "image"}}));
  EXPECT_EQ((*out)[3]["content"][0], ojson({{"type", "image"}}));
  EXPECT_EQ((*out)[2], messages[2]);
}

TEST(ChatImages, UrlsAndPathsFollowTheOptions) {
  auto one = [](const std::string& url, const ChatImageOptions& options) {
    const ojson m =
        ojson::array({{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", url}}}}}}}});
    std::vector<engine::InputItem> images;
    return take_chat_images(m, options, images).status();
  };
  Status s = one("https://example.com/cat.png", {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("URL fetches are disabled"), std::string::npos) << s.message();
  // A local path is a file only for the CLI.
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "mmserve_chat_image_test.png";
  std::ofstream(file) << "PNGBYTES";
  s = one(file.string(), {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data URL"), std::string::npos) << s.message();
  ChatImageOptions cli;
  cli.local_paths = true;
  EXPECT_TRUE(one(file.string(), cli).ok());
  s = one("/no/such/file.png", cli);
  EXPECT_NE(s.message().find("cannot read"), std::string::npos) << s.message();
  std::filesystem::remove(file);
  s = one("data:image/png;base64,***", {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("messages[0].content[0].image_url"), std::string::npos) << s.message();
  EXPECT_FALSE(one("data:text/plain;base64,aGk=", {}).ok());
}

TEST(ChatImages, MalformedPartsAndTooManyImagesAreErrors) {
  std::vector<engine::InputItem> images;
  for (const char* bad : {R"([{"role": "user", "content": [5]}])", R"([{"role": "user", "content": [{"text": "x"}]}])",
                          R"([{"role": "user", "content": [{"type": "image_url"}]}])",
                          R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"uri": "x"}}]}])",
                          R"([{"role": "user", "content": [{"type": "image_url", "image_url": 7}]}])"}) {
    auto out = take_chat_images(ojson::parse(bad), {}, images);
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("messages[0].content[0]"), std::string::npos) << out.status().message();
  }
  ojson many = ojson::array({{{"role", "user"}, {"content", ojson::array()}}});
  for (int i = 0; i < 3; ++i) {
    many[0]["content"].push_back({{"type", "image_url"}, {"image_url", {{"url", data_url("x")}}}});
  }
  ChatImageOptions two;
  two.max_images = 2;
  auto out = take_chat_images(many, two, images);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("too many images"), std::string::npos);
}

TEST(ChatImages, TheChatCodecCarriesTheImages) {
  const std::string body = R"({"model": "llava", "messages": [{"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": ")" +
                           data_url("pixels") + R"("}}, {"type": "text", "text": "what?"}]}]})";
  auto r = parse_completion_request(body, /*chat=*/true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->images.size(), 1u);
  EXPECT_EQ(r->images[0].image_bytes, "pixels");
  EXPECT_EQ((*r->params->messages)[0]["content"][0], ojson({{"type", "image"}}));
  auto url = parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": "http://10.0.0.1/a.png"}}]}]})",
                                      true);
  EXPECT_EQ(url.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::api
