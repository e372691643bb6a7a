// AWQ's activation-aware scale search and folding (see awq.h).
#include "models/quant/awq.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/dtype.h"
#include "core/json_config.h"
#include "core/safetensors.h"
#include "kernels/gemm/gemm.h"
#include "models/llama/llama.h"
#include "models/quant/int4_checkpoint.h"
#include "models/quant/quantize.h"

namespace mmserve::models {
namespace {

constexpr int kGrid = 20;  // AutoAWQ's n_grid

// One activation site's rows, [n, width], at most kAwqRowsMax of them.
struct Site {
  std::vector<float> rows;
  int64_t n = 0, width = 0;
};

// The linears of one group (stacked) and the op before them.
struct Group {
  LlamaActivation site;
  std::vector<std::string> linears;  // ".weight" names, each [n_i, k]
  std::string prev;                  // a norm's weight [k], or a linear's weight [k, *] whose rows are divided
  bool prev_is_linear = false;
};

// mean((X A^T - X B^T)^2) over the rows of x, for A, B [n, k].
double output_mse(const Site& x, const std::vector<float>& ref_out, const std::vector<float>& b, int64_t n) {
  std::vector<float> out(static_cast<size_t>(x.n * n));
  kernels::gemm(false, true, x.n, n, x.width, 1.0f, x.rows.data(), x.width, b.data(), x.width, 0.0f, out.data(), n);
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref_out[i];
    sum += d * d;
  }
  return sum / static_cast<double>(out.size());
}

// AutoAWQ's _compute_best_scale (without duo_scaling): the per-channel scale of the smallest loss.
std::vector<float> search_scale(const Site& x, const std::vector<float>& w, int64_t n, int64_t group_size,
                                int zero_min, AwqGroupReport& report) {
  const int64_t k = x.width;
  std::vector<double> x_mean(static_cast<size_t>(k), 0.0);
  for (int64_t r = 0; r < x.n; ++r) {
    for (int64_t c = 0; c < k; ++c) x_mean[c] += std::fabs(x.rows[r * k + c]);
  }
  for (double& m : x_mean) m /= static_cast<double>(x.n);
  std::vector<float> ref(static_cast<size_t>(x.n * n));
  kernels::gemm(false, true, x.n, n, k, 1.0f, x.rows.data(), k, w.data(), k, 0.0f, ref.data(), n);
  std::vector<float> best, s(static_cast<size_t>(k)), scaled(w.size());
  double best_loss = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kGrid; ++i) {
    const double alpha = static_cast<double>(i) / kGrid;
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (int64_t c = 0; c < k; ++c) {
      s[c] = static_cast<float>(std::max(std::pow(x_mean[c], alpha), 1e-4));
      lo = std::min(lo, static_cast<double>(s[c])), hi = std::max(hi, static_cast<double>(s[c]));
    }
    const float norm = static_cast<float>(std::sqrt(lo * hi));
    for (float& v : s) v = std::isfinite(v / norm) ? v / norm : 1.0f;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) scaled[r * k + c] = w[r * k + c] * s[c];
    }
    std::vector<float> q = dequantize(quantize_rtn(scaled.data(), n, k, group_size, zero_min));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) q[r * k + c] /= s[c];
    }
    const double loss = output_mse(x, ref, q, n);
    if (i == 0) report.rtn_loss = loss;
    if (loss < best_loss) best_loss = loss, best = s, report.alpha = alpha;
  }
  report.loss = best_loss;
  if (best.empty()) best.assign(static_cast<size_t>(k), 1.0f);  // every loss not finite: leave the group as is
  return best;
}

}  // namespace

