// LlamaModel (see llama.h): config reading, the weight table, and the forward of modeling_llama.py / modeling_mistral.py
// / modeling_qwen2.py / modeling_qwen3.py / modeling_mixtral.py, written out once with the differences as flags.
#include "models/llama/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/json_config.h"
#include "models/lora/lora_adapter.h"
#include "models/lora/lora_step.h"
#include "models/quant/quant_load.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/moe.h"
#include "kernels/paged_attention/paged_attention.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/swiglu/swiglu.h"

namespace mmserve::models {
namespace {

// model_type of each architecture, for configs that give only one of the two.
constexpr std::pair<const char*, const char*> kArchitectures[] = {{"LlamaForCausalLM", "llama"},
                                                                  {"MistralForCausalLM", "mistral"},
                                                                  {"Qwen2ForCausalLM", "qwen2"},
                                                                  {"Qwen3ForCausalLM", "qwen3"},
                                                                  {"MixtralForCausalLM", "mixtral"}};

// The rope settings: transformers 5's `rope_parameters`, else 4.x's `rope_theta` + `rope_scaling` (which names its
// type `type` in older files, `rope_type` in newer ones).
Status parse_rope(const nlohmann::json& root, const JsonObject& o, const std::string& label, LlamaConfig& c) {
  const nlohmann::json* scaling = nullptr;
  std::string where;
  if (root.contains("rope_parameters") && root["rope_parameters"].is_object()) {
    scaling = &root["rope_parameters"];
    where = label + ".rope_parameters";
    ASSIGN_OR_RETURN(JsonObject p, JsonObject::wrap(*scaling, where));
    ASSIGN_OR_RETURN(c.rope_theta, p.get_double_or("rope_theta", c.rope_theta));
  } else {
    ASSIGN_OR_RETURN(c.rope_theta, o.get_double_or("rope_theta", c.rope_theta));
    if (root.contains("rope_scaling") && !root["rope_scaling"].is_null()) {
      scaling = &root["rope_scaling"];
      where = label + ".rope_scaling";
    }
  }
  if (!(c.rope_theta > 0)) return invalid_argument(label + ": rope_theta must be positive");
  if (scaling == nullptr) return ok_status();
  ASSIGN_OR_RETURN(JsonObject s, JsonObject::wrap(*scaling, where));
  ASSIGN_OR_RETURN(std::string type, s.get_string_or("rope_type", ""));
  if (type.empty()) {
    ASSIGN_OR_RETURN(type, s.get_string_or("type", "default"));
  }
  if (type != "default" && type != "linear" && type != "dynamic" && type != "llama3") {
    return unimplemented(where + ": rope type '" + type + "' is not supported (default, linear, dynamic, llama3)");
  }
  c.rope_scaling.type = type;
  ASSIGN_OR_RETURN(c.rope_scaling.factor, s.get_double_or("factor", 1.0));
  ASSIGN_OR_RETURN(c.rope_scaling.low_freq_factor, s.get_double_or("low_freq_factor", 1.0));
  ASSIGN_OR_RETURN(c.rope_scaling.high_freq_factor, s.get_double_or("high_freq_factor", 4.0));
  ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                   s.get_int_or("original_max_position_embeddings", c.max_position_embeddings));
  if (type != "default" && !(c.rope_scaling.factor >= 1.0)) {
    return invalid_argument(where + ".factor must be >= 1 for rope type '" + type + "'");
  }
  if (type == "llama3" && !(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor)) {
    return invalid_argument(where + ": high_freq_factor must be above low_freq_factor");
  }
  return ok_status();
}

}  // namespace

