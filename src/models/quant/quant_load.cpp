// The weight-table rewrite and dequantisation of W4A16 checkpoints (see quant_load.h).
#include "models/quant/quant_load.h"

#include <algorithm>
#include <cstring>

#include "models/quant/int4_checkpoint.h"

namespace mmserve::models {
namespace {

constexpr const char* kLinears[] = {"self_attn.q_proj",
                                    "self_attn.k_proj",
                                    "self_attn.v_proj",
                                    "self_attn.o_proj",
                                    "mlp.gate_proj",
                                    "mlp.up_proj",
                                    "mlp.down_proj",
                                    ".w1",
                                    ".w2",
                                    ".w3"};

// The linears an FP8 checkpoint may hold in FP8 beyond is_quantizable_linear's: lm_head and Mixtral's router.
bool is_other_linear(const std::string& name, size_t rank) {
  return rank == 2 && (name.ends_with("lm_head.weight") || name.ends_with("block_sparse_moe.gate.weight"));
}

bool is_moe_linear(const std::string& module) {
  return module.find("block_sparse_moe.") != std::string::npos;
}

StatusOr<QuantizedWeightPlan> plan_fp8_weights(const QuantConfig& config, const std::vector<WeightSpec>& specs) {
  QuantizedWeightPlan plan;
  plan.tolerated_suffixes = {".weight_scale", ".input_scale", ".weight_scale_inv"};
  for (const WeightSpec& spec : specs) {
    plan.stored.push_back(spec);
    const std::string module = spec.name.substr(0, spec.name.rfind('.'));
    // lm_head and the router only where compressed-tensors targets them (vLLM's Fp8Config never quantises them).
    bool fp8 = !spec.optional && (is_quantizable_linear(spec.name, spec.shape.size()) ||
                                  (config.compressed_tensors && is_other_linear(spec.name, spec.shape.size())));
    if (fp8) {
      ASSIGN_OR_RETURN(fp8, fp8_converts_module(config, module));
    }
    if (!fp8) {
      plan.floats.push_back(spec);
      continue;
    }
    if (config.fp8_inputs != Fp8InputScale::kNone && is_moe_linear(module)) {
      return unimplemented(module +
                           ": FP8 inputs of Mixtral's experts and router are not simulated on the CPU path "
                           "(weight-only FP8 is read)");
    }
    plan.linears.push_back({module, spec.shape[0], spec.shape[1]});
  }
  return plan;
}

}  // namespace

bool is_quantizable_linear(const std::string& name, size_t rank) {
  if (rank != 2 || !name.ends_with(".weight") || name.find("layers.") == std::string::npos) return false;
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  return std::any_of(std::begin(kLinears), std::end(kLinears), [&](const char* l) { return module.ends_with(l); });
}

StatusOr<QuantizedWeightPlan> plan_quantized_weights(const QuantConfig& config, const std::vector<WeightSpec>& specs) {
  if (config.method == QuantMethod::kFp8) return plan_fp8_weights(config, specs);
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
                          F32Weights& weights, Fp8Inputs* inputs) {
  for (const QuantizedLinear& l : plan.linears) {
    if (config.method == QuantMethod::kFp8) {
      ASSIGN_OR_RETURN(const Fp8Weight w, read_fp8_linear(store, config, l.prefix, l.n, l.k));
      ASSIGN_OR_RETURN(const Fp8InputQuant q, read_fp8_input(store, config, l.prefix));
      const std::vector<float> f = dequantize_fp8(w);
      Tensor t = weights.add_owned(l.prefix + ".weight", {l.n, l.k});
      std::memcpy(t.data(), f.data(), f.size() * sizeof(float));
      if (inputs != nullptr) (*inputs)[l.prefix] = q;
      continue;
    }
    ASSIGN_OR_RETURN(Int4Weight w, read_int4_linear(store, config, l.prefix, l.n, l.k));
    const std::vector<float> f = dequantize(w);
    Tensor t = weights.add_owned(l.prefix + ".weight", {l.n, l.k});
    std::memcpy(t.data(), f.data(), f.size() * sizeof(float));
  }
  return ok_status();
}

}  // namespace mmserve::models
