// KServe v2 infer request parsing (JSON and binary tensor data) and response writing (see kserve_codec.h).
// nlohmann exceptions are caught here: a malformed body is a Status, never a throw.
// Tests: tests/unit/api/kserve_codec_test.cpp.
#include "api/kserve_codec.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "api/base64.h"
#include "api/data_url.h"
#include "api/json_parse.h"
#include "api/json_writer.h"
#include "api/request_options.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::api {
namespace {

using nlohmann::json;
using serving::InputItem;
using serving::InputKind;

static_assert(std::endian::native == std::endian::little, "binary tensors are copied as little-endian bytes");

constexpr int64_t kElementsMax = int64_t{1} << 34;  // far above any body we accept; guards the products
constexpr size_t kRankMax = 8;

std::string quote_name(const std::string& name) {
  std::string out(1, '\'');
  out.append(name, 0, 64);
  out.push_back('\'');
  return out;
}

Status input_error(const std::string& name, const std::string& message) {
  return invalid_argument("input " + quote_name(name) + ": " + message);
}

// A cursor over the binary section: each binary input takes its binary_data_size bytes, in input order.
class BinarySection {
 public:
  explicit BinarySection(std::string_view data) : data_(data) {}
  StatusOr<std::string_view> take(const std::string& input, int64_t size) {
    const size_t left = data_.size() - offset_;
    if (size < 0 || static_cast<uint64_t>(size) > left) {
      return input_error(input, "binary_data_size " + std::to_string(size) + " runs past the end of the body (" +
                                    std::to_string(left) + " binary bytes left)");
    }
    std::string_view out = data_.substr(offset_, static_cast<size_t>(size));
    offset_ += static_cast<size_t>(size);
    return out;
  }
  size_t unused() const { return data_.size() - offset_; }

