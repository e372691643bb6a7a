// The adapter router (see gate_head.h).
#include "models/lora/gate_head.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/dtype.h"
#include "core/json_config.h"
#include "core/safetensors.h"

namespace mmserve::models {
namespace {

StatusOr<std::vector<float>> tensor(const SafetensorsFile& file, const std::string& name,
                                    const std::vector<int64_t>& shape, const std::string& where) {
  const TensorInfo* t = file.find(name);
  if (t == nullptr) return invalid_argument(where + ": no tensor " + name);
  if (t->shape != shape) {
    std::string want, got;
    for (int64_t v : shape) want += (want.empty() ? "" : ", ") + std::to_string(v);
    for (int64_t v : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(v);
    return invalid_argument(where + ": " + name + " is [" + got + "], expected [" + want + "]");
  }
  std::vector<float> out(static_cast<size_t>(t->numel()));
  if (!convert_to_f32(t->dtype, t->data, out.data(), t->numel())) {
    return unimplemented(where + ": " + name + " is " + dtype_name(t->dtype) + " (f32, f16 or bf16)");
  }
  return out;
}

}  // namespace

StatusOr<GateHead> GateHead::load(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
  const TensorInfo* w1 = file->find("gate.0.weight");
  const TensorInfo* w2 = file->find("gate.2.weight");
  if (w1 == nullptr || w2 == nullptr || w1->shape.size() != 2 || w2->shape.size() != 2) {
    return invalid_argument(path + ": a gate head holds gate.0.weight [H, D] and gate.2.weight [N, H]");
  }
  GateHead g;
  g.h_ = w1->shape[0], g.d_ = w1->shape[1], g.n_ = w2->shape[0];
  if (g.h_ <= 0 || g.d_ <= 0 || g.n_ <= 0) return invalid_argument(path + ": empty gate tensors");
  ASSIGN_OR_RETURN(g.w1_, tensor(*file, "gate.0.weight", {g.h_, g.d_}, path));
  ASSIGN_OR_RETURN(g.b1_, tensor(*file, "gate.0.bias", {g.h_}, path));
  ASSIGN_OR_RETURN(g.w2_, tensor(*file, "gate.2.weight", {g.n_, g.h_}, path));
  ASSIGN_OR_RETURN(g.b2_, tensor(*file, "gate.2.bias", {g.n_}, path));
  const std::string names_path = (std::filesystem::path(path).parent_path() / "gate.json").string();
  ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(names_path));
  if (!j.is_object() || !j.contains("adapters") || !j["adapters"].is_array()) {
    return invalid_argument(names_path + ": expected {\"adapters\": [names, in the gate's output order]}");
  }
  for (const nlohmann::json& n : j["adapters"]) {
    if (!n.is_string() || n.get<std::string>().empty()) return invalid_argument(names_path + ": adapters must be names");
    g.names_.push_back(n.get<std::string>());
  }
  if (static_cast<int64_t>(g.names_.size()) != g.n_) {
    return invalid_argument(names_path + ": names " + std::to_string(g.names_.size()) + " adapters; the gate has " +
                            std::to_string(g.n_) + " outputs");
  }
  return g;
}

StatusOr<GateChoice> GateHead::route(const std::vector<float>& e, int64_t k) const {
  if (static_cast<int64_t>(e.size()) != d_) {
    return invalid_argument("the gate head takes an embedding of " + std::to_string(d_) + " values, not " +
                            std::to_string(e.size()));
  }
  if (k < 1 || k > n_) return invalid_argument("top-" + std::to_string(k) + " of " + std::to_string(n_) + " adapters");
  std::vector<float> hidden(static_cast<size_t>(h_));
  for (int64_t i = 0; i < h_; ++i) {
    float acc = b1_[i];
    for (int64_t c = 0; c < d_; ++c) acc += w1_[i * d_ + c] * e[c];
    hidden[i] = std::max(acc, 0.0f);
  }
  GateChoice out;
  out.probs.resize(static_cast<size_t>(n_));
  for (int64_t j = 0; j < n_; ++j) {
    float acc = b2_[j];
    for (int64_t i = 0; i < h_; ++i) acc += w2_[j * h_ + i] * hidden[i];
    out.probs[j] = acc;
  }
  const float top = *std::max_element(out.probs.begin(), out.probs.end());
  float sum = 0;
  for (float& p : out.probs) sum += (p = std::exp(p - top));
  for (float& p : out.probs) p /= sum;
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return out.probs[a] > out.probs[b]; });
  float kept = 0;
  for (int64_t i = 0; i < k; ++i) kept += out.probs[order[i]];
  for (int64_t i = 0; i < k; ++i) {
    out.index.push_back(order[i]);
    out.weight.push_back(out.probs[order[i]] / kept);
  }
  return out;
}

}  // namespace mmserve::models
