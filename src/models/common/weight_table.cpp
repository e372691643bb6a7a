// Weight table checking and f32 materialisation (see weight_table.h).
#include "models/common/weight_table.h"

#include <cstdlib>
#include <cstring>
#include <set>

namespace mmserve::models {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status check_weights(const WeightStore& store, const std::vector<WeightSpec>& specs,
                     const WeightCheckOptions& options) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::set<std::string> listed;
  for (const WeightSpec& spec : specs) {
    listed.insert(spec.name);
    const TensorInfo* info = store.find(spec.name);
    if (info == nullptr) {
      if (!spec.optional) missing.push_back(spec.name);
      continue;
    }
    if (info->shape != spec.shape) {
      misshaped.push_back(spec.name + " " + shape_to_string(info->shape) + " (expected " + shape_to_string(spec.shape) +
                          ")");
    }
  }
  for (const std::string& name : store.names()) {
    if (listed.count(name)) continue;
    bool ignored = false;
    for (const std::string& suffix : options.ignored_suffixes) ignored = ignored || name.ends_with(suffix);
    if (!ignored) unexpected.push_back(name);
  }
  if (missing.empty() && misshaped.empty() && unexpected.empty()) return ok_status();

  std::string message = "checkpoint does not match the architecture:";
  auto append = [&message](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    message += std::string(" ") + std::to_string(names.size()) + " " + what + ":";
    for (size_t i = 0; i < names.size(); ++i) message += (i ? ", " : " ") + names[i];
    message += ";";
  };
  append("missing", missing);
  append("mis-shaped", misshaped);
  append("unexpected", unexpected);
  message.pop_back();
  return invalid_argument(message);
}

StatusOr<std::unique_ptr<F32Weights>> F32Weights::load(const WeightStore& store, const std::vector<WeightSpec>& specs) {
  // Plan the layout first: each tensor starts on a 64-byte boundary.
  size_t total = 0;
  std::vector<std::pair<const WeightSpec*, const TensorInfo*>> present;
  for (const WeightSpec& spec : specs) {
    const TensorInfo* info = store.find(spec.name);
    if (info == nullptr) continue;
    if (info->dtype != DType::kF32 && info->dtype != DType::kF16 && info->dtype != DType::kBF16) {
      return unimplemented("tensor " + spec.name + " has dtype " + dtype_name(info->dtype) +
                           "; the CPU path supports f32, f16 and bf16 checkpoints");
    }
    present.emplace_back(&spec, info);
    total += (static_cast<size_t>(info->numel()) * sizeof(float) + 63) / 64 * 64;
  }
  auto weights = std::unique_ptr<F32Weights>(new F32Weights());
  weights->bytes_ = total;
  weights->buffer_ = static_cast<float*>(std::aligned_alloc(64, total == 0 ? 64 : total));
  if (weights->buffer_ == nullptr) return resource_exhausted("cannot allocate " + std::to_string(total) + " bytes");
  char* cursor = reinterpret_cast<char*>(weights->buffer_);
  for (const auto& [spec, info] : present) {
    float* dst = reinterpret_cast<float*>(cursor);
    if (!convert_to_f32(info->dtype, info->data, dst, info->numel())) {
      return internal_error("conversion of " + spec->name + " failed");
    }
    weights->index_.emplace(spec->name, Tensor(dst, DType::kF32, info->shape));
    cursor += (static_cast<size_t>(info->numel()) * sizeof(float) + 63) / 64 * 64;
  }
  return weights;
}

F32Weights::~F32Weights() {
  std::free(buffer_);
}

Tensor F32Weights::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return Tensor();
  return it->second;
}

Tensor F32Weights::add_owned(const std::string& name, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  owned_.emplace_back(new float[static_cast<size_t>(n)]);
  bytes_ += static_cast<size_t>(n) * sizeof(float);  // bytes() is what the model holds, derived tensors too
  Tensor t(owned_.back().get(), DType::kF32, shape);
  index_[name] = t;
  return t;
}

}  // namespace mmserve::models