 private:
  std::string_view data_;
  size_t offset_ = 0;
};

StatusOr<std::vector<int64_t>> parse_shape(const json& value, const std::string& input) {
  if (!value.is_array() || value.empty() || value.size() > kRankMax) {
    return input_error(input, "shape must be an array of 1 to 8 non-negative integers");
  }
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (const json& dim : value) {
    if (!dim.is_number_integer()) return input_error(input, "shape must hold integers");
    if (dim.is_number_unsigned() && dim.get<uint64_t>() > static_cast<uint64_t>(kElementsMax)) {
      return input_error(input, "shape is too large");
    }
    const int64_t d = dim.get<int64_t>();
    if (d < 0) return input_error(input, "shape dimensions must be non-negative (-1 only appears in metadata)");
    if (d > 0 && elements > kElementsMax / d) return input_error(input, "shape is too large");
    elements *= d;
    shape.push_back(d);
  }
  return shape;
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status flatten(const json& data, size_t depth, std::vector<const json*>& out, const std::string& input) {
  if (!data.is_array()) {
    out.push_back(&data);
    return ok_status();
  }
  if (depth > kRankMax) return input_error(input, "data is nested deeper than any shape");
  for (const json& e : data) RETURN_IF_ERROR(flatten(e, depth + 1, out, input));
  return ok_status();
}

// The elements of JSON `data` (flat or nested as the shape), checked against the shape's element count.
StatusOr<std::vector<const json*>> json_elements(const json& data, int64_t count, const std::string& input) {
  if (!data.is_array()) return input_error(input, "data must be an array");
  std::vector<const json*> out;
  RETURN_IF_ERROR(flatten(data, 1, out, input));
  if (static_cast<int64_t>(out.size()) != count) {
    return input_error(input,
                       "shape has " + std::to_string(count) + " elements but data has " + std::to_string(out.size()));
  }
  return out;
}

// BYTES in the binary extension: each element is a 4-byte little-endian length and that many bytes.
StatusOr<std::vector<std::string_view>> split_bytes_elements(std::string_view section, int64_t count,
                                                             const std::string& input) {
  std::vector<std::string_view> out;
  size_t offset = 0;
  while (offset < section.size()) {
    if (section.size() - offset < 4) {
      return input_error(input, "BYTES element " + std::to_string(out.size()) + " has a truncated 4-byte length");
    }
    const auto* p = reinterpret_cast<const unsigned char*>(section.data() + offset);
    const uint64_t length = uint64_t{p[0]} | (uint64_t{p[1]} << 8) | (uint64_t{p[2]} << 16) | (uint64_t{p[3]} << 24);
    offset += 4;
    if (length > section.size() - offset) {
      return input_error(input, "BYTES element " + std::to_string(out.size()) + " length " + std::to_string(length) +
                                    " runs past the end of its binary data");
    }
    out.push_back(section.substr(offset, static_cast<size_t>(length)));
    offset += static_cast<size_t>(length);
  }
  if (static_cast<int64_t>(out.size()) != count) {
    return input_error(input, "shape has " + std::to_string(count) + " elements but the binary data holds " +
                                  std::to_string(out.size()));
  }
  return out;
}

Status refuse_url(const std::string& input, size_t index) {
  return input_error(input, "element " + std::to_string(index) +
                                " is a URL: URL fetches are disabled; send the image bytes (base64) instead");
}

// An `image` element given in JSON: base64 of the encoded file (a data URL is accepted too).
StatusOr<std::string> image_from_json(const json& element, size_t index, const std::string& input,
                                      const CodecOptions& options) {
  if (!element.is_string()) return input_error(input, "element " + std::to_string(index) + " must be a string");
  const std::string& text = element.get_ref<const std::string&>();
  if (looks_like_http_url(text)) return refuse_url(input, index);
  if (looks_like_data_url(text)) {
    StatusOr<DataUrl> url = parse_image_data_url(text);
    if (!url.ok()) return input_error(input, "element " + std::to_string(index) + ": " + url.status().message());
    return std::move(url->bytes);
  }
  StatusOr<std::string> bytes = base64_decode(text);
  if (!bytes.ok()) return input_error(input, "element " + std::to_string(index) + ": " + bytes.status().message());
  if (bytes->empty()) return input_error(input, "element " + std::to_string(index) + " is an empty image");
  return std::move(*bytes);
}

Status check_keys(const json& object, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return invalid_argument(where + ": unknown field " + quote_name(key));
  }
  return ok_status();
}

struct InputSpec {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  const json* data = nullptr;
  std::optional<int64_t> binary_size;
};

StatusOr<InputSpec> parse_input_header(const json& in, bool binary_allowed, std::set<std::string>& seen) {
  if (!in.is_object()) return invalid_argument("every element of 'inputs' must be an object");
  InputSpec spec;
  const auto name = in.find("name");
  if (name == in.end() || !name->is_string()) return invalid_argument("every input needs a string 'name'");
  spec.name = name->get<std::string>();
  RETURN_IF_ERROR(
      check_keys(in, {"name", "shape", "datatype", "parameters", "data"}, "input " + quote_name(spec.name)));
  if (!seen.insert(spec.name).second) return input_error(spec.name, "given twice");
  const auto datatype = in.find("datatype");
  if (datatype == in.end() || !datatype->is_string()) return input_error(spec.name, "needs a string 'datatype'");
  spec.datatype = datatype->get<std::string>();
  const auto shape = in.find("shape");
  if (shape == in.end()) return input_error(spec.name, "needs a 'shape'");
  ASSIGN_OR_RETURN(spec.shape, parse_shape(*shape, spec.name));
  if (const auto params = in.find("parameters"); params != in.end()) {
    if (!params->is_object()) return input_error(spec.name, "'parameters' must be an object");
    if (const auto size = params->find("binary_data_size"); size != params->end()) {
      if (!size->is_number_integer() || size->get<int64_t>() < 0) {
        return input_error(spec.name, "binary_data_size must be a non-negative integer");
      }
      if (!binary_allowed) {
        return input_error(spec.name,
                           "binary_data_size needs the binary tensor data extension (Inference-Header-Content-Length)");
      }
      spec.binary_size = size->get<int64_t>();
    }
  }
  if (const auto data = in.find("data"); data != in.end()) spec.data = &*data;
  if (spec.data != nullptr && spec.binary_size) return input_error(spec.name, "has both 'data' and binary_data_size");
  if (spec.data == nullptr && !spec.binary_size) return input_error(spec.name, "needs 'data' (or binary_data_size)");
  return spec;
}

Status parse_text_input(const InputSpec& spec, BinarySection& binary, std::vector<InputItem>& out) {
  if (spec.datatype != "BYTES") return input_error(spec.name, "datatype must be BYTES, not " + spec.datatype);
  if (spec.shape.size() != 1) return input_error(spec.name, "shape must be [N]");
  const int64_t count = spec.shape[0];
  if (spec.data != nullptr) {
    ASSIGN_OR_RETURN(std::vector<const json*> elements, json_elements(*spec.data, count, spec.name));
    for (size_t i = 0; i < elements.size(); ++i) {
      if (!elements[i]->is_string())
        return input_error(spec.name, "element " + std::to_string(i) + " must be a string");
      InputItem item;
      item.kind = InputKind::kText;
      item.text = elements[i]->get<std::string>();  // the JSON parser has validated its UTF-8
      out.push_back(std::move(item));
    }
    return ok_status();
  }
  ASSIGN_OR_RETURN(std::string_view section, binary.take(spec.name, *spec.binary_size));
  ASSIGN_OR_RETURN(std::vector<std::string_view> elements, split_bytes_elements(section, count, spec.name));
  for (size_t i = 0; i < elements.size(); ++i) {
    if (Status s = text::validate_utf8(elements[i]); !s.ok()) {
      return input_error(spec.name, "element " + std::to_string(i) + " is not valid UTF-8: " + s.message());
    }
    InputItem item;
    item.kind = InputKind::kText;
    item.text = std::string(elements[i]);
    out.push_back(std::move(item));
  }
  return ok_status();
}

Status parse_image_input(const InputSpec& spec, BinarySection& binary, const CodecOptions& options,
                         std::vector<InputItem>& out) {
  if (spec.datatype != "BYTES") return input_error(spec.name, "datatype must be BYTES, not " + spec.datatype);
  if (spec.shape.size() != 1) return input_error(spec.name, "shape must be [M]");
  const int64_t count = spec.shape[0];
  if (spec.data != nullptr) {
    ASSIGN_OR_RETURN(std::vector<const json*> elements, json_elements(*spec.data, count, spec.name));
    for (size_t i = 0; i < elements.size(); ++i) {
      InputItem item;
      item.kind = InputKind::kImageBytes;
      ASSIGN_OR_RETURN(item.image_bytes, image_from_json(*elements[i], i, spec.name, options));
      out.push_back(std::move(item));
    }
    return ok_status();
  }
  ASSIGN_OR_RETURN(std::string_view section, binary.take(spec.name, *spec.binary_size));
  ASSIGN_OR_RETURN(std::vector<std::string_view> elements, split_bytes_elements(section, count, spec.name));
  for (size_t i = 0; i < elements.size(); ++i) {
    if (elements[i].empty()) return input_error(spec.name, "element " + std::to_string(i) + " is an empty image");
    InputItem item;
    item.kind = InputKind::kImageBytes;
    item.image_bytes = std::string(elements[i]);
    out.push_back(std::move(item));
  }
  return ok_status();
}

// `audio`: the encoded file (any of WAV/FLAC/Ogg/MP3; the serving layer decodes and checks it).
Status parse_audio_input(const InputSpec& spec, BinarySection& binary, std::vector<InputItem>& out) {
  if (spec.datatype != "BYTES") return input_error(spec.name, "datatype must be BYTES, not " + spec.datatype);
  if (spec.shape.size() != 1) return input_error(spec.name, "shape must be [1]");
  const int64_t count = spec.shape[0];
  std::vector<std::string> files;
  if (spec.data != nullptr) {
    ASSIGN_OR_RETURN(std::vector<const json*> elements, json_elements(*spec.data, count, spec.name));
    for (size_t i = 0; i < elements.size(); ++i) {
      if (!elements[i]->is_string()) {
        return input_error(spec.name, "element " + std::to_string(i) + " must be a base64 string");
      }
      StatusOr<std::string> bytes = base64_decode(elements[i]->get_ref<const std::string&>());
      if (!bytes.ok()) return input_error(spec.name, "element " + std::to_string(i) + ": " + bytes.status().message());
      files.push_back(std::move(*bytes));
    }
  } else {
    ASSIGN_OR_RETURN(std::string_view section, binary.take(spec.name, *spec.binary_size));
    ASSIGN_OR_RETURN(std::vector<std::string_view> elements, split_bytes_elements(section, count, spec.name));
    for (std::string_view e : elements) files.emplace_back(e);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].empty()) return input_error(spec.name, "element " + std::to_string(i) + " is an empty audio file");
    InputItem item;
    item.kind = InputKind::kAudioBytes;
    item.audio_bytes = std::move(files[i]);
    out.push_back(std::move(item));
  }
  return ok_status();
}

