// The adapter router (see gate_head.h).
#include "models/lora/gate_head.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
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

StatusOr<GateHead> GateHead::from_weights(int64_t d, int64_t h, std::vector<float> w1, std::vector<float> b1,
                                          std::vector<float> w2, std::vector<float> b2,
                                          std::vector<std::string> names) {
  const int64_t n = static_cast<int64_t>(names.size());
  if (d <= 0 || h <= 0 || n <= 0 || static_cast<int64_t>(w1.size()) != h * d || static_cast<int64_t>(b1.size()) != h ||
      static_cast<int64_t>(w2.size()) != n * h || static_cast<int64_t>(b2.size()) != n) {
    return invalid_argument("a gate head of D " + std::to_string(d) + ", H " + std::to_string(h) + ", N " +
                            std::to_string(n) + " takes w1 [H, D], b1 [H], w2 [N, H], b2 [N]");
  }
  GateHead g;
  g.d_ = d, g.h_ = h, g.n_ = n;
  g.w1_ = std::move(w1), g.b1_ = std::move(b1), g.w2_ = std::move(w2), g.b2_ = std::move(b2);
  g.names_ = std::move(names);
  return g;
}

Status GateHead::save(const std::string& path) const {
  const std::string names_path = (std::filesystem::path(path).parent_path() / "gate.json").string();
  const std::string tmp = names_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json({{"adapters", names_}}).dump(1) << "\n";
    if (!out.good()) return failed_precondition(tmp + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, names_path, ec);
  if (ec) return failed_precondition(names_path + ": rename from " + tmp + ": " + ec.message());
  return write_safetensors(path, {{"gate.0.weight", DType::kF32, {h_, d_}, w1_.data()},
                                  {"gate.0.bias", DType::kF32, {h_}, b1_.data()},
                                  {"gate.2.weight", DType::kF32, {n_, h_}, w2_.data()},
                                  {"gate.2.bias", DType::kF32, {n_}, b2_.data()}});
}