StatusOr<LlamaConfig> parse_llama_config(const nlohmann::json& json, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject o, JsonObject::wrap(json, label));
  LlamaConfig c;
  std::string arch, model_type;
  if (json.contains("architectures") && json["architectures"].is_array() && !json["architectures"].empty() &&
      json["architectures"][0].is_string()) {
    arch = json["architectures"][0].get<std::string>();
  }
  ASSIGN_OR_RETURN(model_type, o.get_string_or("model_type", ""));
  for (const auto& [a, t] : kArchitectures) {
    if (arch.empty() && model_type == t) arch = a;
  }
  bool known = false;
  for (const auto& [a, t] : kArchitectures) known = known || arch == a;
  if (!known) {
    return unimplemented(label + ": architecture '" + (arch.empty() ? model_type : arch) +
                         "' is not a Llama-family decoder (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                         "Qwen3ForCausalLM, MixtralForCausalLM)");
  }
  c.architecture = arch;
  ASSIGN_OR_RETURN(c.vocab_size, o.get_int_or("vocab_size", c.vocab_size));
  ASSIGN_OR_RETURN(c.hidden_size, o.get_int_or("hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.intermediate_size, o.get_int_or("intermediate_size", c.intermediate_size));
  ASSIGN_OR_RETURN(c.num_hidden_layers, o.get_int_or("num_hidden_layers", c.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads, o.get_int_or("num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.num_key_value_heads, o.get_int_or("num_key_value_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings, o.get_int_or("max_position_embeddings", c.max_position_embeddings));
  ASSIGN_OR_RETURN(c.rms_norm_eps, o.get_double_or("rms_norm_eps", c.rms_norm_eps));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, o.get_bool_or("tie_word_embeddings", false));
  for (auto [key, value] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                            {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                            {"num_attention_heads", c.num_attention_heads},
                            {"num_key_value_heads", c.num_key_value_heads},
                            {"max_position_embeddings", c.max_position_embeddings}}) {
    if (value <= 0 || value > (int64_t{1} << 31)) return invalid_argument(label + "." + key + " must be positive");
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (o.has("head_dim")) {
    ASSIGN_OR_RETURN(c.head_dim, o.get_int("head_dim"));
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || (!o.has("head_dim") && c.hidden_size % c.num_attention_heads != 0)) {
    return invalid_argument(label + ": head_dim (" + std::to_string(c.head_dim) +
                            ") must be even and divide the hidden size evenly among the heads");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return invalid_argument(label + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                            ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
                            ")");
  }
  ASSIGN_OR_RETURN(std::string act, o.get_string_or("hidden_act", "silu"));
  if (act != "silu") return unimplemented(label + ".hidden_act: '" + act + "' is not supported (silu)");
  RETURN_IF_ERROR(parse_rope(json, o, label, c));
  ASSIGN_OR_RETURN(bool attention_bias, o.get_bool_or("attention_bias", false));
  ASSIGN_OR_RETURN(c.mlp_bias, o.get_bool_or("mlp_bias", false));
  if (arch == "LlamaForCausalLM") c.qkv_bias = c.o_bias = attention_bias;
  if (arch == "Qwen2ForCausalLM") c.qkv_bias = true;  // Qwen2Attention: bias on q/k/v, none on o
  if (arch == "Qwen3ForCausalLM") {
    c.qkv_bias = c.o_bias = attention_bias;
    c.qk_norm = true;
  }
  if (arch == "MixtralForCausalLM") {
    ASSIGN_OR_RETURN(c.num_experts, o.get_int_or("num_local_experts", 8));
    ASSIGN_OR_RETURN(c.experts_per_token, o.get_int_or("num_experts_per_tok", 2));
    if (c.num_experts <= 0 || c.num_experts > 4096) {
      return invalid_argument(label + ".num_local_experts must be in 1..4096");
    }
    if (c.experts_per_token <= 0 || c.experts_per_token > std::min(c.num_experts, kernels::kMoeMaxTopK)) {
      return invalid_argument(label + ".num_experts_per_tok must be in 1..min(num_local_experts, " +
                              std::to_string(kernels::kMoeMaxTopK) + ")");
    }
  }
  if ((arch == "MistralForCausalLM" || arch == "MixtralForCausalLM") && o.has("sliding_window")) {
    ASSIGN_OR_RETURN(c.sliding_window, o.get_int("sliding_window"));
    if (c.sliding_window <= 0) return invalid_argument(label + ".sliding_window must be positive or null");
  }
  if (arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM") {
    ASSIGN_OR_RETURN(bool sliding, o.get_bool_or("use_sliding_window", false));
    if (sliding) return unimplemented(label + ".use_sliding_window: per-layer sliding windows are not supported");
  }
  ASSIGN_OR_RETURN(c.bos_token_id, o.get_int_or("bos_token_id", c.bos_token_id));
  if (json.contains("eos_token_id")) {
    const nlohmann::json& eos = json["eos_token_id"];
    c.eos_token_ids.clear();
    if (eos.is_number_integer()) c.eos_token_ids.push_back(eos.get<int64_t>());
    if (eos.is_array()) {
      for (const nlohmann::json& e : eos) {
        if (!e.is_number_integer()) return invalid_argument(label + ".eos_token_id must hold integers");
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    }
    if (!eos.is_null() && c.eos_token_ids.empty() && !eos.is_array()) {
      return invalid_argument(label + ".eos_token_id must be an integer or a list of integers");
    }
  }
  return c;
}

std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& c, const LlamaWeightNames& names) {
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  std::vector<WeightSpec> specs = {{names.model + "embed_tokens.weight", {c.vocab_size, h}},
                                   {names.model + "norm.weight", {h}}};
  // A tied checkpoint may still carry lm_head (HF writes it for some models): allowed, unused.
  specs.push_back({names.lm_head, {c.vocab_size, h}, c.tie_word_embeddings});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = names.model + "layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", {h}});
    specs.push_back({p + "post_attention_layernorm.weight", {h}});
    specs.push_back({p + "self_attn.q_proj.weight", {q, h}});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    specs.push_back({p + "self_attn.o_proj.weight", {h, q}});
    if (c.qkv_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {q}});
      specs.push_back({p + "self_attn.k_proj.bias", {kv}});
      specs.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.o_bias) specs.push_back({p + "self_attn.o_proj.bias", {h}});
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    if (c.num_experts > 0) {
      specs.push_back({p + "block_sparse_moe.gate.weight", {c.num_experts, h}});
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        specs.push_back({x + "w1.weight", {i, h}});
        specs.push_back({x + "w2.weight", {h, i}});
        specs.push_back({x + "w3.weight", {i, h}});
      }
      continue;
    }
    specs.push_back({p + "mlp.gate_proj.weight", {i, h}});
    specs.push_back({p + "mlp.up_proj.weight", {i, h}});
    specs.push_back({p + "mlp.down_proj.weight", {h, i}});
    if (c.mlp_bias) {
      specs.push_back({p + "mlp.gate_proj.bias", {i}});
      specs.push_back({p + "mlp.up_proj.bias", {i}});
      specs.push_back({p + "mlp.down_proj.bias", {h}});
    }
  }
  return specs;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& model_dir) {
  const std::string config_path = model_dir + "/config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  ASSIGN_OR_RETURN(model->config_, parse_llama_config(json, config_path));
  // A W4A16 checkpoint (AWQ, GPTQ) stores its linears packed: models/quant dequantises them to f32.
  ASSIGN_OR_RETURN(const QuantConfig quant, parse_quant_config(json, config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  ASSIGN_OR_RETURN(const QuantizedWeightPlan plan, plan_quantized_weights(quant, llama_weight_specs(model->config_)));
  WeightCheckOptions check;
  check.ignored_suffixes = {"rotary_emb.inv_freq"};  // a buffer older checkpoints carry
  for (const std::string& s : plan.tolerated_suffixes) check.ignored_suffixes.push_back(s);  // FP8's scales
  RETURN_IF_ERROR(check_weights(*store, plan.stored, check).with_context(model_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<F32Weights> weights, F32Weights::load(*store, plan.floats));
  Fp8Inputs fp8_inputs;  // FP8: each linear's input quantisation
  RETURN_IF_ERROR(dequantize_linears(*store, quant, plan, *weights, &fp8_inputs).with_context(model_dir));
  model->weights_ = std::move(weights);
  model->bind_weights();
  model->set_linear_inputs(fp8_input_transforms(fp8_inputs));
  return model;
}

std::unique_ptr<LlamaModel> LlamaModel::from_weights(const LlamaConfig& config,
                                                     std::shared_ptr<const F32Weights> weights,
                                                     const LlamaWeightNames& names) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  model->config_ = config;
  model->names_ = names;
  model->weights_ = std::move(weights);
  model->bind_weights();
  return model;
}

void LlamaModel::bind_weights() {
  const LlamaConfig& c = config_;
  auto get = [&](const std::string& name) { return weights_->has(name) ? weights_->get(name) : Tensor(); };
  embed_ = get(names_.model + "embed_tokens.weight");
  final_norm_ = get(names_.model + "norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : get(names_.lm_head);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = names_.model + "layers." + std::to_string(l) + ".";
    Layer w;
    w.input_norm = get(p + "input_layernorm.weight");
    w.post_norm = get(p + "post_attention_layernorm.weight");
    w.q = get(p + "self_attn.q_proj.weight");
    w.k = get(p + "self_attn.k_proj.weight");
    w.v = get(p + "self_attn.v_proj.weight");
    w.o = get(p + "self_attn.o_proj.weight");
    w.q_bias = get(p + "self_attn.q_proj.bias");
    w.k_bias = get(p + "self_attn.k_proj.bias");
    w.v_bias = get(p + "self_attn.v_proj.bias");
    w.o_bias = get(p + "self_attn.o_proj.bias");
    w.q_norm = get(p + "self_attn.q_norm.weight");
    w.k_norm = get(p + "self_attn.k_norm.weight");
    w.gate = get(p + "mlp.gate_proj.weight");
    w.up = get(p + "mlp.up_proj.weight");
    w.down = get(p + "mlp.down_proj.weight");
    w.gate_bias = get(p + "mlp.gate_proj.bias");
    w.up_bias = get(p + "mlp.up_proj.bias");
    w.down_bias = get(p + "mlp.down_proj.bias");
    if (c.num_experts > 0) {
      w.router = get(p + "block_sparse_moe.gate.weight");
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        w.w1.push_back(get(x + "w1.weight"));
        w.w2.push_back(get(x + "w2.weight"));
        w.w3.push_back(get(x + "w3.weight"));
      }
    }
    layers_.push_back(w);
  }
  if (c.rope_scaling.type != "dynamic") {
    inv_freq_ = kernels::rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling, c.max_position_embeddings);
  }
}

