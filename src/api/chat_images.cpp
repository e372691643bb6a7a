// Image parts of chat messages (see chat_images.h).
#include "api/chat_images.h"

#include <fstream>
#include <sstream>

#include "api/data_url.h"

namespace mmserve::api {
namespace {

StatusOr<std::string> image_bytes(const std::string& url, const ChatImageOptions& options, const std::string& where) {
  if (looks_like_data_url(url)) {
    StatusOr<DataUrl> parsed = parse_image_data_url(url);
    if (!parsed.ok()) return parsed.status().with_context(where);
    return std::move(parsed->bytes);
  }
  if (looks_like_http_url(url)) {
    return invalid_argument(where + ": URL fetches are disabled; send images as data URLs (data:image/png;base64,...)");
  }
  if (!options.local_paths) {
    return invalid_argument(where + ": an image url must be a data URL (data:image/png;base64,...)");
  }
  std::ifstream in(url, std::ios::binary);
  if (!in) return invalid_argument(where + ": cannot read image file '" + url + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<nlohmann::ordered_json> take_chat_images(const nlohmann::ordered_json& messages,
                                                  const ChatImageOptions& options,
                                                  std::vector<engine::InputItem>& images) {
  if (!messages.is_array()) return invalid_argument("'messages' must be an array");
  nlohmann::ordered_json out = messages;
  int64_t count = 0;
  for (size_t m = 0; m < out.size(); ++m) {
    nlohmann::ordered_json& message = out[m];
    if (!message.is_object() || !message.contains("content") || !message["content"].is_array()) continue;
    for (size_t k = 0; k < message["content"].size(); ++k) {
      nlohmann::ordered_json& part = message["content"][k];
      const std::string where = "messages[" + std::to_string(m) + "].content[" + std::to_string(k) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
        return invalid_argument(where + " must be an object with a string 'type'");
      }
      const std::string type = part["type"].get<std::string>();
      if (type != "image_url") continue;
      if (!part.contains("image_url")) return invalid_argument(where + ": an image_url part needs 'image_url'");
      const nlohmann::ordered_json& ref = part["image_url"];
      std::string url;
      if (ref.is_string()) {
        url = ref.get<std::string>();
      } else if (ref.is_object() && ref.contains("url") && ref["url"].is_string()) {
        url = ref["url"].get<std::string>();
      } else {
        return invalid_argument(where + ".image_url must be {\"url\": \"...\"} or a string");
      }
      if (++count > options.max_images) {
        return invalid_argument("too many images: at most " + std::to_string(options.max_images) + " per request");
      }
      ASSIGN_OR_RETURN(std::string bytes, image_bytes(url, options, where + ".image_url"));
      engine::InputItem item;
      item.kind = engine::InputKind::kImageBytes;
      item.image_bytes = std::move(bytes);
      images.push_back(std::move(item));
      part = nlohmann::ordered_json{{"type", "image"}};
    }
  }
  return out;
}

}  // namespace mmserve::api