// The Whisper parameters (ignored by CLIP models, but still checked: a typo'd value is an error).
Status parse_transcribe_parameters(const json& params, engine::TranscribeOptions& options) {
  if (const auto p = params.find("language"); p != params.end()) {
    if (!p->is_string()) return invalid_argument("parameters.language must be a string");
    options.language = p->get<std::string>();
  }
  if (const auto p = params.find("task"); p != params.end()) {
    if (!p->is_string() || (*p != "transcribe" && *p != "translate")) {
      return invalid_argument("parameters.task must be \"transcribe\" or \"translate\"");
    }
    options.task = *p == "translate" ? engine::WhisperTask::kTranslate : engine::WhisperTask::kTranscribe;
  }
  if (const auto p = params.find("timestamps"); p != params.end()) {
    if (!p->is_boolean()) return invalid_argument("parameters.timestamps must be a boolean");
    options.timestamps = p->get<bool>();
  }
  if (const auto p = params.find("prompt"); p != params.end()) {
    if (!p->is_string()) return invalid_argument("parameters.prompt must be a string");
    options.initial_prompt = p->get<std::string>();
  }
  if (const auto p = params.find("beam_size"); p != params.end()) {
    if (!p->is_number_integer() || p->get<int64_t>() < 1 || p->get<int64_t>() > 16) {
      return invalid_argument("parameters.beam_size must be an integer from 1 to 16");
    }
    options.beam_size = static_cast<int>(p->get<int64_t>());
  }
  if (const auto p = params.find("temperature"); p != params.end()) {
    if (!p->is_number() || !(p->get<double>() >= 0) || p->get<double>() > 1) {
      return invalid_argument("parameters.temperature must be a number from 0 to 1");
    }
    const double t = p->get<double>();  // the first of the reference's fallback schedule t, t + 0.2, ... 1
    options.temperatures.clear();
    for (int step = 0; t + 0.2 * step <= 1.0 + 1e-6; ++step) options.temperatures.push_back(float(t + 0.2 * step));
  }
  return ok_status();
}

