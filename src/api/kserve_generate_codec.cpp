// The KServe generate codecs (see kserve_generate_codec.h): the body is checked for its keys, folded into an
// OpenAI completions body (the same names) and parsed by parse_completion_request, whose messages name the fields.
#include "api/kserve_generate_codec.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string_view>

#include "api/data_url.h"
#include "api/json_parse.h"
#include "api/json_writer.h"

namespace mmserve::api {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::array<std::string_view, 15> kFields = {
    "max_tokens",         "temperature",      "top_p",     "top_k",   "seed",       "stop",
    "stop_words",         "min_tokens",       "ignore_eos", "min_p",  "bad_words",  "repetition_penalty",
    "presence_penalty",   "frequency_penalty", "stream"};

bool known(const std::string& key) { return std::find(kFields.begin(), kFields.end(), key) != kFields.end(); }

// Names the keys of `object` outside kFields (and `extra`), or "" when there are none.
std::string unknown_keys(const json& object, std::string_view extra1, std::string_view extra2,
                         std::string_view extra3 = "") {
  std::string names;
  for (const auto& [key, value] : object.items()) {
    if (known(key) || key == extra1 || key == extra2 || (!extra3.empty() && key == extra3)) continue;
    names += (names.empty() ? "'" : ", '") + key.substr(0, 64) + "'";
  }
  return names;
}

ojson header(const std::string& model) { return {{"model_name", model}, {"model_version", "1"}}; }

}  // namespace

StatusOr<CompletionRequest> parse_generate_request(const std::string& body, const std::string& model) {
  ASSIGN_OR_RETURN(json root, parse_json(body));
  if (!root.is_object()) return invalid_argument("the request body must be a JSON object");
  if (std::string bad = unknown_keys(root, "text_input", "parameters", "image"); !bad.empty()) {
    return invalid_argument("unknown field(s) " + bad + " (the generate extension takes text_input, image, " +
                            "parameters and the generation fields of docs/api.md)");
  }
  std::vector<engine::InputItem> images;
  if (const auto image = root.find("image"); image != root.end()) {
    // A LLaVA's images: a data URL, or a list of them (one per "<image>" in text_input, in order).
    const json list = image->is_array() ? *image : json::array({*image});
    if (list.empty()) return invalid_argument("'image' must be a data URL or a non-empty list of them");
    if (static_cast<int64_t>(list.size()) > engine::kMaxImagesPerRequest) {
      return invalid_argument("too many images: at most " + std::to_string(engine::kMaxImagesPerRequest) +
                              " per request");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = "image[" + std::to_string(i) + "]";
      if (!list[i].is_string() || !looks_like_data_url(list[i].get<std::string>())) {
        return invalid_argument(where + " must be an image data URL (data:image/png;base64,...)");
      }
      StatusOr<DataUrl> url = parse_image_data_url(list[i].get<std::string>());
      if (!url.ok()) return url.status().with_context(where);
      engine::InputItem item;
      item.kind = engine::InputKind::kImageBytes;
      item.image_bytes = std::move(url->bytes);
      images.push_back(std::move(item));
    }
  }
  const auto text = root.find("text_input");
  if (text == root.end() || !text->is_string() || text->get<std::string>().empty()) {
    return invalid_argument("'text_input' must be a non-empty string");
  }
  json fields = json::object();
  for (const auto& [key, value] : root.items()) {
    if (known(key)) fields[key] = value;
  }
  if (const auto params = root.find("parameters"); params != root.end() && !params->is_null()) {
    if (!params->is_object()) return invalid_argument("'parameters' must be an object");
    if (std::string bad = unknown_keys(*params, "", ""); !bad.empty()) {
      return invalid_argument("unknown parameter(s) " + bad);
    }
    for (const auto& [key, value] : params->items()) {
      if (fields.contains(key)) return invalid_argument("'" + key + "' is given both at the top level and in parameters");
      fields[key] = value;
    }
  }
  if (const auto stream = fields.find("stream"); stream != fields.end()) {
    if (!stream->is_boolean()) return invalid_argument("'stream' must be a boolean");
    fields.erase(stream);  // the route decides
  }
  if (const auto words = fields.find("stop_words"); words != fields.end()) {
    if (fields.contains("stop")) return invalid_argument("give 'stop' or 'stop_words', not both");
    fields["stop"] = *words;
    fields.erase("stop_words");
  }
  if (const auto bad = fields.find("bad_words"); bad != fields.end()) {
    const bool empty = (bad->is_string() && bad->get<std::string>().empty()) || (bad->is_array() && bad->empty());
    if (!empty) return invalid_argument("'bad_words' is not supported (only \"\" or [])");
    fields.erase(bad);
  }
  if (const auto stop = fields.find("stop"); stop != fields.end() && stop->is_string() && stop->get<std::string>().empty()) {
    fields.erase(stop);  // TensorRT-LLM's examples send "stop_words": "" for none
  }
  fields["model"] = model;
  fields["prompt"] = *text;
  ASSIGN_OR_RETURN(CompletionRequest r, parse_completion_request(dump_json(fields), /*chat=*/false));
  r.images = std::move(images);
  return r;
}

std::string encode_generate(const std::string& model, const engine::LlamaOutput& out) {
  ojson j = header(model);
  j["text_output"] = out.text;
  j["finish_reason"] = out.finish_reason;
  j["prompt_tokens"] = static_cast<int64_t>(out.prompt_ids.size());
  j["completion_tokens"] = static_cast<int64_t>(out.ids.size());
  if (out.routing_k > 0) j["routing"] = routing_json(out);
  return dump_json(j);
}

std::string encode_generate_delta(const std::string& model, const std::string& text) {
  ojson j = header(model);
  j["text_output"] = text;
  return "data: " + dump_json(j) + "\n\n";
}

std::string encode_generate_end(const std::string& model, const engine::LlamaOutput& out) {
  ojson j = header(model);
  j["text_output"] = "";
  j["finish_reason"] = out.finish_reason;
  j["prompt_tokens"] = static_cast<int64_t>(out.prompt_ids.size());
  j["completion_tokens"] = static_cast<int64_t>(out.ids.size());
  if (out.routing_k > 0) j["routing"] = routing_json(out);
  return "data: " + dump_json(j) + "\n\n";
}

std::string encode_generate_error_event(const std::string& message) {
  ojson j;
  j["error"] = message;
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace mmserve::api
