// SamInputs (see sam_inputs.h). Tests: tests/unit/engine/sam_executor_test.cpp.
#include "engine/sam_inputs.h"

#include <cmath>
#include <span>

#include "engine/request_image.h"
#include "frontends/image/image.h"

namespace mmserve::engine {
namespace {

// A tensor's shape without leading 1s beyond `rank` (HF nests one image's prompt as [1, N, 2]).
std::vector<int64_t> squeeze_to(std::vector<int64_t> shape, size_t rank) {
  while (shape.size() > rank && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Status check_finite(const InputItem& t) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    if (!std::isfinite(t.values[i])) {
      return invalid_argument(t.name + ": element " + std::to_string(i) + " is not a finite number");
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<SamInputs>> SamInputs::create(const std::string& model_dir, const SamExecutor& executor,
                                                       const PreparerOptions& options) {
  ASSIGN_OR_RETURN(image::SamPreprocessConfig config, image::load_sam_preprocess_config(model_dir));
  const models::SamConfig& c = executor.config();
  if (config.pad_height != c.vision.image_size || config.pad_width != c.vision.image_size) {
    return invalid_argument(model_dir + ": the processor pads to " + std::to_string(config.pad_width) + "x" +
                            std::to_string(config.pad_height) + " but the model takes " +
                            std::to_string(c.vision.image_size) + "x" + std::to_string(c.vision.image_size));
  }
  return std::make_unique<SamInputs>(config, c.vision.image_size, c.vision.grid(), options);
}

StatusOr<std::unique_ptr<InputPreparer>> SamInputs::create_for_server(const std::string& model_dir,
                                                                      const Executor& first,
                                                                      const PreparerOptions& options) {
  const auto* sam = dynamic_cast<const SamExecutor*>(&first);
  if (sam == nullptr) return internal_error("SamInputs needs a SamExecutor");
  ASSIGN_OR_RETURN(std::unique_ptr<SamInputs> inputs, create(model_dir, *sam, options));
  return std::unique_ptr<InputPreparer>(std::move(inputs));
}

void SamInputs::remember(const std::string& id, const image::SamImageInput& geometry) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = known_.find(id); it != known_.end()) {
    order_.erase(it->second.second);
    known_.erase(it);
  }
  order_.push_front(id);
  image::SamImageInput g = geometry;
  g.pixels.clear();
  known_.emplace(id, std::make_pair(std::move(g), order_.begin()));
  while (order_.size() > kRememberedImages) {
    known_.erase(order_.back());
    order_.pop_back();
  }
}

bool SamInputs::recall(const std::string& id, image::SamImageInput& geometry) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = known_.find(id);
  if (it == known_.end()) return false;
  geometry = it->second.first;
  order_.splice(order_.begin(), order_, it->second.second);
  return true;
}

StatusOr<Prepared> SamInputs::prepare(std::vector<InputItem>& inputs, const RequestParams* params) const {
  const auto* sam = dynamic_cast<const SamParams*>(params);
  auto input = std::make_unique<SamInput>();
  input->multimask_output = sam == nullptr || sam->multimask_output;
  const InputItem *image = nullptr, *coords = nullptr, *labels = nullptr, *boxes = nullptr, *mask = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputItem& in = inputs[i];
    const InputItem** slot = nullptr;
    if (in.kind == InputKind::kImageBytes) {
      slot = &image;
    } else if (in.kind == InputKind::kTensor && in.name == "point_coords") {
      slot = &coords;
    } else if (in.kind == InputKind::kTensor && in.name == "point_labels") {
      slot = &labels;
    } else if (in.kind == InputKind::kTensor && in.name == "boxes") {
      slot = &boxes;
    } else if (in.kind == InputKind::kTensor && in.name == "mask_input") {
      slot = &mask;
    } else {
      return invalid_argument("input " + std::to_string(i) +
                              (in.kind == InputKind::kTensor ? " ('" + in.name + "')" : std::string()) +
                              " is not a SAM input (one image, point_coords, point_labels, boxes, mask_input)");
    }
    if (*slot != nullptr) {
      return invalid_argument(in.kind == InputKind::kImageBytes
                                  ? std::string("a SAM request segments one image; send one image per request")
                                  : "input '" + in.name + "' given twice");
    }
    *slot = &in;
  }
  const std::string image_id = sam != nullptr ? sam->image_id : "";
  if (image != nullptr && !image_id.empty()) {
    return invalid_argument("give either an image or an image_id, not both");
  }
  Prepared out;
  if (image != nullptr) {
    ASSIGN_OR_RETURN(image::RgbImage decoded, decode_request_image(image->image_bytes, options_.max_image_pixels, "image"));
    input->image_id = content_hash(image->image_bytes);
    ASSIGN_OR_RETURN(input->geometry, image::preprocess_sam(decoded, config_));
    input->pixels = std::move(input->geometry.pixels);
    remember(input->image_id, input->geometry);
    out.items[kSamImageSlot] = 1;
  } else if (!image_id.empty()) {
    if (!recall(image_id, input->geometry)) {
      return invalid_argument("unknown image_id '" + image_id +
                              "': send the image (its id comes back in the response)");
    }
    input->image_id = image_id;
  } else {
    return invalid_argument("a SAM request needs an image (or the image_id of an earlier one)");
  }
  const image::SamImageInput& g = input->geometry;
  const double width = g.original_width, height = g.original_height;
  auto inside = [&](double x, double y) { return x >= 0 && y >= 0 && x <= width && y <= height; };
  const std::string size = std::to_string(g.original_width) + "x" + std::to_string(g.original_height);

