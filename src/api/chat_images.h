// Images inside OpenAI chat messages (issue 15 item 4): a message's content may be a list of parts, and each
// {"type": "image_url", "image_url": {"url": ...}} (or "image_url": "..." as some clients send) becomes
// {"type": "image"} for the chat template, one per image, as HF's processors expect and vLLM's content-format
// detection gives them, while its bytes become an engine::InputItem (kImageBytes), in message and part order (the
// order the template writes the placeholders). Text parts and string contents pass through unchanged.
//
// URLs: base64 data URLs of PNG/JPEG/WebP (api/data_url.h); local file paths only where `local_paths` is set (the
// CLI's --messages file; never a server request); http(s) URLs are refused: 400 "URL fetches are disabled" (a
// server fetching what clients name is a request-forgery risk; docs/api.md "Images").
// Errors name the message and part: kInvalidArgument for malformed parts, unreadable files and bad data URLs;
// kInvalidArgument when more than `max_images` images come.
// Tests: tests/unit/api/chat_images_test.cpp; fuzz: fuzz/chat_images_fuzz.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace mmserve::api {

struct ChatImageOptions {
  bool local_paths = false;  // a "url" that is neither a data URL nor http(s) is a file to read (CLI only)
  int64_t max_images = engine::kMaxImagesPerRequest;
};

// The messages with each image part replaced by {"type": "image"}; the images appended to `images`.
StatusOr<nlohmann::ordered_json> take_chat_images(const nlohmann::ordered_json& messages,
                                                  const ChatImageOptions& options,
                                                  std::vector<engine::InputItem>& images);

}  // namespace mmserve::api