void LlamaModel::set_linear_inputs(LinearInputTransforms transforms) {
  linear_inputs_ = std::move(transforms);
  auto find = [&](const std::string& module) {
    const auto it = linear_inputs_.find(module);
    return it == linear_inputs_.end() ? nullptr : &it->second;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string p = names_.model + "layers." + std::to_string(l) + ".";
    Layer& w = layers_[l];
    w.q_in = find(p + "self_attn.q_proj"), w.k_in = find(p + "self_attn.k_proj"), w.v_in = find(p + "self_attn.v_proj");
    w.o_in = find(p + "self_attn.o_proj"), w.gate_in = find(p + "mlp.gate_proj"), w.up_in = find(p + "mlp.up_proj");
    w.down_in = find(p + "mlp.down_proj");
  }
  lm_head_in_ = find(names_.lm_head.substr(0, names_.lm_head.rfind('.')));
}

int64_t LlamaModel::max_length() const {
  // Dynamic NTK scaling exists to run past the trained length: up to factor times it.
  const LlamaConfig& c = config_;
  if (c.rope_scaling.type == "dynamic") {
    return static_cast<int64_t>(static_cast<double>(c.rope_scaling.original_max_position_embeddings) *
                                c.rope_scaling.factor);
  }
  return c.max_position_embeddings;
}