Status parse_pixel_input(const InputSpec& spec, BinarySection& binary, std::vector<InputItem>& out) {
  if (spec.datatype != "FP32") return input_error(spec.name, "datatype must be FP32, not " + spec.datatype);
  constexpr int64_t kSideMax = 1 << 16;
  if (spec.shape.size() != 4 || spec.shape[1] != 3 || spec.shape[2] < 1 || spec.shape[3] < 1 ||
      spec.shape[2] > kSideMax || spec.shape[3] > kSideMax) {
    return input_error(spec.name, "shape must be [M, 3, S, S] with 1 <= S <= 65536");
  }
  const int64_t images = spec.shape[0];
  const size_t per_image = static_cast<size_t>(3 * spec.shape[2] * spec.shape[3]);
  const int64_t count = element_count(spec.shape);
  std::vector<float> values;
  if (spec.data != nullptr) {
    ASSIGN_OR_RETURN(std::vector<const json*> elements, json_elements(*spec.data, count, spec.name));
    values.resize(elements.size());
    for (size_t i = 0; i < elements.size(); ++i) {
      if (!elements[i]->is_number())
        return input_error(spec.name, "element " + std::to_string(i) + " must be a number");
      values[i] = static_cast<float>(elements[i]->get<double>());
    }
  } else {
    ASSIGN_OR_RETURN(std::string_view section, binary.take(spec.name, *spec.binary_size));
    if (static_cast<uint64_t>(count) * 4 != section.size()) {
      return input_error(spec.name, "shape needs " + std::to_string(count * 4) +
                                        " bytes of FP32 but binary_data_size is " + std::to_string(section.size()));
    }
    values.resize(static_cast<size_t>(count));
    std::memcpy(values.data(), section.data(), section.size());  // little-endian, as the extension specifies
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return input_error(spec.name, "element " + std::to_string(i) + " is not a finite FP32 value");
    }
  }
  for (int64_t m = 0; m < images; ++m) {
    InputItem item;
    item.kind = InputKind::kPixelValues;
    item.pixel_values.assign(values.begin() + m * per_image, values.begin() + (m + 1) * per_image);
    out.push_back(std::move(item));
  }
  return ok_status();
}

