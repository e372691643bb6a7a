// The Llama family of decoder-only transformers, one forward for the HF architectures that share it:
// LlamaForCausalLM (Llama 2, 3, 3.1, 3.2), MistralForCausalLM (sliding-window attention), Qwen2ForCausalLM (q/k/v
// biases), Qwen3ForCausalLM (per-head RMSNorm on q and k, an explicit head_dim) and MixtralForCausalLM (Mistral's
// attention, a sparse mixture-of-experts MLP). Each block is HF's modeling_llama.py: x += o_proj(attention(rope(q),
// rope(k), v)) over RMSNorm(x); x += down(silu(gate) * up) over RMSNorm(x); grouped-query attention when
// num_key_value_heads < num_attention_heads; logits from lm_head or, tied, from embed_tokens. Mixtral's MLP
// (modeling_mixtral.py): the router's softmax over all experts in f32, the top num_experts_per_tok renormalised, each
// token through its experts' w2(silu(w1 x) * w3 x), the outputs summed by weight (kernels/moe: the tokens grouped
// by expert, one GEMM per expert).
//
// Config: transformers 4.x keys (`rope_theta`, `rope_scaling` with `type` or `rope_type`) and 5.x
// (`rope_parameters` {rope_type, rope_theta, factor, ...}) are both read; rope types default, linear, dynamic and
// llama3 are computed (kernels/rope.h), others (yarn, longrope, ...) are kUnimplemented naming the type.
// Weights of any stored dtype (f32, f16, bf16; sharded) are checked against the table for the architecture
// (all problems reported at once) and upcast to f32: the CPU path computes in f32. W4A16 checkpoints (AWQ GEMM,
// GPTQ v1/v2: config.json's quantization_config) have their linears dequantised to f32 at load (models/quant); FP8
// checkpoints too, their linears' inputs quantised and dequantised in the forward as an FP8 engine's (set_linear_inputs).
// The forward is one engine step over a paged KV pool (forward_step: models/common/decoder_step.h, the sequences
// of a continuous batch, prefill chunks and decode tokens mixed); forward() is the same for one sequence with a
// cache of its own (LlamaKvCache: one block as long as the sequence), which the conformance tests use.
// Tests: tests/conformance/llama_stories_test.cpp (llama2.c's stories260K converted by `mmserve convert-llama2c`:
// greedy text equal to run.c's), tests/unit/models/llama_model_test.cpp (config keys, broken checkpoints).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/rope/rope.h"
#include "models/common/decoder_step.h"
#include "models/common/weight_table.h"

namespace mmserve::models {

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;  // hidden_size / num_attention_heads unless given (Qwen3)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  kernels::RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;      // Qwen2: q/k/v have biases; Llama: attention_bias (q/k/v and o)
  bool o_bias = false;        // Llama's attention_bias
  bool mlp_bias = false;      // Llama's mlp_bias
  bool qk_norm = false;       // Qwen3
  int64_t sliding_window = 0;  // Mistral, Mixtral (0: none)
  int64_t num_experts = 0;     // Mixtral's num_local_experts (0: a dense MLP)
  int64_t experts_per_token = 0;  // Mixtral's num_experts_per_tok
  int64_t bos_token_id = 1;
  std::vector<int64_t> eos_token_ids = {2};

  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
};

// config.json's object; `label` prefixes errors (kInvalidArgument for wrong types or values, kUnimplemented for
// architectures, activations and rope types not supported).
StatusOr<LlamaConfig> parse_llama_config(const nlohmann::json& json, const std::string& label);

// Where a checkpoint keeps the decoder's tensors: "model." + "layers.N..." and "lm_head.weight" for a
// *ForCausalLM; LLaVA nests them (models/llava: language_model.model. or model.language_model.).
struct LlamaWeightNames {
  std::string model = "model.";
  std::string lm_head = "lm_head.weight";
};