StatusOr<LlamaKvPool> LlamaModel::new_pool(int64_t num_blocks, int64_t block_size) const {
  if (num_blocks <= 0 || block_size <= 0 || num_blocks * block_size > (int64_t{1} << 31)) {
    return invalid_argument("a KV pool of " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                            " slots");
  }
  LlamaKvPool pool;
  pool.num_blocks = num_blocks;
  pool.block_size = block_size;
  pool.layers = config_.num_hidden_layers;
  pool.kv_size = config_.kv_size();
  const size_t n = static_cast<size_t>(pool.layers * pool.slots() * pool.kv_size);
  pool.k.reset(static_cast<float*>(std::calloc(n, sizeof(float))));
  pool.v.reset(static_cast<float*>(std::calloc(n, sizeof(float))));
  if (pool.k == nullptr || pool.v == nullptr) {
    return resource_exhausted("a KV pool of " + std::to_string(2 * n * sizeof(float)) + " bytes");
  }
  return pool;
}

StatusOr<LlamaKvCache> LlamaModel::new_cache(int64_t capacity) const {
  if (capacity <= 0 || capacity > max_length()) {
    return invalid_argument("a KV cache of " + std::to_string(capacity) + " tokens (the model takes 1.." +
                            std::to_string(max_length()) + ")");
  }
  LlamaKvCache cache;
  cache.capacity = capacity;
  ASSIGN_OR_RETURN(cache.pool, new_pool(1, capacity));
  return cache;
}