StatusOr<AwqResult> awq_scale(const std::string& model_dir, const std::vector<std::vector<int32_t>>& prompts,
                              int64_t group_size, int zero_min, const std::function<void(const std::string&)>& progress) {
  if (prompts.empty()) return invalid_argument("--method awq needs calibration prompts (--data FILE.jsonl)");
  ASSIGN_OR_RETURN(const nlohmann::json config_json, read_json_file(model_dir + "/config.json"));
  ASSIGN_OR_RETURN(const LlamaConfig config, parse_llama_config(config_json, model_dir + "/config.json"));
  if (config.num_experts > 0) {  // before loading anything
    return unimplemented("--method awq on a Mixtral (its router shares the MLP's input) is not written yet; use rtn");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load(model_dir));
  const LlamaConfig& c = model->config();
  // The activations of every layer's four sites over the prompts (the f32 model's, as AutoAWQ's search uses).
  const int64_t layers = c.num_hidden_layers;
  std::vector<Site> sites(static_cast<size_t>(layers * 4));
  const LlamaActivationCallback capture = [&](int64_t layer, LlamaActivation site, const float* rows, int64_t n,
                                              int64_t width) {
    Site& s = sites[static_cast<size_t>(layer * 4 + static_cast<int>(site))];
    const int64_t take = std::min(n, kAwqRowsMax - s.n);
    s.width = width;
    s.rows.insert(s.rows.end(), rows, rows + take * width);
    s.n += take;
  };
  LlamaForwardExtras extras;
  extras.activations = &capture;
  for (size_t p = 0; p < prompts.size() && sites[0].n < kAwqRowsMax; ++p) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(prompts[p].size()), model->max_length());
    if (n == 0) continue;
    ASSIGN_OR_RETURN(LlamaKvCache cache, model->new_cache(n));
    const Status s = model->forward(prompts[p].data(), n, cache, nullptr, nullptr, extras);
    if (!s.ok()) return s.with_context("calibration prompt " + std::to_string(p + 1));
  }
  if (sites[0].n == 0) return invalid_argument("--method awq: the calibration prompts are empty");

  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  AwqResult result;
  auto tensor = [&](const std::string& name) -> StatusOr<std::vector<float>*> {
    auto it = result.tensors.find(name);
    if (it != result.tensors.end()) return &it->second;
    const TensorInfo* info = store->find(name);
    if (info == nullptr) return not_found(name + ": missing");
    std::vector<float> f(static_cast<size_t>(info->numel()));
    if (!convert_to_f32(info->dtype, info->data, f.data(), info->numel())) {
      return unimplemented(name + ": dtype " + dtype_name(info->dtype) + " cannot be quantised (f32, f16, bf16)");
    }
    return &result.tensors.emplace(name, std::move(f)).first->second;
  };
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<Group> groups = {
        {LlamaActivation::kAttnInput,
         {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
         p + "input_layernorm.weight"},
        {LlamaActivation::kMlpInput, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
         p + "post_attention_layernorm.weight"},
        {LlamaActivation::kMlpHidden, {p + "mlp.down_proj.weight"}, p + "mlp.up_proj.weight", true},
    };
    if (c.kv_size() == c.hidden_size && c.q_size() == c.hidden_size) {  // AutoAWQ: v_proj and o_proj of one shape
      groups.push_back({LlamaActivation::kAttnOutput, {p + "self_attn.o_proj.weight"}, p + "self_attn.v_proj.weight",
                        true});
    }
    // Search every group on the original weights, then fold.
    std::vector<std::vector<float>> scales;
    std::string line = "awq: layer " + std::to_string(l + 1) + "/" + std::to_string(layers) + ":";
    for (const Group& g : groups) {
      const Site& x = sites[static_cast<size_t>(l * 4 + static_cast<int>(g.site))];
      std::vector<float> stacked;
      int64_t n = 0;
      for (const std::string& name : g.linears) {
        ASSIGN_OR_RETURN(std::vector<float>* w, tensor(name));
        stacked.insert(stacked.end(), w->begin(), w->end());
        n += static_cast<int64_t>(w->size()) / x.width;
      }
      AwqGroupReport report;
      std::string names;  // "q_proj,k_proj,v_proj"
      for (const std::string& w : g.linears) {
        const std::string module = w.substr(0, w.rfind('.'));
        if (!names.empty()) names += ',';
        names.append(module, module.rfind('.') + 1);
      }
      report.linears = "model.layers." + std::to_string(l) + ".";
      report.linears += names;
      const int64_t gs = group_size == -1 ? x.width : group_size;
      scales.push_back(search_scale(x, stacked, n, gs, zero_min, report));
      char buf[96];
      std::snprintf(buf, sizeof(buf), " %s alpha %.2f (mse %.3g, rtn %.3g)", names.c_str(), report.alpha, report.loss,
                    report.rtn_loss);
      line += buf;
      result.groups.push_back(std::move(report));
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      const std::vector<float>& s = scales[i];
      const int64_t k = static_cast<int64_t>(s.size());
      for (const std::string& name : g.linears) {
        ASSIGN_OR_RETURN(std::vector<float>* w, tensor(name));
        for (size_t j = 0; j < w->size(); ++j) (*w)[j] *= s[j % k];
      }
      ASSIGN_OR_RETURN(std::vector<float>* prev, tensor(g.prev));
      const int64_t width = static_cast<int64_t>(prev->size()) / k;  // 1 for a norm
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t j = 0; j < width; ++j) (*prev)[r * width + j] /= s[r];
      }
      const std::string bias = g.prev.substr(0, g.prev.size() - std::string("weight").size()) + "bias";
      if (g.prev_is_linear && store->find(bias) != nullptr) {
        ASSIGN_OR_RETURN(std::vector<float>* b, tensor(bias));
        for (int64_t r = 0; r < k; ++r) (*b)[r] /= s[r];
      }
    }
    if (progress) progress(line);
  }
  return result;
}

}  // namespace mmserve::models