// A named numeric input of another family (SAM's point_coords FP32 [N, 2], point_labels INT32 [N], boxes FP32
// [M, 4], mask_input): carried as an engine kTensor; the model's family checks the name and the shape.
Status parse_tensor_input(const InputSpec& spec, BinarySection& binary, std::vector<InputItem>& out) {
  if (spec.datatype != "FP32" && spec.datatype != "INT32") {
    return input_error(spec.name, "datatype must be FP32 or INT32, not " + spec.datatype);
  }
  if (spec.shape.empty() || spec.shape.size() > 4) return input_error(spec.name, "shape must have 1 to 4 dimensions");
  constexpr int64_t kElementsMax = int64_t{1} << 26;
  const int64_t count = element_count(spec.shape);
  if (count > kElementsMax) return input_error(spec.name, "has more than 2^26 elements");
  InputItem item;
  item.kind = InputKind::kTensor;
  item.name = spec.name;
  item.shape = spec.shape;
  item.values.resize(static_cast<size_t>(count));
  const bool integer = spec.datatype == "INT32";
  if (spec.data != nullptr) {
    ASSIGN_OR_RETURN(std::vector<const json*> elements, json_elements(*spec.data, count, spec.name));
    for (size_t i = 0; i < elements.size(); ++i) {
      const json& e = *elements[i];
      if (integer ? !e.is_number_integer() : !e.is_number()) {
        return input_error(spec.name, "element " + std::to_string(i) + " must be " +
                                          (integer ? "an integer" : "a number"));
      }
      if (integer && (e.get<int64_t>() < INT32_MIN || e.get<int64_t>() > INT32_MAX)) {
        return input_error(spec.name, "element " + std::to_string(i) + " is outside INT32");
      }
      item.values[i] = static_cast<float>(e.get<double>());
    }
  } else {
    ASSIGN_OR_RETURN(std::string_view section, binary.take(spec.name, *spec.binary_size));
    if (static_cast<uint64_t>(count) * 4 != section.size()) {
      return input_error(spec.name, "shape needs " + std::to_string(count * 4) + " bytes of " + spec.datatype +
                                        " but binary_data_size is " + std::to_string(section.size()));
    }
    for (int64_t i = 0; i < count; ++i) {  // little-endian, as the extension specifies
      if (integer) {
        int32_t v = 0;
        std::memcpy(&v, section.data() + 4 * i, 4);
        item.values[static_cast<size_t>(i)] = static_cast<float>(v);
      } else {
        std::memcpy(&item.values[static_cast<size_t>(i)], section.data() + 4 * i, 4);
      }
    }
  }
  out.push_back(std::move(item));
  return ok_status();
}

Status parse_parameters(const json& params, KServeInferRequest& out) {
  if (!params.is_object()) return invalid_argument("'parameters' must be an object");
  if (const auto p = params.find("priority"); p != params.end()) {
    ASSIGN_OR_RETURN(out.priority, priority_from_json(*p));
  }
  if (const auto t = params.find("timeout_ms"); t != params.end()) {
    ASSIGN_OR_RETURN(out.timeout_ms, timeout_from_json(*t));
  }
  if (const auto b = params.find("binary_data_output"); b != params.end()) {
    if (!b->is_boolean()) return invalid_argument("parameters.binary_data_output must be a boolean");
    out.binary_output = b->get<bool>();
  }
  if (const auto p = params.find("multimask_output"); p != params.end()) {  // SAM
    if (!p->is_boolean()) return invalid_argument("parameters.multimask_output must be a boolean");
    out.multimask_output = p->get<bool>();
  }
  if (const auto p = params.find("image_id"); p != params.end()) {  // SAM: an earlier request's image
    if (!p->is_string() || p->get<std::string>().empty()) {
      return invalid_argument("parameters.image_id must be a non-empty string");
    }
    out.image_id = p->get<std::string>();
  }
  return parse_transcribe_parameters(params, out.transcribe);
}