Status LlamaModel::forward(const int32_t* tokens, int64_t n, LlamaKvCache& cache, float* last_logits,
                           float* all_logits, const LlamaForwardExtras& extras) const {
  if (n <= 0) return invalid_argument("forward needs at least one token");
  if (cache.pool.layers != config_.num_hidden_layers || cache.pool.kv_size != config_.kv_size()) {
    return invalid_argument("the KV cache was made for another model");
  }
  if (cache.length + n > cache.capacity) {
    return invalid_argument("the sequence would reach " + std::to_string(cache.length + n) +
                            " tokens; its KV cache holds " + std::to_string(cache.capacity));
  }
  // One sequence whose one block is the whole cache.
  DecoderStep step;
  step.tokens.assign(tokens, tokens + n);
  for (int64_t t = 0; t < n; ++t) {
    step.positions.push_back(static_cast<int32_t>(cache.length + t));
    step.slots.push_back(static_cast<int32_t>(cache.length + t));
  }
  step.query_start = {0, static_cast<int32_t>(n)};
  step.seq_lens = {static_cast<int32_t>(cache.length + n)};
  step.block_tables = {0};
  step.table_ld = 1;
  step.max_seq_len = cache.length + n;
  step.max_query_len = n;
  const int64_t first = all_logits != nullptr ? 0 : n - 1;
  for (int64_t t = first; t < n; ++t) step.logit_rows.push_back(static_cast<int32_t>(t));
  step.embed_rows = extras.embed_rows;
  step.embeds = extras.embeds;
  std::vector<float> logits(static_cast<size_t>((n - first) * config_.vocab_size));
  RETURN_IF_ERROR(forward_step(step, cache.pool, logits.data(), extras.routing, extras.activations));
  cache.length += n;
  if (all_logits != nullptr) std::memcpy(all_logits, logits.data(), logits.size() * sizeof(float));
  if (last_logits != nullptr) {
    std::memcpy(last_logits, logits.data() + (n - 1 - first) * config_.vocab_size, config_.vocab_size * sizeof(float));
  }
  return ok_status();
}

