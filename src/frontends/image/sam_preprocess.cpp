// SAM preprocessing and mask post-processing (see sam_preprocess.h), each step following transformers 5:
//
//  - load_sam_preprocess_config: SamImageProcessorPil's attributes are the defaults; "size" is {"longest_edge":
//    N} or an int N (get_size_dict(max_size=...)), "pad_size" {"height", "width"} or an int N (N x N). Without
//    preprocessor_config.json, processor_config.json's "image_processor" object is read (SamProcessor's file).
//  - preprocess_sam: SamImageProcessorPil._preprocess: resize (PilBackend.resize -> PIL), rescale, normalise
//    (image_transforms.rescale / normalize, the same float64-then-float32 arithmetic as CLIP, so
//    to_pixel_values is reused), then PilBackend.pad: np.pad with 0 at the bottom and right.
//  - normalize_sam_point / normalize_sam_box: SamProcessor._normalize_coordinates (float64; boxes arrive as
//    np.array(box).astype(np.float32)).
//  - mask post-processing (post_process_masks) is kernels/mask_resize (a CPU twin and a CUDA kernel, bit-equal).
// Tests: tests/unit/frontends/image/sam_preprocess_test.cpp.
#include "frontends/image/sam_preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/json_config.h"
#include "frontends/image/preprocess.h"