bool known_output(const std::string& name) {
  return name == "text_embeds" || name == "image_embeds" || name == "logits_per_image" || name == "text" ||
         name == "segments" || name == "language" || name == "iou_scores" || name == "masks" || name == "image_id";
}

Status parse_outputs(const json& outputs, KServeInferRequest& out) {
  if (!outputs.is_array()) return invalid_argument("'outputs' must be an array");
  std::set<std::string> seen;
  for (const json& o : outputs) {
    if (!o.is_object()) return invalid_argument("every element of 'outputs' must be an object");
    const auto name = o.find("name");
    if (name == o.end() || !name->is_string()) return invalid_argument("every output needs a string 'name'");
    KServeOutputRequest request{name->get<std::string>(), out.binary_output};
    RETURN_IF_ERROR(check_keys(o, {"name", "parameters"}, "output " + quote_name(request.name)));
    if (!known_output(request.name)) {
      return invalid_argument("unknown output " + quote_name(request.name) +
                              " (expected text_embeds, image_embeds, logits_per_image; text, segments, language; iou_scores, masks, "
                              "image_id)");
    }
    if (!seen.insert(request.name).second)
      return invalid_argument("output " + quote_name(request.name) + " requested twice");
    if (const auto params = o.find("parameters"); params != o.end()) {
      if (!params->is_object())
        return invalid_argument("output " + quote_name(request.name) + ": 'parameters' must be an object");
      if (const auto b = params->find("binary_data"); b != params->end()) {
        if (!b->is_boolean())
          return invalid_argument("output " + quote_name(request.name) + ": binary_data must be a boolean");
        request.binary = b->get<bool>();
      }
    }
    out.outputs.push_back(std::move(request));
  }
  return ok_status();
}

StatusOr<KServeInferRequest> parse_infer_json(const json& root, std::string_view binary_data, bool binary_allowed,
                                              const CodecOptions& options) {
  if (!root.is_object()) return invalid_argument("the request must be a JSON object");
  RETURN_IF_ERROR(check_keys(root, {"id", "parameters", "inputs", "outputs"}, "request"));
  KServeInferRequest out;
  if (const auto id = root.find("id"); id != root.end()) {
    if (!id->is_string()) return invalid_argument("'id' must be a string");
    out.id = id->get<std::string>();
  }
  if (const auto params = root.find("parameters"); params != root.end())
    RETURN_IF_ERROR(parse_parameters(*params, out));
  const auto inputs = root.find("inputs");
  if (inputs == root.end() || !inputs->is_array() || inputs->empty()) {
    return invalid_argument("'inputs' must be a non-empty array (text, image and/or pixel_values; or audio)");
  }
  BinarySection binary(binary_data);
  std::set<std::string> seen;
  for (const json& in : *inputs) {
    ASSIGN_OR_RETURN(InputSpec spec, parse_input_header(in, binary_allowed, seen));
    if (spec.name == "text") {
      RETURN_IF_ERROR(parse_text_input(spec, binary, out.inputs));
    } else if (spec.name == "image") {
      RETURN_IF_ERROR(parse_image_input(spec, binary, options, out.inputs));
    } else if (spec.name == "pixel_values") {
      RETURN_IF_ERROR(parse_pixel_input(spec, binary, out.inputs));
    } else if (spec.name == "audio") {
      RETURN_IF_ERROR(parse_audio_input(spec, binary, out.inputs));
    } else if (spec.datatype == "FP32" || spec.datatype == "INT32") {
      RETURN_IF_ERROR(parse_tensor_input(spec, binary, out.inputs));
    } else {
      return invalid_argument("unknown input " + quote_name(spec.name) +
                              " (expected text, image, pixel_values; audio for Whisper models; FP32/INT32 tensors "
                              "such as SAM's point_coords)");
    }
  }
  if (binary.unused() > 0) {
    return invalid_argument(std::to_string(binary.unused()) +
                            " bytes of binary tensor data are not claimed by any input's binary_data_size");
  }
  if (out.inputs.empty()) return invalid_argument("the inputs hold no elements");
  for (const InputItem& item : out.inputs) out.kinds.push_back(item.kind);
  if (const auto outputs = root.find("outputs"); outputs != root.end()) RETURN_IF_ERROR(parse_outputs(*outputs, out));
  return out;
}