  if (coords != nullptr) {
    RETURN_IF_ERROR(check_finite(*coords));
    const std::vector<int64_t> shape = squeeze_to(coords->shape, 2);
    if (shape.size() != 2 || shape[1] != 2 || shape[0] < 1) {
      return invalid_argument("point_coords: shape must be [N, 2], got " + shape_text(coords->shape));
    }
    for (int64_t p = 0; p < shape[0]; ++p) {
      const double x = coords->values[static_cast<size_t>(2 * p)], y = coords->values[static_cast<size_t>(2 * p + 1)];
      if (!inside(x, y)) {
        return invalid_argument("point " + std::to_string(p) + " (" + std::to_string(x) + ", " + std::to_string(y) +
                                ") is outside the " + size + " image");
      }
      const auto n = image::normalize_sam_point(x, y, g);
      input->points.push_back({static_cast<float>(n[0]), static_cast<float>(n[1])});
    }
  }
  if (labels != nullptr) {
    if (coords == nullptr) return invalid_argument("point_labels without point_coords");
    const std::vector<int64_t> shape = squeeze_to(labels->shape, 1);
    if (shape.size() != 1 || shape[0] != static_cast<int64_t>(input->points.size())) {
      return invalid_argument("point_labels: shape must be [" + std::to_string(input->points.size()) +
                              "] (one per point), got " + shape_text(labels->shape));
    }
    for (size_t p = 0; p < labels->values.size(); ++p) {
      const float v = labels->values[p];
      if (v != -1.0f && v != 0.0f && v != 1.0f) {
        return invalid_argument("point_labels: element " + std::to_string(p) +
                                " must be 1 (foreground), 0 (background) or -1 (padding)");
      }
      input->labels.push_back(static_cast<int32_t>(v));
    }
  } else {
    input->labels.assign(input->points.size(), 1);  // HF: points without labels are foreground
  }
  if (boxes != nullptr) {
    RETURN_IF_ERROR(check_finite(*boxes));
    const std::vector<int64_t> shape = squeeze_to(boxes->shape, 2);
    if (shape.size() != 2 || shape[1] != 4 || shape[0] > 1) {
      return invalid_argument("boxes: shape must be [M, 4] with M <= 1 (the points and the box form one prompt), got " +
                              shape_text(boxes->shape));
    }
    if (shape[0] == 1) {
      const std::array<double, 4> b = {boxes->values[0], boxes->values[1], boxes->values[2], boxes->values[3]};
      if (!inside(b[0], b[1]) || !inside(b[2], b[3]))
        return invalid_argument("the box lies outside the " + size + " image");
      if (b[2] < b[0] || b[3] < b[1]) return invalid_argument("the box must have x0 <= x1 and y0 <= y1");
      const auto n = image::normalize_sam_box(b, g);
      input->boxes.push_back(
          {static_cast<float>(n[0]), static_cast<float>(n[1]), static_cast<float>(n[2]), static_cast<float>(n[3])});
    }
  }
  if (mask != nullptr) {
    RETURN_IF_ERROR(check_finite(*mask));
    const std::vector<int64_t> shape = squeeze_to(mask->shape, 2);
    if (shape.size() != 2 || shape[0] != 4 * grid_ || shape[1] != 4 * grid_) {
      return invalid_argument("mask_input: shape must be [1, " + std::to_string(4 * grid_) + ", " +
                              std::to_string(4 * grid_) + "], got " + shape_text(mask->shape));
    }
    input->mask_input = mask->values;
    input->mask_height = input->mask_width = 4 * grid_;
  }
  if (input->points.empty() && input->boxes.empty() && input->mask_input.empty()) {
    return invalid_argument("the prompt is empty: give point_coords (with point_labels), a box or a mask_input");
  }
  out.items[kSamPromptSlot] = 1;
  out.score = qos_score(image != nullptr ? static_cast<double>(grid_ * grid_) : 0.0, 0.0, 0.0, options_.qos);
  out.input = std::move(input);
  return out;
}

}  // namespace mmserve::engine