namespace mmserve::image {
namespace {

constexpr int64_t kMaxSide = 1 << 16;

Status read_positive(const JsonObject& object, const std::string& key, const std::string& label, int& out) {
  ASSIGN_OR_RETURN(int64_t value, object.get_int(key));
  if (value <= 0 || value > kMaxSide) {
    return invalid_argument(label + ": expected a size in [1, " + std::to_string(kMaxSide) + "], got " +
                            std::to_string(value));
  }
  out = static_cast<int>(value);
  return ok_status();
}

Status read_size(const JsonObject& root, SamPreprocessConfig& config) {
  if (!root.has("size")) return ok_status();
  const std::string label = root.label() + ": size";
  if (root.raw().at("size").is_number()) return read_positive(root, "size", label, config.longest_edge);
  ASSIGN_OR_RETURN(JsonObject size, root.get_object("size"));
  if (!size.has("longest_edge")) {
    return invalid_argument(label + ": SAM resizes the longest edge: expected {\"longest_edge\": N} or an integer");
  }
  return read_positive(size, "longest_edge", label + ".longest_edge", config.longest_edge);
}

Status read_pad_size(const JsonObject& root, SamPreprocessConfig& config) {
  if (!root.has("pad_size")) return ok_status();
  const std::string label = root.label() + ": pad_size";
  if (root.raw().at("pad_size").is_number()) {
    RETURN_IF_ERROR(read_positive(root, "pad_size", label, config.pad_height));
    config.pad_width = config.pad_height;
    return ok_status();
  }
  ASSIGN_OR_RETURN(JsonObject pad, root.get_object("pad_size"));
  RETURN_IF_ERROR(read_positive(pad, "height", label + ".height", config.pad_height));
  return read_positive(pad, "width", label + ".width", config.pad_width);
}


}  // namespace

StatusOr<SamPreprocessConfig> load_sam_preprocess_config(const std::string& model_dir) {
  std::string path = model_dir + "/preprocessor_config.json";
  StatusOr<nlohmann::json> json = read_json_file(path);
  if (!json.ok() && json.status().code() == StatusCode::kNotFound) {
    // transformers 5's SamProcessor.save_pretrained writes only processor_config.json, the image processor's
    // settings nested under "image_processor".
    StatusOr<nlohmann::json> processor = read_json_file(model_dir + "/processor_config.json");
    if (!processor.ok() || !processor->is_object() || !processor->contains("image_processor")) return json.status();
    path = model_dir + "/processor_config.json: image_processor";
    json = nlohmann::json((*processor)["image_processor"]);
  }
  if (!json.ok()) return json.status();
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::wrap(*json, path));
  SamPreprocessConfig config;
  RETURN_IF_ERROR(read_size(root, config));
  RETURN_IF_ERROR(read_pad_size(root, config));
  ASSIGN_OR_RETURN(config.do_resize, root.get_bool_or("do_resize", config.do_resize));
  ASSIGN_OR_RETURN(config.do_rescale, root.get_bool_or("do_rescale", config.do_rescale));
  ASSIGN_OR_RETURN(config.do_normalize, root.get_bool_or("do_normalize", config.do_normalize));
  ASSIGN_OR_RETURN(config.do_pad, root.get_bool_or("do_pad", config.do_pad));
  ASSIGN_OR_RETURN(bool center_crop, root.get_bool_or("do_center_crop", false));
  if (center_crop) return unimplemented(path + ": do_center_crop: SAM preprocessing does not crop");
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

std::array<int, 2> sam_resized_size(int width, int height, int longest_edge) {
  MMSERVE_CHECK(width > 0 && height > 0 && longest_edge > 0, "sam_resized_size needs positive sizes");
  // Python: scale = longest_edge * 1.0 / max(h, w); int(h * scale + 0.5), int(w * scale + 0.5), all float64.
  const double scale = static_cast<double>(longest_edge) / static_cast<double>(std::max(width, height));
  const double new_w = static_cast<double>(width) * scale + 0.5;
  const double new_h = static_cast<double>(height) * scale + 0.5;
  return {static_cast<int>(new_w), static_cast<int>(new_h)};
}

StatusOr<SamImageInput> preprocess_sam(const RgbImage& image, const SamPreprocessConfig& config) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return invalid_argument("SAM preprocessing: empty or inconsistent image (" + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + ")");
  }
  SamImageInput out;
  out.original_width = image.width;
  out.original_height = image.height;
  out.reshaped_width = image.width;
  out.reshaped_height = image.height;
  if (config.do_resize) {
    const std::array<int, 2> size = sam_resized_size(image.width, image.height, config.longest_edge);
    out.reshaped_width = size[0];
    out.reshaped_height = size[1];
    if (size[0] <= 0 || size[1] <= 0) {
      return invalid_argument("SAM preprocessing: a " + std::to_string(image.width) + "x" +
                              std::to_string(image.height) +
                              " image resizes to an empty one (aspect ratio too extreme)");
    }
  }
  out.pad_width = config.do_pad ? config.pad_width : out.reshaped_width;
  out.pad_height = config.do_pad ? config.pad_height : out.reshaped_height;
  if (out.reshaped_width > out.pad_width || out.reshaped_height > out.pad_height) {
    return invalid_argument("SAM preprocessing: the resized image (" + std::to_string(out.reshaped_width) + "x" +
                            std::to_string(out.reshaped_height) + ") is larger than pad_size (" +
                            std::to_string(out.pad_width) + "x" + std::to_string(out.pad_height) + ")");
  }
  RgbImage resized_storage;
  const RgbImage* resized = &image;
  if (out.reshaped_width != image.width || out.reshaped_height != image.height) {
    resized_storage = resize_pil(image, out.reshaped_width, out.reshaped_height, config.resample);
    resized = &resized_storage;
  }
  // HF's rescale and normalise are CLIP's (image_transforms.rescale / normalize): reuse that arithmetic.
  ClipPreprocessConfig values;
  values.do_rescale = config.do_rescale;
  values.do_normalize = config.do_normalize;
  values.rescale_factor = config.rescale_factor;
  values.image_mean = config.image_mean;
  values.image_std = config.image_std;
  const size_t rw = static_cast<size_t>(out.reshaped_width), rh = static_cast<size_t>(out.reshaped_height);
  std::vector<float> chw(3 * rw * rh);
  to_pixel_values(*resized, values, chw.data());
  const size_t pw = static_cast<size_t>(out.pad_width), ph = static_cast<size_t>(out.pad_height);
  out.pixels.assign(3 * pw * ph, 0.0f);  // np.pad(..., constant_values=0) after normalising
  for (size_t c = 0; c < 3; ++c) {
    for (size_t y = 0; y < rh; ++y) {
      std::memcpy(out.pixels.data() + (c * ph + y) * pw, chw.data() + (c * rh + y) * rw, rw * sizeof(float));
    }
  }
  return out;
}

std::array<double, 2> normalize_sam_point(double x, double y, const SamImageInput& geom) {
  MMSERVE_CHECK(geom.original_width > 0 && geom.original_height > 0, "normalize_sam_point needs an image's geometry");
  // coords[..., 0] * (new_w / old_w): Python's int / int is the correctly rounded double quotient.
  const double sx = static_cast<double>(geom.reshaped_width) / static_cast<double>(geom.original_width);
  const double sy = static_cast<double>(geom.reshaped_height) / static_cast<double>(geom.original_height);
  return {x * sx, y * sy};
}

std::array<double, 4> normalize_sam_box(const std::array<double, 4>& box, const SamImageInput& geom) {
  const auto as_f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  const std::array<double, 2> a = normalize_sam_point(as_f32(box[0]), as_f32(box[1]), geom);
  const std::array<double, 2> b = normalize_sam_point(as_f32(box[2]), as_f32(box[3]), geom);
  return {a[0], a[1], b[0], b[1]};
}

}  // namespace mmserve::image