// One output tensor of the response.
struct OutputTensor {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

}  // namespace

StatusOr<size_t> parse_inference_header_length(std::string_view value, size_t body_size) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string_view::npos) {
    return invalid_argument("Inference-Header-Content-Length must be a non-negative integer");
  }
  const size_t length = std::stoull(std::string(value));
  if (length > body_size) {
    return invalid_argument("Inference-Header-Content-Length " + std::to_string(length) + " exceeds the body size " +
                            std::to_string(body_size));
  }
  return length;
}

StatusOr<KServeInferRequest> parse_kserve_infer(std::string_view body, std::optional<size_t> json_length,
                                                const CodecOptions& options) {
  if (json_length && *json_length > body.size()) {
    return invalid_argument("Inference-Header-Content-Length exceeds the body size");
  }
  const std::string_view header = json_length ? body.substr(0, *json_length) : body;
  const std::string_view binary = json_length ? body.substr(*json_length) : std::string_view();
  ASSIGN_OR_RETURN(json root, parse_json(header));
  try {
    return parse_infer_json(root, binary, json_length.has_value(), options);
  } catch (const nlohmann::json::exception& e) {  // a type we did not check first: still the client's input
    return invalid_argument(std::string("invalid request: ") + e.what());
  }
}

StatusOr<EncodedBody> encode_kserve_infer(const std::string& model, const KServeInferRequest& request,
                                          const serving::ResponseData& data) {
  // One line per family's outputs.
  if (const auto* t = engine::output_as<engine::TranscriptOutput>(data.output)) {
    return encode_kserve_transcript(model, request, t->transcript);
  }
  if (const auto* s = engine::output_as<engine::SamOutput>(data.output)) return encode_kserve_sam(model, request, *s);
  const auto* clip = engine::output_as<engine::ClipOutput>(data.output);
  if (clip == nullptr) return internal_error("the model returned no output this API can encode");
  const engine::ClipOutput& response = *clip;
  const size_t dim = static_cast<size_t>(std::max<int64_t>(response.dim, 0));
  if (response.embeddings.size() != request.kinds.size() || dim == 0) {
    return internal_error("the server returned " + std::to_string(response.embeddings.size()) + " embeddings of size " +
                          std::to_string(response.dim) + " for " + std::to_string(request.kinds.size()) + " inputs");
  }
  OutputTensor texts{"text_embeds", {0, static_cast<int64_t>(dim)}, {}};
  OutputTensor images{"image_embeds", {0, static_cast<int64_t>(dim)}, {}};
  for (size_t i = 0; i < request.kinds.size(); ++i) {
    const std::vector<float>& e = response.embeddings[i];
    if (e.size() != dim) return internal_error("embedding " + std::to_string(i) + " has the wrong size");
    OutputTensor& t = request.kinds[i] == InputKind::kText ? texts : images;
    t.values.insert(t.values.end(), e.begin(), e.end());
    ++t.shape[0];
  }
  std::vector<OutputTensor> available;
  if (texts.shape[0] > 0) available.push_back(texts);
  if (images.shape[0] > 0) available.push_back(images);
  if (texts.shape[0] > 0 && images.shape[0] > 0) {
    if (response.logits_per_image.size() != static_cast<size_t>(images.shape[0] * texts.shape[0])) {
      return internal_error("the server returned logits of the wrong size");
    }
    available.push_back({"logits_per_image", {images.shape[0], texts.shape[0]}, response.logits_per_image});
  }
  std::vector<std::pair<const OutputTensor*, bool>> chosen;  // tensor, binary
  if (request.outputs.empty()) {
    for (const OutputTensor& t : available) chosen.emplace_back(&t, request.binary_output);
  } else {
    for (const KServeOutputRequest& o : request.outputs) {
      const OutputTensor* found = nullptr;
      for (const OutputTensor& t : available) {
        if (o.name == t.name) found = &t;
      }
      if (found == nullptr) {
        return invalid_argument("output " + quote_name(o.name) + " is not produced by these inputs (" +
                                (o.name == "logits_per_image" ? "it needs both texts and images" : "no such input") +
                                ")");
      }
      chosen.emplace_back(found, o.binary);
    }
  }
  EncodedBody out;
  std::string& header = out.body;
  std::string binary;
  header += "{\"model_name\":";
  append_json_string(header, model);
  header += ",\"model_version\":\"1\"";
  if (request.id) {
    header += ",\"id\":";
    append_json_string(header, *request.id);
  }
  header += ",\"outputs\":[";
  for (size_t i = 0; i < chosen.size(); ++i) {
    const auto& [tensor, is_binary] = chosen[i];
    if (i > 0) header += ',';
    header += "{\"name\":\"";
    header += tensor->name;
    header += "\",\"datatype\":\"FP32\",\"shape\":";
    append_json_ints(header, tensor->shape);
    if (is_binary) {
      const size_t bytes = tensor->values.size() * sizeof(float);
      header += ",\"parameters\":{\"binary_data_size\":" + std::to_string(bytes) + "}}";
      binary.append(reinterpret_cast<const char*>(tensor->values.data()), bytes);  // little-endian hosts only
    } else {
      header += ",\"data\":";
      append_json_floats(header, tensor->values);
      header += '}';
    }
  }
  header += "]}";
  bool any_binary = false;
  for (const auto& c : chosen) any_binary = any_binary || c.second;
  if (any_binary) {
    out.json_length = header.size();
    out.content_type = "application/octet-stream";
    out.body += binary;
  }
  return out;
}