// Mixtral's routing of one step, for SPEC 4.4's per-token traces and the expert-load metrics: per layer and token
// row, the chosen experts (descending weight) and their weights: [layers, tokens, k].
struct MoeRoutingTrace {
  int64_t layers = 0, tokens = 0, k = 0;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// The inputs of a layer's linears, named as the forward computes them (STYLE.md: every activation can be dumped):
// what `mmserve quantize --method awq` calibrates on (models/quant/awq.h).
enum class LlamaActivation {
  kAttnInput,   // input_layernorm's output: q/k/v_proj's input [n, hidden]
  kAttnOutput,  // attention's output: o_proj's input [n, q_size]
  kMlpInput,    // post_attention_layernorm's output: gate/up_proj's (or the router's) input [n, hidden]
  kMlpHidden,   // silu(gate) * up: down_proj's input [n, intermediate] (dense MLPs only)
};
// Called with the step's rows [n, width] of `site` in `layer`, during the forward (the rows are gone after).
using LlamaActivationCallback =
    std::function<void(int64_t layer, LlamaActivation site, const float* rows, int64_t n, int64_t width)>;

// A transform of a linear's input before its GEMM, x [rows, cols] -> out (same shape), by module name
// ("model.layers.0.self_attn.q_proj", "lm_head"): FP8 checkpoints quantise and dequantise each linear's input as an
// FP8 engine does (models/quant/fp8_checkpoint.h). Linears without an entry take their input as is.
using LinearInputFn = std::function<void(const float* x, int64_t rows, int64_t cols, float* out)>;
using LinearInputTransforms = std::map<std::string, LinearInputFn>;

// What LlamaModel::forward may also take or give: input embeddings for some rows (as DecoderStep's embed_rows /
// embeds), Mixtral's routing, and the linears' inputs.
struct LlamaForwardExtras {
  std::vector<int32_t> embed_rows;  // rows of this call's tokens, ascending
  const float* embeds = nullptr;    // [embed_rows.size(), hidden]
  MoeRoutingTrace* routing = nullptr;
  const LlamaActivationCallback* activations = nullptr;
};

// The paged KV pool of the CPU path: per layer, [num_blocks * block_size, kv_size] f32 for K and for V (slot s of
// layer l at (l * slots + s) * kv_size), the layout of kernels/paged_attention.h.
// The memory comes from calloc: pages nobody writes stay unbacked, so a large pool costs what is used.
struct LlamaKvPool {
  int64_t num_blocks = 0, block_size = 16, layers = 0, kv_size = 0;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> k, v;
  int64_t slots() const { return num_blocks * block_size; }
  int64_t bytes() const { return 2 * layers * slots() * kv_size * static_cast<int64_t>(sizeof(float)); }
  float* k_layer(int64_t l) { return k.get() + l * slots() * kv_size; }
  float* v_layer(int64_t l) { return v.get() + l * slots() * kv_size; }
};

// One sequence's own cache: a pool of one block of `capacity` slots; `length` tokens written.
struct LlamaKvCache {
  int64_t length = 0, capacity = 0;
  LlamaKvPool pool;
};

class LlamaModel {
 public:
  static StatusOr<std::unique_ptr<LlamaModel>> load(const std::string& model_dir);
  // The decoder over weights loaded by a model that embeds it (LLaVA): `weights` holds llama_weight_specs(config,
  // names), checked by the caller.
  static std::unique_ptr<LlamaModel> from_weights(const LlamaConfig& config, std::shared_ptr<const F32Weights> weights,
                                                  const LlamaWeightNames& names);
  // The linears' input transforms (replacing any set before); load() sets those of an FP8 checkpoint.
  void set_linear_inputs(LinearInputTransforms transforms);
  const LlamaConfig& config() const { return config_; }
  size_t weight_bytes() const { return weights_->bytes(); }

