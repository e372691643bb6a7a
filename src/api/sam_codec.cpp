// The SAM API codec (see sam_codec.h) and its KServe response (encode_kserve_sam, declared in kserve_codec.h).
// Tests: tests/unit/api/sam_codec_test.cpp.
#include "api/sam_codec.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "api/base64.h"
#include "api/data_url.h"
#include "api/json_parse.h"
#include "api/json_writer.h"
#include "api/kserve_codec.h"
#include "frontends/image/mask_rle.h"
#include "frontends/image/png_encode.h"

namespace mmserve::api {
namespace {

using json = nlohmann::json;

// The JSON field `name` (an array of `width`-number rows, [[x, y], ...]) as a kTensor input named `tensor`.
Status rows_tensor(const json& value, const std::string& name, const std::string& tensor, size_t width,
                   std::vector<engine::InputItem>& out) {
  if (!value.is_array()) return invalid_argument("'" + name + "' must be an array");
  engine::InputItem item;
  item.kind = engine::InputKind::kTensor;
  item.name = tensor;
  for (size_t r = 0; r < value.size(); ++r) {
    const json& row = value[r];
    if (width == 1) {
      if (!row.is_number_integer()) return invalid_argument(name + "[" + std::to_string(r) + "] must be an integer");
      item.values.push_back(static_cast<float>(row.get<int64_t>()));
      continue;
    }
    if (!row.is_array() || row.size() != width) {
      return invalid_argument(name + "[" + std::to_string(r) + "] must be an array of " + std::to_string(width) +
                              " numbers");
    }
    for (const json& v : row) {
      if (!v.is_number() || !std::isfinite(v.get<double>())) {
        return invalid_argument(name + "[" + std::to_string(r) + "] must hold finite numbers");
      }
      item.values.push_back(static_cast<float>(v.get<double>()));
    }
  }
  item.shape = width == 1 ? std::vector<int64_t>{static_cast<int64_t>(value.size())}
                          : std::vector<int64_t>{static_cast<int64_t>(value.size()), static_cast<int64_t>(width)};
  if (!value.empty()) out.push_back(std::move(item));
  return ok_status();
}

Status check_keys(const json& object, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : object.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return invalid_argument("unknown field '" + key.substr(0, 64) + "' in the request");
  }
  return ok_status();
}

}  // namespace

StatusOr<SegmentRequest> parse_segment_request(std::string_view body) {
  ASSIGN_OR_RETURN(json root, parse_json(body));
  if (!root.is_object()) return invalid_argument("the request must be a JSON object");
  RETURN_IF_ERROR(
      check_keys(root, {"model", "image", "image_id", "points", "labels", "boxes", "multimask_output", "output"}));
  SegmentRequest out;
  out.params = std::make_shared<engine::SamParams>();
  const auto model = root.find("model");
  if (model == root.end() || !model->is_string() || model->get<std::string>().empty()) {
    return invalid_argument("'model' must be a non-empty string");
  }
  out.model = model->get<std::string>();
  const auto image = root.find("image");
  const auto image_id = root.find("image_id");
  if ((image == root.end()) == (image_id == root.end())) {
    return invalid_argument("give exactly one of 'image' (a data URL) and 'image_id' (from an earlier response)");
  }
  if (image != root.end()) {
    if (!image->is_string()) return invalid_argument("'image' must be a string (a data:image/...;base64 URL)");
    ASSIGN_OR_RETURN(DataUrl url, parse_image_data_url(image->get<std::string>()));
    engine::InputItem item;
    item.kind = engine::InputKind::kImageBytes;
    item.image_bytes = std::move(url.bytes);
    out.inputs.push_back(std::move(item));
  } else {
    if (!image_id->is_string() || image_id->get<std::string>().empty()) {
      return invalid_argument("'image_id' must be a non-empty string");
    }
    out.params->image_id = image_id->get<std::string>();
  }
  if (const auto p = root.find("points"); p != root.end())
    RETURN_IF_ERROR(rows_tensor(*p, "points", "point_coords", 2, out.inputs));
  if (const auto l = root.find("labels"); l != root.end())
    RETURN_IF_ERROR(rows_tensor(*l, "labels", "point_labels", 1, out.inputs));
  if (const auto b = root.find("boxes"); b != root.end())
    RETURN_IF_ERROR(rows_tensor(*b, "boxes", "boxes", 4, out.inputs));
  if (const auto m = root.find("multimask_output"); m != root.end()) {
    if (!m->is_boolean()) return invalid_argument("'multimask_output' must be a boolean");
    out.params->multimask_output = m->get<bool>();
  }
  if (const auto f = root.find("output"); f != root.end()) {
    if (!f->is_string() || (*f != "rle" && *f != "png")) return invalid_argument("'output' must be \"rle\" or \"png\"");
    out.format = *f == "png" ? MaskFormat::kPng : MaskFormat::kRle;
  }
  return out;
}