namespace {

// The step's arrays against each other and the pool, before anything is written.
Status check_step(const DecoderStep& step, const LlamaKvPool& pool, const LlamaConfig& c, int64_t max_length) {
  const int64_t t = step.num_tokens(), s = step.num_seqs();
  if (t <= 0 || s <= 0) return invalid_argument("a decoder step needs at least one token");
  if (static_cast<int64_t>(step.positions.size()) != t || static_cast<int64_t>(step.slots.size()) != t ||
      static_cast<int64_t>(step.query_start.size()) != s + 1 || step.table_ld <= 0 ||
      static_cast<int64_t>(step.block_tables.size()) != s * step.table_ld || step.query_start.back() != t) {
    return invalid_argument("a decoder step's arrays disagree in length");
  }
  if (pool.layers != c.num_hidden_layers || pool.kv_size != c.kv_size()) {
    return invalid_argument("the KV pool was made for another model");
  }
  if ((!step.loras.empty() && static_cast<int64_t>(step.loras.size()) != s) ||
      (!step.loras_second.empty() && step.loras_second.size() != step.loras.size()) ||
      (!step.lora_weights.empty() && static_cast<int64_t>(step.lora_weights.size()) != 2 * s)) {
    return invalid_argument("a decoder step's adapters disagree with its sequences");
  }
  for (const std::vector<const LoraAdapter*>* adapters : {&step.loras_second, &step.loras}) {
    for (const LoraAdapter* a : *adapters) {
      if (a != nullptr && static_cast<int64_t>(a->layers.size()) != c.num_hidden_layers) {
        return invalid_argument("adapter '" + a->name + "' was loaded for another model");
      }
      if (a != nullptr && !a->holds_f32()) {  // packed for a GPU model at load: the forward below reads a/b
        return invalid_argument("adapter '" + a->name + "' was loaded for a GPU model (it holds no f32 matrices)");
      }
      for (size_t l = 0; a != nullptr && l < a->experts.size(); ++l) {  // expert_module(l, p, e) for e < num_experts
        for (const std::vector<LoraModule>& modules : a->experts[l]) {
          if (!modules.empty() && static_cast<int64_t>(modules.size()) != c.num_experts) {
            return invalid_argument("adapter '" + a->name + "' was loaded for another model (its experts)");
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < t; ++i) {
    if (step.tokens[i] < 0 || step.tokens[i] >= c.vocab_size) {
      return invalid_argument("token id " + std::to_string(step.tokens[i]) + " is outside the vocabulary (size " +
                              std::to_string(c.vocab_size) + ")");
    }
    if (step.positions[i] < 0 || step.positions[i] >= max_length) {
      return invalid_argument("position " + std::to_string(step.positions[i]) + " is past the model's length (" +
                              std::to_string(max_length) + ")");
    }
    if (step.slots[i] < 0 || step.slots[i] >= pool.slots()) {
      return invalid_argument("slot " + std::to_string(step.slots[i]) + " is outside the KV pool");
    }
  }
  for (int32_t row : step.logit_rows) {
    if (row < 0 || row >= t) return invalid_argument("a logit row outside the step's tokens");
  }
  for (size_t i = 0; i < step.embed_rows.size(); ++i) {
    if (step.embed_rows[i] < 0 || step.embed_rows[i] >= t || (i > 0 && step.embed_rows[i] <= step.embed_rows[i - 1])) {
      return invalid_argument("embed_rows must be ascending rows of the step's tokens");
    }
  }
  if (!step.embed_rows.empty() && step.embeds == nullptr) return invalid_argument("embed_rows without embeds");
  return ok_status();  // tables and lengths: paged_attention_cpu checks them
}

}  // namespace

Status LlamaModel::forward_step(const DecoderStep& step, LlamaKvPool& pool, float* logits, MoeRoutingTrace* routing,
                                const LlamaActivationCallback* activations) const {
  const LlamaConfig& c = config_;
  RETURN_IF_ERROR(check_step(step, pool, c, max_length()));
  const int64_t n = step.num_tokens(), h = c.hidden_size, qs = c.q_size(), kvs = c.kv_size();
  // Dynamic NTK scaling depends on the sequence's length (HF recomputes its frequencies per forward): one set of
  // frequencies per sequence then.
  std::vector<std::vector<float>> dynamic_freq;
  if (c.rope_scaling.type == "dynamic") {
    for (int64_t s = 0; s < step.num_seqs(); ++s) {
      dynamic_freq.push_back(kernels::rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling,
                                                    c.rope_scaling.original_max_position_embeddings,
                                                    step.seq_lens[s]));
    }
  }
  auto rope = [&](float* x, int64_t ld, int64_t heads) {
    if (dynamic_freq.empty()) {
      kernels::apply_rope(x, n, ld, heads, c.head_dim, step.positions.data(), inv_freq_.data());
      return;
    }
    for (int64_t s = 0; s < step.num_seqs(); ++s) {
      const int64_t first = step.query_start[s], rows = step.query_start[s + 1] - first;
      kernels::apply_rope(x + first * ld, rows, ld, heads, c.head_dim, step.positions.data() + first,
                          dynamic_freq[s].data());
    }
  };

  std::vector<float> x(static_cast<size_t>(n * h)), normed(x.size()), q(static_cast<size_t>(n * qs)),
      k(static_cast<size_t>(n * kvs)), v(k.size()), attn(q.size()), gate(static_cast<size_t>(n * c.intermediate_size)),
      up(gate.size());
  Tensor xt(x.data(), DType::kF32, {n, h}), normed_t(normed.data(), DType::kF32, {n, h});
  Tensor qt(q.data(), DType::kF32, {n, qs}), attn_t(attn.data(), DType::kF32, {n, qs});
  Tensor kt(k.data(), DType::kF32, {n, kvs}), vt(v.data(), DType::kF32, {n, kvs});
  Tensor gate_t(gate.data(), DType::kF32, {n, c.intermediate_size}), up_t(up.data(), DType::kF32, {n, c.intermediate_size});
  auto bias = [](const Tensor& b) { return b.data() != nullptr ? &b : nullptr; };
  kernels::embedding(embed_, step.tokens.data(), n, xt);
  for (size_t r = 0; r < step.embed_rows.size(); ++r) {  // LLaVA: image features in place of the placeholders
    std::memcpy(x.data() + step.embed_rows[r] * h, step.embeds + r * h, h * sizeof(float));
  }
  const int64_t k_experts = c.experts_per_token;
  std::vector<int32_t> route_ids(static_cast<size_t>(c.num_hidden_layers * n * k_experts));
  std::vector<float> route_weights(route_ids.size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  kernels::PagedAttentionArgs a;
  a.q = q.data(), a.q_ld = qs, a.out = attn.data(), a.out_ld = qs, a.dtype = DType::kF32;
  a.block_tables = step.block_tables.data(), a.block_table_ld = step.table_ld;
  a.seq_lens = step.seq_lens.data(), a.query_start = step.query_start.data();
  a.num_seqs = step.num_seqs(), a.num_tokens = n, a.heads = c.num_attention_heads, a.kv_heads = c.num_key_value_heads;
  a.head_dim = c.head_dim, a.block_size = pool.block_size, a.num_blocks = pool.num_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)), a.window = c.sliding_window;
  a.max_seq_len = step.max_seq_len, a.max_query_len = step.max_query_len;
  kernels::PagedKvWriteArgs write;
  write.k = k.data(), write.v = v.data(), write.src_ld = kvs, write.dtype = DType::kF32;
  write.slot_mapping = step.slots.data(), write.num_tokens = n, write.width = kvs, write.num_slots = pool.slots();
  // LoRA (issue 16): each sequence's adapter's delta on a linear's output, added after the base layer as PEFT does;
  // under gate routing a second adapter's too, each scaled by its weight (models/lora/lora_step.h).
  const bool any_lora = std::any_of(step.loras.begin(), step.loras.end(), [](const LoraAdapter* a) { return a; });
  auto lora = [&](int64_t layer, LoraTarget t, const float* in, int64_t in_ld, float* out, int64_t out_ld) {
    if (!any_lora) return;
    add_lora_deltas(
        step, step.query_start.data(), [&](const LoraAdapter& a) { return &a.module(layer, t); }, in, in_ld, out,
        out_ld);
  };
  auto report = [&](int64_t layer, LlamaActivation site, const float* rows, int64_t width) {
    if (activations != nullptr) (*activations)(layer, site, rows, n, width);
  };
  // A linear's input through its transform (FP8 checkpoints: quantised and back), consumed by the GEMM at once.
  std::vector<float> transformed;
  auto input = [&](const LinearInputFn* f, const Tensor& rows) {
    if (f == nullptr) return rows;
    transformed.resize(static_cast<size_t>(rows.numel()));
    (*f)(rows.data_as<float>(), rows.shape()[0], rows.shape()[1], transformed.data());
    return Tensor(transformed.data(), DType::kF32, rows.shape());
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& w = layers_[static_cast<size_t>(l)];
    kernels::rms_norm(x.data(), h, w.input_norm.data_as<float>(), n, h, eps, normed.data(), h);
    report(l, LlamaActivation::kAttnInput, normed.data(), h);
    kernels::linear(input(w.q_in, normed_t), w.q, bias(w.q_bias), qt);
    kernels::linear(input(w.k_in, normed_t), w.k, bias(w.k_bias), kt);
    kernels::linear(input(w.v_in, normed_t), w.v, bias(w.v_bias), vt);
    lora(l, LoraTarget::kQ, normed.data(), h, q.data(), qs);
    lora(l, LoraTarget::kK, normed.data(), h, k.data(), kvs);
    lora(l, LoraTarget::kV, normed.data(), h, v.data(), kvs);
    if (c.qk_norm) {  // Qwen3: RMSNorm over each head's head_dim values, before the rotation
      kernels::rms_norm(q.data(), c.head_dim, w.q_norm.data_as<float>(), n * c.num_attention_heads, c.head_dim, eps,
                        q.data(), c.head_dim);
      kernels::rms_norm(k.data(), c.head_dim, w.k_norm.data_as<float>(), n * c.num_key_value_heads, c.head_dim, eps,
                        k.data(), c.head_dim);
    }
    rope(q.data(), qs, c.num_attention_heads);
    rope(k.data(), kvs, c.num_key_value_heads);
    // This step's keys and values into their slots, then attention over each sequence's blocks.
    write.k_cache = pool.k_layer(l), write.v_cache = pool.v_layer(l);
    RETURN_IF_ERROR(kernels::paged_kv_write_cpu(write));
    a.k_cache = pool.k_layer(l), a.v_cache = pool.v_layer(l);
    RETURN_IF_ERROR(kernels::paged_attention_cpu(a));
    report(l, LlamaActivation::kAttnOutput, attn.data(), qs);
    kernels::linear(input(w.o_in, attn_t), w.o, bias(w.o_bias), xt, kernels::Activation::kNone, /*accumulate=*/true);
    lora(l, LoraTarget::kO, attn.data(), qs, x.data(), h);
    kernels::rms_norm(x.data(), h, w.post_norm.data_as<float>(), n, h, eps, normed.data(), h);
    report(l, LlamaActivation::kMlpInput, normed.data(), h);
    if (c.num_experts > 0) {
      const size_t at = static_cast<size_t>(l * n * k_experts);
      moe_mlp(w, l, step, any_lora, normed.data(), x.data(), route_ids.data() + at, route_weights.data() + at);
      continue;
    }
    kernels::linear(input(w.gate_in, normed_t), w.gate, bias(w.gate_bias), gate_t);
    kernels::linear(input(w.up_in, normed_t), w.up, bias(w.up_bias), up_t);
    lora(l, LoraTarget::kGate, normed.data(), h, gate.data(), c.intermediate_size);
    lora(l, LoraTarget::kUp, normed.data(), h, up.data(), c.intermediate_size);
    kernels::swiglu(gate.data(), up.data(), c.intermediate_size, n, c.intermediate_size, gate.data(),
                    c.intermediate_size);
    report(l, LlamaActivation::kMlpHidden, gate.data(), c.intermediate_size);
    kernels::linear(input(w.down_in, gate_t), w.down, bias(w.down_bias), xt, kernels::Activation::kNone, /*accumulate=*/true);
    lora(l, LoraTarget::kDown, gate.data(), c.intermediate_size, x.data(), h);
  }
  if (routing != nullptr) {
    routing->layers = c.num_experts > 0 ? c.num_hidden_layers : 0;
    routing->tokens = n, routing->k = k_experts;
    routing->experts = std::move(route_ids);
    routing->weights = std::move(route_weights);
  }
  // Final norm of the rows asked for, then their logits.
  const int64_t rows = static_cast<int64_t>(step.logit_rows.size());
  if (rows == 0) return ok_status();
  for (int64_t r = 0; r < rows; ++r) {
    kernels::rms_norm(x.data() + step.logit_rows[r] * h, h, final_norm_.data_as<float>(), 1, h, eps,
                      normed.data() + r * h, h);
  }
  Tensor in(normed.data(), DType::kF32, {rows, h}), out(logits, DType::kF32, {rows, c.vocab_size});
  kernels::linear(input(lm_head_in_, in), lm_head_, nullptr, out);
  return ok_status();
}

StatusOr<std::vector<float>> LlamaModel::mean_input_embedding(const std::vector<int32_t>& tokens,
                                                             const std::vector<int32_t>& embed_rows,
                                                             const float* embeds) const {
  const int64_t h = config_.hidden_size, n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("the mean input embedding of an empty prompt");
  // f32 sums, in prompt order, as torch's mean over the rows (the column loop vectorises; a double accumulator
  // measured 2x slower at Llama-3-8B's width, docs/perf/lora_cpu.md).
  std::vector<float> out(static_cast<size_t>(h), 0.0f);
  size_t next = 0;  // into embed_rows (ascending)
  for (int64_t p = 0; p < n; ++p) {
    const float* row;
    if (next < embed_rows.size() && embed_rows[next] == p) {
      row = embeds + next * h;
      ++next;
    } else {
      if (tokens[p] < 0 || tokens[p] >= config_.vocab_size) {
        return invalid_argument("token id " + std::to_string(tokens[p]) + " is outside the vocabulary");
      }
      row = embed_.data_as<float>() + static_cast<int64_t>(tokens[p]) * h;
    }
    for (int64_t c = 0; c < h; ++c) out[c] += row[c];
  }
  const float inv = 1.0f / static_cast<float>(n);
  for (float& v : out) v *= inv;
  return out;
}

StatusOr<std::vector<int32_t>> LlamaModel::greedy(const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                                  bool ignore_eos) const {
  if (prompt.empty()) return invalid_argument("greedy decoding needs a prompt (at least the BOS token)");
  const int64_t capacity = std::min<int64_t>(max_length(), static_cast<int64_t>(prompt.size()) + max_new_tokens);
  ASSIGN_OR_RETURN(LlamaKvCache cache, new_cache(capacity));
  std::vector<float> logits(static_cast<size_t>(config_.vocab_size));
  std::vector<int32_t> out;
  RETURN_IF_ERROR(forward(prompt.data(), static_cast<int64_t>(prompt.size()), cache, logits.data()));
  while (static_cast<int64_t>(out.size()) < max_new_tokens) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    const bool eos = std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), next) !=
                     config_.eos_token_ids.end();
    if ((eos && !ignore_eos) || cache.length >= cache.capacity) break;
    RETURN_IF_ERROR(forward(&next, 1, cache, logits.data()));
  }
  return out;
}

}  // namespace mmserve::models
