// OpenAI embeddings/models (de)serialisation (see openai_codec.h). nlohmann exceptions are caught here.
// Tests: tests/unit/api/openai_codec_test.cpp.
#include "api/openai_codec.h"

#include <bit>
#include <nlohmann/json.hpp>

#include "api/base64.h"
#include "api/data_url.h"
#include "api/json_parse.h"
#include "api/json_writer.h"

namespace mmserve::api {
namespace {

using nlohmann::json;
using serving::InputItem;
using serving::InputKind;

static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian float32 bytes");

StatusOr<InputItem> parse_item(const json& value, size_t index, const CodecOptions& options) {
  const std::string where = "input[" + std::to_string(index) + "]";
  if (value.is_number_integer() || value.is_array()) {
    return invalid_argument(where + ": token-id inputs are not supported; send text (or an image data URL)");
  }
  if (!value.is_string()) return invalid_argument(where + " must be a string");
  const std::string& text = value.get_ref<const std::string&>();
  InputItem item;
  if (looks_like_data_url(text)) {
    StatusOr<DataUrl> url = parse_image_data_url(text);
    if (!url.ok()) return url.status().with_context(where);
    item.kind = InputKind::kImageBytes;
    item.image_bytes = std::move(url->bytes);
    return item;
  }
  if (looks_like_http_url(text)) {
    return invalid_argument(where + ": URL fetches are disabled; send images as data URLs (data:image/png;base64,...)");
  }
  item.kind = InputKind::kText;
  item.text = text;  // the JSON parser has validated its UTF-8
  return item;
}

StatusOr<OpenAiEmbeddingRequest> parse_root(const json& root, const CodecOptions& options) {
  if (!root.is_object()) return invalid_argument("the request body must be a JSON object");
  for (const auto& [key, value] : root.items()) {
    if (key != "model" && key != "input" && key != "encoding_format" && key != "user") {
      return invalid_argument("Unrecognized request argument supplied: " + key.substr(0, 64));
    }
  }
  OpenAiEmbeddingRequest out;
  const auto model = root.find("model");
  if (model == root.end() || !model->is_string() || model->get_ref<const std::string&>().empty()) {
    return invalid_argument("'model' must be a non-empty string");
  }
  out.model = model->get<std::string>();
  const auto input = root.find("input");
  if (input == root.end()) return invalid_argument("'input' is required");
  if (input->is_array()) {
    if (input->empty()) return invalid_argument("'input' must not be an empty array");
    size_t index = 0;
    for (const json& item : *input) {
      ASSIGN_OR_RETURN(InputItem parsed, parse_item(item, index++, options));
      out.inputs.push_back(std::move(parsed));
    }
  } else {
    ASSIGN_OR_RETURN(InputItem parsed, parse_item(*input, 0, options));
    out.inputs.push_back(std::move(parsed));
  }
  out.input_count = out.inputs.size();
  if (const auto format = root.find("encoding_format"); format != root.end() && !format->is_null()) {
    if (!format->is_string() || (*format != "float" && *format != "base64")) {
      return invalid_argument("'encoding_format' must be \"float\" or \"base64\"");
    }
    out.base64 = *format == "base64";
  }
  if (const auto user = root.find("user"); user != root.end() && !user->is_string()) {
    return invalid_argument("'user' must be a string");
  }
  return out;
}

}  // namespace

StatusOr<OpenAiEmbeddingRequest> parse_openai_embeddings(std::string_view body, const CodecOptions& options) {
  ASSIGN_OR_RETURN(json root, parse_json(body));
  try {
    return parse_root(root, options);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("invalid request: ") + e.what());
  }
}

StatusOr<std::string> encode_openai_embeddings(const OpenAiEmbeddingRequest& request,
                                               const serving::ResponseData& data) {
  const auto* clip = engine::output_as<engine::ClipOutput>(data.output);
  if (clip == nullptr) return invalid_argument("this model does not return embeddings (it is not a CLIP model)");
  const engine::ClipOutput& response = *clip;
  if (response.embeddings.size() != request.input_count) {
    return internal_error("the server returned " + std::to_string(response.embeddings.size()) + " embeddings for " +
                          std::to_string(request.input_count) + " inputs");
  }
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < response.embeddings.size(); ++i) {
    const std::vector<float>& e = response.embeddings[i];
    if (static_cast<int64_t>(e.size()) != response.dim) {
      return internal_error("embedding " + std::to_string(i) + " has the wrong size");
    }
    if (i > 0) out += ',';
    out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    if (request.base64) {
      out += '"';
      out += base64_encode(std::string_view(reinterpret_cast<const char*>(e.data()), e.size() * sizeof(float)));
      out += '"';
    } else {
      append_json_floats(out, e);
    }
    out += '}';
  }
  out += "],\"model\":";
  append_json_string(out, request.model);
  const std::string tokens = std::to_string(data.tokens);
  out += ",\"usage\":{\"prompt_tokens\":" + tokens + ",\"total_tokens\":" + tokens + "}}";
  return out;
}

std::string encode_openai_models(const std::vector<serving::ModelStatus>& models,
                                 const std::vector<serving::AdapterStatus>& adapters) {
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (const serving::ModelStatus& m : models) {
    if (m.state != serving::ModelState::kReady) continue;
    nlohmann::ordered_json e;
    e["id"] = m.name;
    e["object"] = "model";
    e["created"] = 0;
    e["owned_by"] = "mmserve";
    data.push_back(std::move(e));
  }
  for (const serving::AdapterStatus& a : adapters) {  // as vLLM lists LoRA modules: root and parent
    nlohmann::ordered_json e;
    e["id"] = a.info.name;
    e["object"] = "model";
    e["created"] = 0;
    e["owned_by"] = "mmserve";
    e["root"] = a.info.dir;
    e["parent"] = a.parent;
    data.push_back(std::move(e));
  }
  nlohmann::ordered_json out;
  out["object"] = "list";
  out["data"] = std::move(data);
  return dump_json(out);
}

}  // namespace mmserve::api
