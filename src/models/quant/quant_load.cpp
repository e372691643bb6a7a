// The weight-table rewrite and dequantisation of W4A16 checkpoints (see quant_load.h).
#include "models/quant/quant_load.h"

#include <algorithm>
#include <cstring>

#include "models/quant/int4_checkpoint.h"

namespace mmserve::models {
namespace {

constexpr const char* kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",    ".w1",
                                    ".w2",              ".w3"};

}  // namespace

bool is_quantizable_linear(const std::string& name, size_t rank) {
  if (rank != 2 || !name.ends_with(".weight") || name.find("layers.") == std::string::npos) return false;
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  return std::any_of(std::begin(kLinears), std::end(kLinears),
                     [&](const char* l) { return module.ends_with(l); });
}

StatusOr<QuantizedWeightPlan> plan_quantized_weights(const QuantConfig& config, const std::vector<WeightSpec>& specs) {
  QuantizedWeightPlan plan;
  for (const WeightSpec& spec : specs) {
    const std::string module = spec.name.substr(0, spec.name.rfind('.'));
    if (!config.quantized() || spec.optional || !is_quantizable_linear(spec.name, spec.shape.size()) ||
        !quant_converts_module(config, module)) {
      plan.stored.push_back(spec);
      plan.floats.push_back(spec);
      continue;
    }
    const int64_t n = spec.shape[0], k = spec.shape[1];
    RETURN_IF_ERROR(check_int4_dims(config, module, n, k));
    for (WeightSpec& s : int4_weight_specs(config, module, n, k)) plan.stored.push_back(std::move(s));
    plan.linears.push_back({module, n, k});
  }
  return plan;
}

Status dequantize_linears(const WeightStore& store, const QuantConfig& config, const QuantizedWeightPlan& plan,
                          F32Weights& weights) {
  for (const QuantizedLinear& l : plan.linears) {
    ASSIGN_OR_RETURN(Int4Weight w, read_int4_linear(store, config, l.prefix, l.n, l.k));
    const std::vector<float> f = dequantize(w);
    Tensor t = weights.add_owned(l.prefix + ".weight", {l.n, l.k});
    std::memcpy(t.data(), f.data(), f.size() * sizeof(float));
  }
  return ok_status();
}

}  // namespace mmserve::models
