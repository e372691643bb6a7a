// Reads a CLIP preprocessor_config.json into ClipPreprocessConfig, accepting the forms HF accepts.
//
// HF normalises "size" with get_size_dict(default_to_square=False) (an int N means {"shortest_edge": N}) and
// "crop_size" with default_to_square=True (an int N means N x N); absent or null keys keep the processor's
// defaults (CLIPImageProcessorPil's class attributes, mirrored by ClipPreprocessConfig's initialisers). A
// wrong type is kInvalidArgument naming the file and key; a valid HF form this pipeline does not implement
// ("size" {"height","width"} or with "longest_edge", filters other than BILINEAR/BICUBIC) is kUnimplemented.
// Tests: tests/unit/frontends/image/preprocess_test.cpp.
#include <cmath>
#include <string>

#include "core/json_config.h"
#include "frontends/image/preprocess.h"

namespace mmserve::image {
namespace {

Status positive(const std::string& what, int64_t value, int& out) {
  if (value <= 0 || value > (1 << 20)) {
    return invalid_argument(what + ": expected a positive size, got " + std::to_string(value));
  }
  out = static_cast<int>(value);
  return ok_status();
}

Status read_size(const JsonObject& root, ClipPreprocessConfig& config) {
  if (!root.has("size")) return ok_status();
  const std::string label = root.label() + ": size";
  const nlohmann::json& value = root.raw().at("size");
  if (value.is_number()) {
    ASSIGN_OR_RETURN(int64_t n, root.get_int("size"));
    return positive(label, n, config.shortest_edge);
  }
  ASSIGN_OR_RETURN(JsonObject size, root.get_object("size"));
  if (size.has("longest_edge")) {
    return unimplemented(label + ": \"longest_edge\" is not supported (only {\"shortest_edge\": N})");
  }
  if (!size.has("shortest_edge")) {
    if (size.has("height") || size.has("width")) {
      return unimplemented(label + ": a fixed {\"height\", \"width\"} resize is not supported");
    }
    return invalid_argument(label + ": expected {\"shortest_edge\": N} or an integer");
  }
  ASSIGN_OR_RETURN(int64_t n, size.get_int("shortest_edge"));
  return positive(label + ".shortest_edge", n, config.shortest_edge);
}

Status read_crop_size(const JsonObject& root, ClipPreprocessConfig& config) {
  if (!root.has("crop_size")) return ok_status();
  const std::string label = root.label() + ": crop_size";
  if (root.raw().at("crop_size").is_number()) {
    ASSIGN_OR_RETURN(int64_t n, root.get_int("crop_size"));
    RETURN_IF_ERROR(positive(label, n, config.crop_height));
    config.crop_width = config.crop_height;
    return ok_status();
  }
  ASSIGN_OR_RETURN(JsonObject crop, root.get_object("crop_size"));
  ASSIGN_OR_RETURN(int64_t height, crop.get_int("height"));
  ASSIGN_OR_RETURN(int64_t width, crop.get_int("width"));
  RETURN_IF_ERROR(positive(label + ".height", height, config.crop_height));
  return positive(label + ".width", width, config.crop_width);
}

}  // namespace

Status read_rgb_triplet(const JsonObject& root, const std::string& key, bool nonzero, std::array<float, 3>& out) {
  if (!root.has(key)) return ok_status();
  const std::string label = root.label() + ": " + key;
  std::vector<double> values;
  if (root.raw().at(key).is_number()) {
    ASSIGN_OR_RETURN(double v, root.get_double(key));
    values.assign(3, v);
  } else {
    ASSIGN_OR_RETURN(values, root.get_double_array(key));
  }
  if (values.size() != 3) {
    return invalid_argument(label + ": expected 3 values (one per RGB channel), got " + std::to_string(values.size()));
  }
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(values[c]) || (nonzero && values[c] == 0.0)) {
      return invalid_argument(label + ": invalid value " + std::to_string(values[c]));
    }
    out[c] = static_cast<float>(values[c]);  // numpy: np.array(mean, dtype=float32)
  }
  return ok_status();
}


StatusOr<ClipPreprocessConfig> load_clip_preprocess_config(const std::string& model_dir) {
  const std::string path = model_dir + "/preprocessor_config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(path));
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::wrap(json, path));
  ClipPreprocessConfig config;
  RETURN_IF_ERROR(read_size(root, config));
  RETURN_IF_ERROR(read_crop_size(root, config));
  ASSIGN_OR_RETURN(config.do_resize, root.get_bool_or("do_resize", config.do_resize));
  ASSIGN_OR_RETURN(config.do_center_crop, root.get_bool_or("do_center_crop", config.do_center_crop));
  ASSIGN_OR_RETURN(config.do_rescale, root.get_bool_or("do_rescale", config.do_rescale));
  ASSIGN_OR_RETURN(config.do_normalize, root.get_bool_or("do_normalize", config.do_normalize));
  ASSIGN_OR_RETURN(config.rescale_factor, root.get_double_or("rescale_factor", config.rescale_factor));
  if (!std::isfinite(config.rescale_factor) || config.rescale_factor == 0.0) {
    return invalid_argument(path + ": rescale_factor: invalid value " + std::to_string(config.rescale_factor));
  }
  RETURN_IF_ERROR(read_rgb_triplet(root, "image_mean", /*nonzero=*/false, config.image_mean));
  RETURN_IF_ERROR(read_rgb_triplet(root, "image_std", /*nonzero=*/true, config.image_std));
  ASSIGN_OR_RETURN(int64_t resample, root.get_int_or("resample", config.resample));
  if (resample != 2 && resample != 3) {
    return unimplemented(path + ": resample: PIL filter " + std::to_string(resample) +
                         " is not supported (only 2 = BILINEAR and 3 = BICUBIC)");
  }
  config.resample = static_cast<int>(resample);
  return config;
}

}  // namespace mmserve::image