namespace {

// a . b with 8 independent partial sums: one running sum ran at the add's latency (docs/perf/lora_cpu.md), eight
// let the compiler keep vector lanes busy. The order differs from one sum's by rounding only (~1e-7 relative).
float dot8(const float* a, const float* b, int64_t n) {
  float part[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int k = 0; k < 8; ++k) part[k] += a[c + k] * b[c + k];
  }
  for (; c < n; ++c) part[0] += a[c] * b[c];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace

void GateHead::forward(const float* e, float* hidden, float* z) const {
  for (int64_t i = 0; i < h_; ++i) {
    hidden[i] = b1_[i] + dot8(w1_.data() + i * d_, e, d_);  // before the ReLU: the backward needs its sign
  }
  second_layer(hidden, z);
}

void GateHead::second_layer(const float* hidden, float* z) const {
  for (int64_t j = 0; j < n_; ++j) {
    float acc = b2_[j];
    for (int64_t i = 0; i < h_; ++i) acc += w2_[j * h_ + i] * std::max(hidden[i], 0.0f);
    z[j] = acc;
  }
}

StatusOr<std::vector<float>> GateHead::logits(const std::vector<float>& e) const {
  if (static_cast<int64_t>(e.size()) != d_) {
    return invalid_argument("the gate head takes an embedding of " + std::to_string(d_) + " values, not " +
                            std::to_string(e.size()));
  }
  std::vector<float> hidden(static_cast<size_t>(h_)), z(static_cast<size_t>(n_));
  forward(e.data(), hidden.data(), z.data());
  return z;
}

StatusOr<GateChoice> GateHead::route(const std::vector<float>& e, int64_t k) const {
  if (k < 1 || k > n_) return invalid_argument("top-" + std::to_string(k) + " of " + std::to_string(n_) + " adapters");
  ASSIGN_OR_RETURN(std::vector<float> z, logits(e));
  return choose(std::move(z), k);
}

StatusOr<GateChoice> GateHead::route_from_hidden(std::vector<float> hidden, int64_t k) const {
  if (k < 1 || k > n_) return invalid_argument("top-" + std::to_string(k) + " of " + std::to_string(n_) + " adapters");
  if (static_cast<int64_t>(hidden.size()) != h_) {
    return invalid_argument("the gate head's first layer has " + std::to_string(h_) + " outputs, not " +
                            std::to_string(hidden.size()));
  }
  std::vector<float> z(static_cast<size_t>(n_));
  second_layer(hidden.data(), z.data());
  return choose(std::move(z), k);
}

GateChoice GateHead::choose(std::vector<float> z, int64_t k) const {
  GateChoice out;
  out.probs = std::move(z);
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

StatusOr<double> GateHead::kl_divergence(const float* e, const float* t, int64_t batch, GateGradient* grad) const {
  if (batch < 1) return invalid_argument("the KL divergence of an empty batch");
  if (grad != nullptr) {
    grad->w1.assign(w1_.size(), 0.0f), grad->b1.assign(b1_.size(), 0.0f);
    grad->w2.assign(w2_.size(), 0.0f), grad->b2.assign(b2_.size(), 0.0f);
  }
  std::vector<float> hidden(static_cast<size_t>(h_)), z(static_cast<size_t>(n_)), dz(static_cast<size_t>(n_));
  std::vector<float> dh(static_cast<size_t>(h_));
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double loss = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const float* eb = e + b * d_;
    const float* tb = t + b * n_;
    forward(eb, hidden.data(), z.data());
    const float top = *std::max_element(z.begin(), z.end());
    double sum_exp = 0;
    for (float v : z) sum_exp += std::exp(static_cast<double>(v - top));
    const double log_norm = static_cast<double>(top) + std::log(sum_exp);
    float t_sum = 0;
    for (int64_t j = 0; j < n_; ++j) {
      t_sum += tb[j];
      if (tb[j] > 0) loss += tb[j] * (std::log(static_cast<double>(tb[j])) - (z[j] - log_norm));
    }
    if (grad == nullptr) continue;
    for (int64_t j = 0; j < n_; ++j) {
      const float p = static_cast<float>(std::exp(z[j] - log_norm));
      dz[j] = (p * t_sum - tb[j]) * inv_batch;
      grad->b2[j] += dz[j];
    }
    std::fill(dh.begin(), dh.end(), 0.0f);
    for (int64_t j = 0; j < n_; ++j) {
      for (int64_t i = 0; i < h_; ++i) {
        grad->w2[j * h_ + i] += dz[j] * std::max(hidden[i], 0.0f);
        dh[i] += w2_[j * h_ + i] * dz[j];
      }
    }
    for (int64_t i = 0; i < h_; ++i) {
      if (hidden[i] <= 0) continue;  // ReLU: no gradient where it cut (torch's threshold_backward, 0 at 0)
      grad->b1[i] += dh[i];
      float* row = grad->w1.data() + i * d_;
      for (int64_t c = 0; c < d_; ++c) row[c] += dh[i] * eb[c];
    }
  }
  return loss / static_cast<double>(batch);
}

void GateHead::sgd_step(const GateGradient& grad, float lr) {
  MMSERVE_CHECK(grad.w1.size() == w1_.size() && grad.b1.size() == b1_.size() && grad.w2.size() == w2_.size() &&
                    grad.b2.size() == b2_.size(),
                "a gradient of another head's shape");
  auto step = [lr](std::vector<float>& w, const std::vector<float>& g) {
    for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * g[i];
  };
  step(w1_, grad.w1), step(b1_, grad.b1), step(w2_, grad.w2), step(b2_, grad.b2);
}

double GateGradient::norm() const {
  double sq = 0;
  for (const std::vector<float>* v : {&w1, &b1, &w2, &b2}) {
    for (float x : *v) sq += static_cast<double>(x) * x;
  }
  return std::sqrt(sq);
}

void GateGradient::scale(float factor) {
  for (std::vector<float>* v : {&w1, &b1, &w2, &b2}) {
    for (float& x : *v) x *= factor;
  }
}

}  // namespace mmserve::models