  // The longest sequence: max_position_embeddings (dynamic NTK RoPE: factor times the original length).
  int64_t max_length() const;
  // An empty cache for up to `capacity` tokens (at most max_length()).
  StatusOr<LlamaKvCache> new_cache(int64_t capacity) const;
  // A zeroed pool of num_blocks blocks of block_size slots; kInvalidArgument for sizes that are not positive.
  StatusOr<LlamaKvPool> new_pool(int64_t num_blocks, int64_t block_size) const;
  // Bytes of K and V one token takes in the pool (all layers), for sizing pools from a byte budget.
  int64_t kv_bytes_per_token() const { return 2 * config_.num_hidden_layers * config_.kv_size() * 4; }

  // One engine step: writes the K/V of step.tokens into their slots and the logits of step.logit_rows into
  // `logits` [logit_rows, vocab]. kInvalidArgument for ids outside the vocabulary, positions past max_length(),
  // tables or slots outside the pool (checked before anything is written). Rows in step.embed_rows take their input
  // embedding from step.embeds instead of embed_tokens (LLaVA's image features). A Mixtral fills `routing` when
  // it is non-null; `activations`, when non-null, sees each layer's linear inputs.
  Status forward_step(const DecoderStep& step, LlamaKvPool& pool, float* logits, MoeRoutingTrace* routing = nullptr,
                      const LlamaActivationCallback* activations = nullptr) const;
  // Appends tokens[0, n) to the sequence in `cache` (positions cache.length ...). Writes the logits of the last
  // token to `last_logits` [vocab] when non-null, and of every token to `all_logits` [n, vocab] when non-null.
  // kInvalidArgument for ids outside the vocabulary or a cache too small (nothing is written then).
  Status forward(const int32_t* tokens, int64_t n, LlamaKvCache& cache, float* last_logits,
                 float* all_logits = nullptr, const LlamaForwardExtras& extras = {}) const;
  // The router's embedding (models/lora/gate_head.h): the mean over the prompt of the decoder's input rows, each
  // token's embed_tokens row or, at embed_rows (ascending), the given rows of `embeds` (LLaVA's image features).
  StatusOr<std::vector<float>> mean_input_embedding(const std::vector<int32_t>& tokens,
                                                    const std::vector<int32_t>& embed_rows = {},
                                                    const float* embeds = nullptr) const;
  // Plain greedy decoding (argmax of the raw logits, ties to the lowest id) of up to max_new_tokens after the
  // prompt, stopping after an eos id unless ignore_eos. Returns the generated ids only.
  StatusOr<std::vector<int32_t>> greedy(const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                        bool ignore_eos = false) const;

 private:
  struct Layer {
    Tensor input_norm, post_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm, gate, up, down,
        gate_bias, up_bias, down_bias;
    Tensor router;                           // Mixtral: [experts, hidden]
    std::vector<Tensor> w1, w2, w3;          // Mixtral: per expert gate [i, h], down [h, i], up [i, h]
    const LinearInputFn *q_in = nullptr, *k_in = nullptr, *v_in = nullptr, *o_in = nullptr, *gate_in = nullptr,
                        *up_in = nullptr, *down_in = nullptr;  // linear_inputs_' entries, or null
  };
  LlamaModel() = default;
  void bind_weights();

  // Mixtral's sparse MLP over the step's rows of `normed` (llama_moe.cpp); `lora`: the step has adapters.
  void moe_mlp(const Layer& w, int64_t layer, const DecoderStep& step, bool lora, const float* normed, float* x,
               int32_t* ids, float* weights) const;

  LlamaConfig config_;
  LlamaWeightNames names_;
  std::shared_ptr<const F32Weights> weights_;
  std::vector<Layer> layers_;
  Tensor embed_, final_norm_, lm_head_;
  LinearInputTransforms linear_inputs_;
  const LinearInputFn* lm_head_in_ = nullptr;
  std::vector<float> inv_freq_;  // every rope type but dynamic (which depends on the sequence's length)
};

// The weight table of a Llama-family checkpoint for `c` (HF names; Mixtral's experts in the hub's per-expert names,
// block_sparse_moe.experts.E.w1/w2/w3, which transformers 5.17's save_pretrained also writes).
std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& c, const LlamaWeightNames& names = {});

}  // namespace mmserve::models