std::string encode_server_metadata() {
  nlohmann::ordered_json j;
  j["name"] = "mmserve";
  j["version"] = "0.1.0";
  j["extensions"] = {"model_repository", "binary_tensor_data", "generate"};
  return dump_json(j);
}

std::string encode_model_metadata(const serving::ModelMetadata& metadata) {
  auto tensors = [](const std::vector<serving::TensorSpec>& specs) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const serving::TensorSpec& t : specs) {
      nlohmann::ordered_json e;
      e["name"] = t.name;
      e["datatype"] = t.datatype;
      e["shape"] = t.shape;
      out.push_back(std::move(e));
    }
    return out;
  };
  nlohmann::ordered_json j;
  j["name"] = metadata.name;
  j["versions"] = metadata.versions.empty() ? std::vector<std::string>{"1"} : metadata.versions;
  j["platform"] = metadata.platform;
  j["inputs"] = tensors(metadata.inputs);
  j["outputs"] = tensors(metadata.outputs);
  // mmserve's extension: each replica (instance) with its device and health (docs/api.md).
  nlohmann::ordered_json replicas = nlohmann::ordered_json::array();
  for (const serving::ReplicaInfo& r : metadata.replicas) {
    nlohmann::ordered_json e;
    e["index"] = r.index;
    e["device"] = r.device;
    e["healthy"] = r.healthy;
    if (!r.healthy) e["fault"] = r.fault;
    replicas.push_back(std::move(e));
  }
  j["replicas"] = std::move(replicas);
  return dump_json(j);
}

std::string encode_repository_index(const std::vector<serving::ModelStatus>& models, bool ready_only) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const serving::ModelStatus& m : models) {
    if (ready_only && m.state != serving::ModelState::kReady) continue;
    nlohmann::ordered_json e;
    e["name"] = m.name;
    e["version"] = m.version;
    e["state"] = serving::model_state_name(m.state);
    e["reason"] = m.reason;
    out.push_back(std::move(e));
  }
  return dump_json(out);
}

StatusOr<bool> parse_repository_index(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return false;
  ASSIGN_OR_RETURN(json root, parse_json(body));
  if (!root.is_object()) return invalid_argument("the request must be a JSON object");
  RETURN_IF_ERROR(check_keys(root, {"ready"}, "request"));
  const auto ready = root.find("ready");
  if (ready == root.end()) return false;
  if (!ready->is_boolean()) return invalid_argument("'ready' must be a boolean");
  return ready->get<bool>();
}

Status parse_repository_action(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return ok_status();
  ASSIGN_OR_RETURN(json root, parse_json(body));
  if (!root.is_object()) return invalid_argument("the request must be a JSON object");
  RETURN_IF_ERROR(check_keys(root, {"parameters"}, "request"));
  if (const auto p = root.find("parameters"); p != root.end() && !p->is_object()) {
    return invalid_argument("'parameters' must be an object");
  }
  return ok_status();
}

}  // namespace mmserve::api