std::string mask_rle_json(const engine::SamOutput& output, int64_t index) {
  const uint8_t* mask = output.masks.data() + index * output.height * output.width;
  std::string out =
      "{\"size\":[" + std::to_string(output.height) + "," + std::to_string(output.width) + "],\"counts\":";
  append_json_string(out,
                     image::coco_rle_counts(mask, static_cast<int>(output.height), static_cast<int>(output.width)));
  return out + "}";
}

std::string encode_segment_response(const engine::SamOutput& output, MaskFormat format) {
  std::string out = "{\"image_id\":";
  append_json_string(out, output.image_id);
  out += ",\"iou_scores\":";
  append_json_floats(out, output.iou_scores);
  out += ",\"masks\":[";
  for (int64_t k = 0; k < output.count; ++k) {
    if (k > 0) out += ',';
    if (format == MaskFormat::kRle) {
      out += mask_rle_json(output, k);
      continue;
    }
    const uint8_t* mask = output.masks.data() + k * output.height * output.width;
    std::vector<uint8_t> gray(mask, mask + output.height * output.width);
    for (uint8_t& v : gray) v = v ? 255 : 0;
    const std::string png =
        image::encode_png_gray(gray.data(), static_cast<int>(output.width), static_cast<int>(output.height));
    out += "{\"size\":[" + std::to_string(output.height) + "," + std::to_string(output.width) + "],\"png\":\"" +
           base64_encode(png) + "\"}";
  }
  out += "]";
  out += ",\"embedding_cached\":";
  out += output.embedding_cached ? "true" : "false";
  return out + "}";
}

std::shared_ptr<const KServeParams> kserve_params(const KServeInferRequest& request, const std::string& adapter) {
  auto params = std::make_shared<KServeParams>();
  params->adapter = adapter;
  params->options = request.transcribe;
  params->multimask_output = request.multimask_output;
  params->image_id = request.image_id;
  return params;
}

StatusOr<EncodedBody> encode_kserve_sam(const std::string& model, const KServeInferRequest& request,
                                        const engine::SamOutput& output) {
  bool want_iou = request.outputs.empty(), want_masks = request.outputs.empty(), want_id = request.outputs.empty();
  for (const KServeOutputRequest& o : request.outputs) {
    if (o.name == "iou_scores") {
      want_iou = true;
    } else if (o.name == "masks") {
      want_masks = true;
    } else if (o.name == "image_id") {
      want_id = true;
    } else {
      return invalid_argument("output '" + o.name.substr(0, 64) +
                              "' is not produced by a SAM model (it gives iou_scores, masks, image_id)");
    }
  }
  EncodedBody out;
  std::string& body = out.body;
  body += "{\"model_name\":";
  append_json_string(body, model);
  body += ",\"model_version\":\"1\"";
  if (request.id) {
    body += ",\"id\":";
    append_json_string(body, *request.id);
  }
  body += ",\"outputs\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) body += ',';
    first = false;
  };
  if (want_iou) {
    sep();
    body += "{\"name\":\"iou_scores\",\"datatype\":\"FP32\",\"shape\":[" + std::to_string(output.iou_scores.size()) +
            "],\"data\":";
    append_json_floats(body, output.iou_scores);
    body += "}";
  }
  if (want_masks) {
    sep();
    body += "{\"name\":\"masks\",\"datatype\":\"BYTES\",\"shape\":[" + std::to_string(output.count) + "],\"data\":[";
    for (int64_t k = 0; k < output.count; ++k) {
      if (k > 0) body += ',';
      append_json_string(body, mask_rle_json(output, k));
    }
    body += "]}";
  }
  if (want_id) {
    sep();
    body += "{\"name\":\"image_id\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[";
    append_json_string(body, output.image_id);
    body += "]}";
  }
  body += "]}";
  return out;
}

}  // namespace mmserve::api
