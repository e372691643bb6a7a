// LlamaCudaModel (see llama_cuda.h): the weight and buffer plan, the upload, and the forward of one step.
#include "models/llama/llama_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cuda/cuda_status.h"
#include "core/json_config.h"
#include "core/safetensors.h"
#include "kernels/gemm/gemm_small_m_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/rms_norm/rms_norm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/swiglu/swiglu_cuda.h"
#include "models/llama/llama_cuda_kernels.h"

namespace mmserve::models {
namespace {

size_t bytes_of(DType d, int64_t n) { return static_cast<size_t>(n) * dtype_size(d); }

}  // namespace

LlamaCudaModel::~LlamaCudaModel() {
  for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
  for (auto& [bucket, exec] : lora_graphs_) cudaGraphExecDestroy(exec);
  if (gemm_workspace_ != nullptr) cudaFree(gemm_workspace_);
}

int64_t LlamaCudaModel::memory_bytes() const {
  return static_cast<int64_t>(weights_.capacity() + buffers_.capacity() + graph_bytes_ +
                              kernels::CublasLtGemm::kDefaultWorkspaceBytes);
}

namespace {

// Mixtral's expert GEMMs: M as it is up to 16 rows (decode: 16 shapes, the skinny ones cuBLASLt runs best exact),
// rounded up to 16 rows up to 64, then to 64 (at most kMoePadRows extra).
constexpr int64_t kMoePadRows = 63;
int64_t padded_rows(int64_t rows) {
  if (rows <= 16) return std::max<int64_t>(rows, 0);
  const int64_t step = rows <= 64 ? 16 : 64;
  return (rows + step - 1) / step * step;
}

}  // namespace

StatusOr<kernels::PagedKvStorage> LlamaCudaModel::kv_storage_for(const LlamaCudaOptions& options) {
  const std::string& name = options.kv_cache_dtype;
  kernels::PagedKvStorage storage = kernels::PagedKvStorage::kSame;
  if (name == "fp8" || name == "fp8_e4m3") {
    storage = kernels::PagedKvStorage::kFp8E4M3;
  } else if (name == "fp8_e5m2") {
    storage = kernels::PagedKvStorage::kFp8E5M2;
  } else if (name != "auto") {
    return invalid_argument("kv_cache_dtype must be auto, fp8, fp8_e4m3 or fp8_e5m2, not '" + name + "'");
  }
  if (storage != kernels::PagedKvStorage::kSame && options.dtype == DType::kF32) {
    return invalid_argument("kv_cache_dtype " + name + " needs bf16 or f16 compute, not f32");
  }
  return storage;
}

StatusOr<int64_t> LlamaCudaModel::kv_block_bytes(const LlamaConfig& config, const LlamaCudaOptions& options) {
  ASSIGN_OR_RETURN(const kernels::PagedKvStorage storage, kv_storage_for(options));
  return 2 * config.num_hidden_layers * options.block_size * config.kv_size() *
         kernels::paged_kv_element_bytes(storage, options.dtype);
}

Status LlamaCudaModel::read_kv_scales(const WeightStore& store, const LlamaWeightNames& names) {
  kv_scales_host_.clear();
  if (kv_storage_ == kernels::PagedKvStorage::kSame) return ok_status();
  std::vector<float> scales;
  int64_t found = 0;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    for (const char* which : {"k_scale", "v_scale"}) {
      const std::string name = names.model + "layers." + std::to_string(l) + ".self_attn." + which;
      const TensorInfo* t = store.find(name);
      float value = 1.0f;
      if (t != nullptr) {
        ++found;
        if (t->numel() != 1 || !convert_to_f32(t->dtype, t->data, &value, 1) || !(value > 0.0f) ||
            !std::isfinite(value)) {
          return invalid_argument(name + ": a KV cache scale must be one positive finite value");
        }
      }
      scales.push_back(value);
    }
  }
  if (found != 0 && found != 2 * config_.num_hidden_layers) {
    return invalid_argument("the checkpoint has " + std::to_string(found) + " of the " +
                            std::to_string(2 * config_.num_hidden_layers) +
                            " self_attn.k_scale / v_scale tensors (all or none)");
  }
  if (found > 0) kv_scales_host_ = std::move(scales);
  return ok_status();
}

Status LlamaCudaModel::init(const LlamaConfig& config, const LlamaCudaOptions& options) {
  config_ = config;
  options_ = options;
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16 && options.dtype != DType::kF32) {
    return invalid_argument(std::string("the Llama family on CUDA computes in bf16, f16 or f32, not ") +
                            dtype_name(options.dtype));
  }
  ASSIGN_OR_RETURN(kv_storage_, kv_storage_for(options));
  if (options.block_size <= 0 || options.max_num_tokens <= 0 || options.max_num_seqs <= 0) {
    return invalid_argument("block_size, max_num_tokens and max_num_seqs must be positive");
  }
  if (config.num_experts > kernels::kMoeCudaMaxExperts) {
    return unimplemented("the CUDA MoE kernels take at most " + std::to_string(kernels::kMoeCudaMaxExperts) +
                         " experts, the model has " + std::to_string(config.num_experts));
  }
  if (config.rope_scaling.type == "dynamic") {
    dynamic_rope_ = true;
    max_model_len_ = static_cast<int64_t>(static_cast<double>(config.rope_scaling.original_max_position_embeddings) *
                                          config.rope_scaling.factor);
  } else {
    max_model_len_ = config.max_position_embeddings;
    inv_freq_ = kernels::rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling,
                                       config.max_position_embeddings);
  }
  if (options.max_model_len > 0) max_model_len_ = std::min(max_model_len_, options.max_model_len);
  table_ld_ = (max_model_len_ + options.block_size - 1) / options.block_size;
  qkv_width_ = config.q_size() + 2 * config.kv_size();
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  RETURN_IF_ERROR(stream_.init());
  CUDA_RETURN_IF_ERROR(cudaMalloc(&gemm_workspace_, kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  ASSIGN_OR_RETURN(gemm_, kernels::CublasLtGemm::create(gemm_workspace_, kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  // Decode buckets: powers of two up to max_num_seqs (and max_num_seqs itself).
  for (int64_t b = 1; b < options.max_num_seqs; b *= 2) buckets_.push_back(b);
  buckets_.push_back(options.max_num_seqs);
  return ok_status();
}

Status LlamaCudaModel::plan_weights() {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  struct Want {
    const void** slot;
    size_t bytes;
    std::vector<std::pair<std::string, int64_t>> parts;  // HF names and their element offsets in the slot
    DType dtype;
  };
  std::vector<Want> wants;
  layers_.assign(static_cast<size_t>(c.num_hidden_layers), Layer());
  auto want = [&](const void** slot, DType dtype, int64_t n, std::vector<std::pair<std::string, int64_t>> parts) {
    wants.push_back({slot, DeviceArena::aligned(bytes_of(dtype, n)), std::move(parts), dtype});
  };
  host_embeddings_ = options_.embeddings_on_host && !c.tie_word_embeddings;  // llama_cuda_embed.cpp
  if (!host_embeddings_) want(&embed_, d, c.vocab_size * h, {{names_.model + "embed_tokens.weight", 0}});
  if (!c.tie_word_embeddings) want(&lm_head_, d, c.vocab_size * h, {{names_.lm_head, 0}});
  want(&final_norm_, d, h, {{names_.model + "norm.weight", 0}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& w = layers_[static_cast<size_t>(l)];
    const std::string p = names_.model + "layers." + std::to_string(l) + ".";
    if (!gemm_quantized(l, kQkvGemm)) {  // else packed by upload_w4a16 (llama_cuda_quant.cpp)
      want(&w.qkv, d, qkv_width_ * h,
           {{p + "self_attn.q_proj.weight", 0}, {p + "self_attn.k_proj.weight", q * h},
            {p + "self_attn.v_proj.weight", (q + kv) * h}});
    }
    if (c.qkv_bias) {
      want(&w.qkv_bias, d, qkv_width_,
           {{p + "self_attn.q_proj.bias", 0}, {p + "self_attn.k_proj.bias", q}, {p + "self_attn.v_proj.bias", q + kv}});
    }
    if (!gemm_quantized(l, kOGemm)) want(&w.o, d, h * q, {{p + "self_attn.o_proj.weight", 0}});
    if (c.o_bias) want(reinterpret_cast<const void**>(&w.o_bias), DType::kF32, h, {{p + "self_attn.o_proj.bias", 0}});
    if (c.num_experts > 0) {
      const int64_t e_count = c.num_experts;
      std::vector<std::pair<std::string, int64_t>> w13, w2;
      for (int64_t e = 0; e < e_count; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        w13.push_back({x + "w1.weight", e * 2 * i * h});
        w13.push_back({x + "w3.weight", e * 2 * i * h + i * h});
        w2.push_back({x + "w2.weight", e * h * i});
      }
      want(&w.router, d, e_count * h, {{p + "block_sparse_moe.gate.weight", 0}});
      want(&w.w13, d, e_count * 2 * i * h, std::move(w13));
      want(&w.w2, d, e_count * h * i, std::move(w2));
      want(&w.input_norm, d, h, {{p + "input_layernorm.weight", 0}});
      want(&w.post_norm, d, h, {{p + "post_attention_layernorm.weight", 0}});
      continue;
    }
    if (!gemm_quantized(l, kGateUpGemm)) {
      want(&w.gate_up, d, 2 * i * h, {{p + "mlp.gate_proj.weight", 0}, {p + "mlp.up_proj.weight", i * h}});
    }
    if (c.mlp_bias) {
      want(&w.gate_up_bias, d, 2 * i, {{p + "mlp.gate_proj.bias", 0}, {p + "mlp.up_proj.bias", i}});
      want(reinterpret_cast<const void**>(&w.down_bias), DType::kF32, h, {{p + "mlp.down_proj.bias", 0}});
    }
    if (!gemm_quantized(l, kDownGemm)) want(&w.down, d, h * i, {{p + "mlp.down_proj.weight", 0}});
    want(&w.input_norm, d, h, {{p + "input_layernorm.weight", 0}});
    want(&w.post_norm, d, h, {{p + "post_attention_layernorm.weight", 0}});
    if (c.qk_norm) {
      want(&w.q_norm, d, c.head_dim, {{p + "self_attn.q_norm.weight", 0}});
      want(&w.k_norm, d, c.head_dim, {{p + "self_attn.k_norm.weight", 0}});
    }
  }
  size_t total = w4a16_planned_bytes_ + fp8_planned_bytes_;  // packed 4-bit / FP8 weights, after the dense ones
  for (const Want& w : wants) total += w.bytes;
  RETURN_IF_ERROR(weights_.init(total));
  weight_slots_.clear();
  for (const Want& w : wants) {
    ASSIGN_OR_RETURN(void* p, weights_.allocate(w.bytes));
    *w.slot = p;
    for (const auto& [name, offset] : w.parts) {
      weight_slots_.emplace_back(name, static_cast<uint8_t*>(p) + bytes_of(w.dtype, offset));
    }
  }
  if (c.tie_word_embeddings) lm_head_ = embed_;
  return ok_status();
}

Status LlamaCudaModel::upload(const WeightStore& store) {
  // Biases that write the f32 residual stream are f32; everything else is the compute dtype.
  auto dtype_of = [&](const std::string& name) {
    const bool f32_bias = name.find("o_proj.bias") != std::string::npos || name.find("down_proj.bias") != std::string::npos;
    return f32_bias ? DType::kF32 : options_.dtype;
  };
  std::vector<float> f32;
  std::vector<uint16_t> half;
  for (const auto& [name, dst] : weight_slots_) {
    const TensorInfo* t = store.find(name);
    if (t == nullptr) return invalid_argument("the checkpoint has no " + name);  // check_weights ran before
    const DType target = dtype_of(name);
    const int64_t n = t->numel();
    if (t->dtype == target) {
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, t->data, t->nbytes, cudaMemcpyHostToDevice));
      continue;
    }
    f32.resize(static_cast<size_t>(n));
    if (!convert_to_f32(t->dtype, t->data, f32.data(), n)) {
      return unimplemented(name + ": stored as " + dtype_name(t->dtype) + " (f32, f16 or bf16 are read)");
    }
    if (target == DType::kF32) {
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, f32.data(), f32.size() * 4, cudaMemcpyHostToDevice));
      continue;
    }
    half.resize(f32.size());
    for (size_t k = 0; k < f32.size(); ++k) half[k] = target == DType::kBF16 ? f32_to_bf16(f32[k]) : f32_to_f16(f32[k]);
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, half.data(), half.size() * 2, cudaMemcpyHostToDevice));
  }
  if (host_embeddings_) return upload_host_embeddings(store);  // llama_cuda_embed.cpp
  return ok_status();
}

Status LlamaCudaModel::randomise(uint64_t seed) {
  cudaStream_t s = stream_.get();
  uint64_t k = seed;
  for (const auto& [name, dst] : weight_slots_) {
    const bool norm = name.find("norm") != std::string::npos;
    const bool f32_bias = name.find("o_proj.bias") != std::string::npos || name.find("down_proj.bias") != std::string::npos;
    int64_t n = 0;
    // Element counts from the spec table.
    for (const WeightSpec& spec : llama_weight_specs(config_, names_)) {
      if (spec.name == name) {
        n = 1;
        for (int64_t dim : spec.shape) n *= dim;
      }
    }
    RETURN_IF_ERROR(fill_weights(dst, f32_bias ? DType::kF32 : options_.dtype, n, ++k, norm ? 0.0f : 0.02f, 1.0f, s));
  }
  if (host_embeddings_) randomise_host_embeddings(seed);
  return stream_.synchronize();
}

Status LlamaCudaModel::plan_buffers() {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  const int64_t t = options_.max_num_tokens, s = options_.max_num_seqs, h = c.hidden_size;
  kernels::PagedAttentionArgs bound;
  bound.dtype = d, bound.num_seqs = s, bound.num_tokens = std::max(t, s), bound.heads = c.num_attention_heads;
  bound.kv_heads = c.num_key_value_heads, bound.head_dim = c.head_dim, bound.block_size = options_.block_size;
  bound.max_seq_len = max_model_len_, bound.max_query_len = std::max(t, s);
  // The split-K decode partitions by the step's sequence count (fewer sequences, more partitions): the workspace
  // must hold the largest need over every count up to the bound, not the bound's alone.
  attn_workspace_bytes_ = 0;
  for (int64_t n = 1; n <= s; ++n) {
    bound.num_seqs = n;
    attn_workspace_bytes_ = std::max(attn_workspace_bytes_, kernels::paged_attention_cuda_workspace_bytes(bound));
  }
  bound.num_seqs = s;
  const int64_t rows = std::max(t, s);  // a decode bucket may exceed the token budget
  const int64_t half_dim = c.head_dim / 2;
  const std::vector<size_t> sizes = {
      bytes_of(DType::kF32, rows * h), bytes_of(d, rows * h), bytes_of(d, rows * qkv_width_),
      bytes_of(d, rows * c.q_size()), bytes_of(d, rows * 2 * c.intermediate_size), bytes_of(d, rows * c.intermediate_size),
      bytes_of(DType::kF32, s * h), bytes_of(DType::kF32, s * c.vocab_size), attn_workspace_bytes_,
      bytes_of(DType::kI32, StepArrays::ints(rows, rows, table_ld_)), bytes_of(DType::kF32, (s + 1) * half_dim)};
  std::vector<size_t> all = sizes;
  all.push_back(bytes_of(DType::kF32, 2 * c.num_hidden_layers));  // the KV cache's scales (FP8 pools read them)
  w4a16_workspace_bytes_ = w4a16_workspace_need(rows);  // W4A16 (llama_cuda_quant.cpp); none for 16-bit weights
  // FP8 (llama_cuda_fp8.cpp): a GEMM's quantised input, [rows, K] codes.
  for (size_t b : {w4a16_workspace_bytes_, w4a16_scratch_need(rows), static_cast<size_t>(rows * fp8_input_k())}) {
    if (b > 0) all.push_back(b);
  }
  if (host_embeddings_) {  // the step's embedding rows and the identity ids (llama_cuda_embed.cpp)
    all.push_back(bytes_of(d, rows * h));
    all.push_back(bytes_of(DType::kI32, rows));
  }
  const int64_t e_count = c.num_experts;
  const int64_t pairs = rows * std::max<int64_t>(c.experts_per_token, 1) + (e_count > 0 ? kMoePadRows : 0);
  if (e_count > 0) {  // Mixtral: the router's logits, the routing, the plan and the pairs' activations
    for (size_t b : {bytes_of(DType::kF32, rows * e_count), bytes_of(DType::kI32, c.num_hidden_layers * pairs),
                     bytes_of(DType::kF32, c.num_hidden_layers * pairs),
                     bytes_of(DType::kI32, e_count + 1), bytes_of(DType::kI32, pairs), bytes_of(DType::kI32, pairs),
                     bytes_of(d, pairs * h), bytes_of(d, pairs * 2 * c.intermediate_size),
                     bytes_of(d, pairs * c.intermediate_size), bytes_of(DType::kF32, pairs * h),
                     bytes_of(DType::kI32, 2 * kernels::moe_grouped_gemm_tiles(pairs, e_count, 32))}) {
      all.push_back(b);
    }
  }
  // LoRA: the slots' matrices, ranks and scales, the rows' slots and the shrink's workspace.
  const int64_t loras = options_.max_loras, r_max = lora_slot_rank(), layers = c.num_hidden_layers;
  if (loras > 0) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (c.num_experts > 0 && t >= static_cast<int>(LoraTarget::kGate)) continue;  // Mixtral: no dense MLP
      const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
      all.push_back(bytes_of(d, loras * layers * r_max * in));
      all.push_back(bytes_of(d, loras * layers * out * r_max));
    }
    for (size_t b : {bytes_of(DType::kI32, loras * layers * kLoraTargets), bytes_of(DType::kF32, loras * layers * kLoraTargets),
                     bytes_of(DType::kI32, 4 * rows), bytes_of(DType::kF32, lora_workspace_floats(rows))}) {
      all.push_back(b);
    }
  }
  size_t buffer_bytes = 0;
  for (size_t b : all) buffer_bytes += DeviceArena::aligned(b) + DeviceArena::kAlignment;
  for (int64_t b : buckets_) {
    buffer_bytes += DeviceArena::aligned(bytes_of(DType::kI32, StepArrays::ints(b, b, table_ld_))) + DeviceArena::kAlignment;
  }
  // The pool: what is asked for, else the memory share left after weights and buffers.
  ASSIGN_OR_RETURN(const int64_t per_block, kv_block_bytes(c, options_));  // an FP8 pool's blocks take half
  int64_t blocks = options_.num_blocks;
  if (blocks <= 0 && options_.kv_cache_bytes > 0) blocks = options_.kv_cache_bytes / per_block;
  if (blocks <= 0) {
    size_t free = 0, total = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
    const double budget = options_.memory_utilization * static_cast<double>(total) -
                          static_cast<double>(total - free) - static_cast<double>(buffer_bytes) -
                          512.0 * (1 << 20);  // graphs, cuBLAS, the sampler
    blocks = static_cast<int64_t>(std::max(0.0, budget) / static_cast<double>(per_block));
  }
  if (blocks < table_ld_) {
    return resource_exhausted("the KV pool holds " + std::to_string(blocks) + " blocks of " +
                              std::to_string(options_.block_size) + " tokens; one sequence of max_model_len " +
                              std::to_string(max_model_len_) + " needs " + std::to_string(table_ld_) +
                              " (lower max_model_len or raise kv_cache_bytes / gpu_memory_utilization)");
  }
  num_blocks_ = blocks;
  pool_bytes_ = blocks * per_block;
  RETURN_IF_ERROR(buffers_.init(buffer_bytes + 2 * DeviceArena::aligned(static_cast<size_t>(pool_bytes_ / 2))));
  ASSIGN_OR_RETURN(x_, buffers_.allocate_array<float>(rows * h));
  ASSIGN_OR_RETURN(normed_, buffers_.allocate(bytes_of(d, rows * h)));
  ASSIGN_OR_RETURN(qkv_, buffers_.allocate(bytes_of(d, rows * qkv_width_)));
  ASSIGN_OR_RETURN(attn_, buffers_.allocate(bytes_of(d, rows * c.q_size())));
  ASSIGN_OR_RETURN(gate_up_, buffers_.allocate(bytes_of(d, rows * 2 * c.intermediate_size)));
  ASSIGN_OR_RETURN(act_, buffers_.allocate(bytes_of(d, rows * c.intermediate_size)));
  ASSIGN_OR_RETURN(gathered_, buffers_.allocate_array<float>(s * h));
  ASSIGN_OR_RETURN(logits_, buffers_.allocate_array<float>(s * c.vocab_size));
  if (attn_workspace_bytes_ > 0) {
    ASSIGN_OR_RETURN(attn_workspace_, buffers_.allocate(attn_workspace_bytes_));
    CUDA_RETURN_IF_ERROR(cudaMemset(attn_workspace_, 0, attn_workspace_bytes_));  // its completion counters
  }
  // The step arrays: one block for eager steps (laid out for the largest step) and one per decode bucket, each
  // in the staging buffer's layout, so that a decode step's arrays go up in one copy.
  ASSIGN_OR_RETURN(int32_t * eager, buffers_.allocate_array<int32_t>(StepArrays::ints(rows, rows, table_ld_)));
  eager_arrays_ = StepArrays::at(eager, rows, rows);
  for (int64_t b : buckets_) {
    ASSIGN_OR_RETURN(int32_t * block, buffers_.allocate_array<int32_t>(StepArrays::ints(b, b, table_ld_)));
    bucket_arrays_[b] = StepArrays::at(block, b, b);
  }
  arrays_ = eager_arrays_;
  ASSIGN_OR_RETURN(d_inv_freq_, buffers_.allocate_array<float>((s + 1) * half_dim));
  if (w4a16_workspace_bytes_ > 0) {  // W4A16 (llama_cuda_quant.cpp): split-K partials / the dequantised weight
    ASSIGN_OR_RETURN(w4a16_workspace_, buffers_.allocate(w4a16_workspace_bytes_));
    CUDA_RETURN_IF_ERROR(cudaMemset(w4a16_workspace_, 0, kernels::kW4A16WorkspaceZeroBytes));  // split-K counters
  }
  if (w4a16_scratch_need(rows) > 0) {  // linear by linear GEMMs' rows before their copy into the fused row
    ASSIGN_OR_RETURN(w4a16_scratch_, buffers_.allocate(w4a16_scratch_need(rows)));
  }
  if (fp8_input_k() > 0) {  // FP8 (llama_cuda_fp8.cpp): a GEMM's quantised input
    ASSIGN_OR_RETURN(void* q, buffers_.allocate(static_cast<size_t>(rows * fp8_input_k())));
    fp8_input_ = static_cast<uint8_t*>(q);
  }
  if (host_embeddings_) RETURN_IF_ERROR(allocate_host_embedding_buffers(rows));
  if (e_count > 0) {
    ASSIGN_OR_RETURN(router_logits_, buffers_.allocate_array<float>(rows * e_count));
    ASSIGN_OR_RETURN(moe_ids_, buffers_.allocate_array<int32_t>(c.num_hidden_layers * pairs));
    ASSIGN_OR_RETURN(moe_weights_, buffers_.allocate_array<float>(c.num_hidden_layers * pairs));
    ASSIGN_OR_RETURN(moe_offsets_, buffers_.allocate_array<int32_t>(e_count + 1));
    ASSIGN_OR_RETURN(moe_pair_, buffers_.allocate_array<int32_t>(pairs));
    ASSIGN_OR_RETURN(moe_row_of_, buffers_.allocate_array<int32_t>(pairs));
    ASSIGN_OR_RETURN(moe_xp_, buffers_.allocate(bytes_of(d, pairs * h)));
    ASSIGN_OR_RETURN(moe_gate_up_, buffers_.allocate(bytes_of(d, pairs * 2 * c.intermediate_size)));
    ASSIGN_OR_RETURN(moe_act_, buffers_.allocate(bytes_of(d, pairs * c.intermediate_size)));
    ASSIGN_OR_RETURN(moe_yp_, buffers_.allocate_array<float>(pairs * h));
    ASSIGN_OR_RETURN(moe_tile_map_,
                     buffers_.allocate_array<int32_t>(2 * kernels::moe_grouped_gemm_tiles(pairs, e_count, 32)));
    RETURN_IF_ERROR(moe_host_offsets_.init(bytes_of(DType::kI32, e_count + 1)));
  }
  if (loras > 0) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (c.num_experts > 0 && t >= static_cast<int>(LoraTarget::kGate)) continue;
      const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
      ASSIGN_OR_RETURN(lora_a_[t], buffers_.allocate(bytes_of(d, loras * layers * r_max * in)));
      ASSIGN_OR_RETURN(lora_b_[t], buffers_.allocate(bytes_of(d, loras * layers * out * r_max)));
    }
    ASSIGN_OR_RETURN(lora_ranks_, buffers_.allocate_array<int32_t>(loras * layers * kLoraTargets));
    ASSIGN_OR_RETURN(lora_scales_, buffers_.allocate_array<float>(loras * layers * kLoraTargets));
    // Rows' slots and weights, first and second adapter (gate routing's mix): [4, rows] words, one H2D copy each.
    ASSIGN_OR_RETURN(lora_row_slot_, buffers_.allocate_array<int32_t>(4 * rows));
    lora_rows_ = rows;
    lora_t_floats_ = lora_workspace_floats(rows);
    ASSIGN_OR_RETURN(lora_t_, buffers_.allocate_array<float>(lora_t_floats_));
    CUDA_RETURN_IF_ERROR(cudaMemset(lora_ranks_, 0, bytes_of(DType::kI32, loras * layers * kLoraTargets)));
    CUDA_RETURN_IF_ERROR(cudaMemset(lora_row_slot_, 0xff, bytes_of(DType::kI32, 2 * rows)));  // -1: no adapter
    RETURN_IF_ERROR(lora_host_rows_.init(bytes_of(DType::kI32, 4 * rows)));
    lora_slots_.assign(static_cast<size_t>(loras), LoraSlot{});
    RETURN_IF_ERROR(lora_copy_stream_.init());  // adapter uploads, beside the steps
  }
  ASSIGN_OR_RETURN(k_pool_, buffers_.allocate(static_cast<size_t>(pool_bytes_ / 2)));
  ASSIGN_OR_RETURN(v_pool_, buffers_.allocate(static_cast<size_t>(pool_bytes_ / 2)));
  CUDA_RETURN_IF_ERROR(cudaMemset(k_pool_, 0, static_cast<size_t>(pool_bytes_ / 2)));
  CUDA_RETURN_IF_ERROR(cudaMemset(v_pool_, 0, static_cast<size_t>(pool_bytes_ / 2)));
  {  // per layer (K scale, V scale): the checkpoint's, else 1.0
    std::vector<float> scales = kv_scales_host_;
    scales.resize(static_cast<size_t>(2 * c.num_hidden_layers), 1.0f);
    ASSIGN_OR_RETURN(kv_scales_, buffers_.allocate_array<float>(2 * c.num_hidden_layers));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(kv_scales_, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
  }
  CUDA_RETURN_IF_ERROR(cudaMemset(arrays_.tables, 0, bytes_of(DType::kI32, rows * table_ld_)));
  for (const auto& [b, a] : bucket_arrays_) {
    CUDA_RETURN_IF_ERROR(cudaMemset(a.tokens, 0, bytes_of(DType::kI32, StepArrays::ints(b, b, table_ld_))));
  }
  if (!inv_freq_.empty()) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(d_inv_freq_, inv_freq_.data(), inv_freq_.size() * 4, cudaMemcpyHostToDevice));
  }
  // Staging for the step's arrays (pinned: the copies are asynchronous).
  RETURN_IF_ERROR(staging_.init(bytes_of(DType::kI32, rows * (6 + table_ld_) + 1) +
                                bytes_of(DType::kF32, (s + 1) * half_dim)));
  return ok_status();
}

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::load(const std::string& model_dir,
                                                               const LlamaCudaOptions& options) {
  const std::string config_path = model_dir + "/config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  ASSIGN_OR_RETURN(LlamaConfig config, parse_llama_config(json, config_path));
  ASSIGN_OR_RETURN(const QuantConfig quant, parse_quant_config(json, config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  if (quant.method == QuantMethod::kFp8) return load_fp8(model_dir, *store, config, quant, options);  // llama_cuda_fp8.cpp
  if (quant.quantized()) return load_w4a16(model_dir, *store, config, quant, options);  // llama_cuda_quant.cpp
  WeightCheckOptions check;
  // FP8 KV cache scales (read by read_kv_scales when the pool is FP8, ignored otherwise, as vLLM does).
  check.ignored_suffixes = {"rotary_emb.inv_freq", "self_attn.k_scale", "self_attn.v_scale"};
  RETURN_IF_ERROR(check_weights(*store, llama_weight_specs(config), check).with_context(model_dir));
  return load_decoder(*store, config, LlamaWeightNames{}, options);
}

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::load_decoder(const WeightStore& store,
                                                                       const LlamaConfig& config,
                                                                       const LlamaWeightNames& names,
                                                                       const LlamaCudaOptions& options) {
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  m->names_ = names;
  RETURN_IF_ERROR(m->init(config, options));
  RETURN_IF_ERROR(m->plan_weights());
  RETURN_IF_ERROR(m->upload(store));
  RETURN_IF_ERROR(m->read_kv_scales(store, names));
  RETURN_IF_ERROR(m->plan_buffers());
  if (options.graphs) RETURN_IF_ERROR(m->capture_graphs());
  return m;
}

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::random(const LlamaConfig& config,
                                                                 const LlamaCudaOptions& options, uint64_t seed) {
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  RETURN_IF_ERROR(m->init(config, options));
  RETURN_IF_ERROR(m->plan_weights());
  RETURN_IF_ERROR(m->randomise(seed));
  RETURN_IF_ERROR(m->plan_buffers());
  if (options.graphs) RETURN_IF_ERROR(m->capture_graphs());
  return m;
}

int64_t LlamaCudaModel::bucket_for(int64_t seqs) const {
  for (int64_t b : buckets_) {
    if (b >= seqs) return b;
  }
  return -1;
}

Status LlamaCudaModel::stage(const DecoderStep& step, int64_t rows) {
  const int64_t n = step.num_seqs(), t = step.num_tokens(), r = static_cast<int64_t>(step.logit_rows.size());
  const int64_t tokens = std::max(t, rows), seqs = std::max(n, rows);
  RETURN_IF_ERROR(stream_.synchronize());  // the previous step's copies out of the staging buffer are done
  int32_t* h = staging_.data_as<int32_t>();
  // Layout in the pinned buffer: tokens, positions, slots, logit rows [tokens], query_start [seqs + 1],
  // seq_lens [seqs], tables [seqs, table_ld]; padding rows (a decode bucket larger than the step) write nowhere
  // and attend to one key of block 0.
  const StepArrays host = StepArrays::at(h, tokens, seqs);
  int32_t *tok = host.tokens, *pos = host.positions, *slot = host.slots, *lrow = host.logit_rows;
  int32_t *qs = host.query_start, *lens = host.seq_lens, *tab = host.tables;
  std::copy(step.tokens.begin(), step.tokens.end(), tok);
  std::copy(step.positions.begin(), step.positions.end(), pos);
  std::copy(step.slots.begin(), step.slots.end(), slot);
  std::copy(step.logit_rows.begin(), step.logit_rows.end(), lrow);
  std::copy(step.query_start.begin(), step.query_start.end(), qs);
  std::copy(step.seq_lens.begin(), step.seq_lens.end(), lens);
  for (int64_t i = t; i < tokens; ++i) tok[i] = 0, pos[i] = 0, slot[i] = -1;
  for (int64_t i = r; i < tokens; ++i) lrow[i] = static_cast<int32_t>(i);
  for (int64_t i = n; i < seqs; ++i) qs[i + 1] = qs[i] + 1, lens[i] = 1;
  if (step.table_ld != table_ld_) return invalid_argument("a step's block tables are not table_ld wide");
  std::copy(step.block_tables.begin(), step.block_tables.end(), tab);
  std::fill(tab + n * table_ld_, tab + seqs * table_ld_, 0);
  if (host_embeddings_) RETURN_IF_ERROR(stage_embeddings(tok, tokens));  // llama_cuda_embed.cpp
  cudaStream_t s = stream_.get();
  auto copy = [&](int32_t* dst, const int32_t* src, int64_t count) {
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * 4, cudaMemcpyHostToDevice, s);
  };
  auto bucket = rows > 0 ? bucket_arrays_.find(rows) : bucket_arrays_.end();
  if (bucket != bucket_arrays_.end()) {  // a decode bucket: its arrays in one copy
    arrays_ = bucket->second;
    CUDA_RETURN_IF_ERROR(copy(arrays_.tokens, tok, StepArrays::ints(rows, rows, table_ld_)));
    return ok_status();
  }
  arrays_ = eager_arrays_;
  CUDA_RETURN_IF_ERROR(copy(arrays_.tokens, tok, tokens));
  CUDA_RETURN_IF_ERROR(copy(arrays_.positions, pos, tokens));
  CUDA_RETURN_IF_ERROR(copy(arrays_.slots, slot, tokens));
  CUDA_RETURN_IF_ERROR(copy(arrays_.logit_rows, lrow, tokens));
  CUDA_RETURN_IF_ERROR(copy(arrays_.query_start, qs, seqs + 1));
  CUDA_RETURN_IF_ERROR(copy(arrays_.seq_lens, lens, seqs));
  CUDA_RETURN_IF_ERROR(copy(arrays_.tables, tab, seqs * table_ld_));
  if (dynamic_rope_) {  // one row of frequencies per sequence, after row 0
    const int64_t half_dim = config_.head_dim / 2;
    float* f = reinterpret_cast<float*>(tab + seqs * table_ld_);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<float> freq = kernels::rope_inv_freq(config_.head_dim, config_.rope_theta, config_.rope_scaling,
                                                             config_.rope_scaling.original_max_position_embeddings,
                                                             step.seq_lens[i]);
      std::copy(freq.begin(), freq.end(), f + i * half_dim);
    }
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_inv_freq_ + half_dim, f, static_cast<size_t>(n * half_dim) * 4,
                                         cudaMemcpyHostToDevice, s));
  }
  return ok_status();
}

Status LlamaCudaModel::launch(int64_t tokens, int64_t seqs, int64_t logit_rows, int64_t max_query_len) {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  cudaStream_t s = stream_.get();
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto gemm = [&](const void* a, int64_t lda, const void* w, int64_t n, int64_t k, void* out, DType out_dtype,
                  const void* bias, float beta, int64_t m) {
    kernels::GemmCudaArgs g;
    g.m = m, g.n = n, g.k = k, g.a = a, g.lda = lda, g.w = w, g.ldw = k, g.in_dtype = d;
    g.d = out, g.ldd = n, g.out_dtype = out_dtype, g.bias = bias, g.beta = beta;
    return gemm_->run(g, s);
  };
  auto norm = [&](const void* x, DType x_dtype, int64_t x_ld, const void* weight, void* y, int64_t y_ld, int64_t rows,
                  int64_t cols, int64_t segments) {
    kernels::RmsNormArgs a;
    a.x = x, a.x_dtype = x_dtype, a.x_ld = x_ld, a.weight = weight, a.y = y, a.y_dtype = d, a.y_ld = y_ld;
    a.rows = rows, a.cols = cols, a.segments = segments, a.eps = eps;
    return kernels::rms_norm_cuda(a, s);
  };
  RETURN_IF_ERROR(gather_embeddings(tokens, s));  // from embed_, or the staged rows (embeddings_on_host)
  if (eager_step_ != nullptr && !eager_step_->embed_rows.empty()) {
    // LLaVA: the placeholder rows take the image features (f32, as the residual stream): one copy per run of
    // consecutive rows (an image's placeholders are one run).
    const std::vector<int32_t>& rows = eager_step_->embed_rows;
    for (size_t i = 0; i < rows.size();) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(x_ + static_cast<int64_t>(rows[i]) * h, eager_step_->embeds + i * h,
                                           (j - i) * h * sizeof(float), cudaMemcpyHostToDevice, s));
      i = j;
    }
  }
  kernels::PagedAttentionArgs pa;
  pa.q = qkv_, pa.q_ld = qkv_width_, pa.out = attn_, pa.out_ld = q, pa.dtype = d;
  pa.block_tables = arrays_.tables, pa.block_table_ld = table_ld_, pa.seq_lens = arrays_.seq_lens;
  pa.query_start = arrays_.query_start, pa.num_seqs = seqs, pa.num_tokens = tokens;
  pa.heads = c.num_attention_heads, pa.kv_heads = c.num_key_value_heads, pa.head_dim = c.head_dim;
  pa.block_size = options_.block_size, pa.num_blocks = num_blocks_;
  pa.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)), pa.window = c.sliding_window;
  pa.max_seq_len = max_model_len_, pa.max_query_len = max_query_len;
  pa.workspace = attn_workspace_, pa.workspace_bytes = attn_workspace_bytes_;
  const int64_t layer_pool =
      num_blocks_ * options_.block_size * kv * kernels::paged_kv_element_bytes(kv_storage_, d);  // bytes per layer
  pa.kv_storage = kv_storage_;
  kernels::PagedKvWriteArgs wr;
  wr.src_ld = qkv_width_, wr.dtype = d, wr.slot_mapping = arrays_.slots, wr.num_tokens = tokens, wr.width = kv;
  wr.num_slots = num_blocks_ * options_.block_size;
  wr.kv_storage = kv_storage_;
  wr.k = static_cast<uint8_t*>(qkv_) + bytes_of(d, q);
  wr.v = static_cast<uint8_t*>(qkv_) + bytes_of(d, q + kv);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& w = layers_[static_cast<size_t>(l)];
    RETURN_IF_ERROR(norm(x_, DType::kF32, h, w.input_norm, normed_, h, tokens, h, 1));
    if (!w.fp8[kQkvGemm].parts.empty()) {  // FP8 (llama_cuda_fp8.cpp)
      RETURN_IF_ERROR(fp8_linear(w.fp8[kQkvGemm], normed_, qkv_, false, w.qkv_bias, tokens));
    } else if (!w.w4a16[kQkvGemm].parts.empty()) {  // W4A16 (llama_cuda_quant.cpp)
      RETURN_IF_ERROR(w4a16_linear(w.w4a16[kQkvGemm], normed_, qkv_, false, w.qkv_bias, tokens));
    } else {
      RETURN_IF_ERROR(gemm(normed_, h, w.qkv, qkv_width_, h, qkv_, d, w.qkv_bias, 0.0f, tokens));
    }
    if (lora_active_) {  // q, k and v's deltas into their slices of the fused row, in one launch pair
      RETURN_IF_ERROR(
          lora_apply(lora_args(l, {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV}, normed_, h, qkv_, d, qkv_width_, tokens)));
    }
    if (c.qk_norm) {  // Qwen3: per-head RMSNorm of q and of k, in place in the fused row
      RETURN_IF_ERROR(norm(qkv_, d, qkv_width_, w.q_norm, qkv_, qkv_width_, tokens, c.head_dim, c.num_attention_heads));
      void* k = static_cast<uint8_t*>(qkv_) + bytes_of(d, q);
      RETURN_IF_ERROR(norm(k, d, qkv_width_, w.k_norm, k, qkv_width_, tokens, c.head_dim, c.num_key_value_heads));
    }
    kernels::RopeArgs rope;
    rope.x = qkv_, rope.dtype = d, rope.rows = tokens, rope.ld = qkv_width_;
    rope.heads = c.num_attention_heads + c.num_key_value_heads, rope.head_dim = c.head_dim;  // q then k
    rope.positions = arrays_.positions, rope.inv_freq = d_inv_freq_;
    wr.k_cache = static_cast<uint8_t*>(k_pool_) + l * layer_pool;
    wr.v_cache = static_cast<uint8_t*>(v_pool_) + l * layer_pool;
    wr.k_scale = pa.k_scale = kv_scales_ + 2 * l;  // read only by FP8 pools
    wr.v_scale = pa.v_scale = kv_scales_ + 2 * l + 1;
    if (!dynamic_rope_) {  // RoPE and the KV write in one launch
      RETURN_IF_ERROR(kernels::apply_rope_and_cache_cuda(rope, wr, s));
    } else {
      const DecoderStep& step = *eager_step_;
      for (int64_t i = 0; i < step.num_seqs(); ++i) {
        const int64_t first = step.query_start[i], rows = step.query_start[i + 1] - first;
        rope.x = static_cast<uint8_t*>(qkv_) + bytes_of(d, first * qkv_width_);
        rope.rows = rows;
        rope.positions = arrays_.positions + first;
        rope.inv_freq = d_inv_freq_ + (i + 1) * (c.head_dim / 2);
        RETURN_IF_ERROR(kernels::apply_rope_cuda(rope, s));
      }
      RETURN_IF_ERROR(kernels::paged_kv_write_cuda(wr, s));
    }
    pa.k_cache = wr.k_cache, pa.v_cache = wr.v_cache;
    RETURN_IF_ERROR(kernels::paged_attention_cuda(pa, s));
    if (!w.fp8[kOGemm].parts.empty()) {
      RETURN_IF_ERROR(fp8_linear(w.fp8[kOGemm], attn_, x_, true, w.o_bias, tokens));
    } else if (!w.w4a16[kOGemm].parts.empty()) {
      RETURN_IF_ERROR(w4a16_linear(w.w4a16[kOGemm], attn_, x_, true, w.o_bias, tokens));
    } else {
      RETURN_IF_ERROR(gemm(attn_, q, w.o, h, q, x_, DType::kF32, w.o_bias, 1.0f, tokens));
    }
    if (lora_active_) RETURN_IF_ERROR(lora_apply(lora_args(l, {LoraTarget::kO}, attn_, q, x_, DType::kF32, h, tokens)));
    RETURN_IF_ERROR(norm(x_, DType::kF32, h, w.post_norm, normed_, h, tokens, h, 1));
    if (c.num_experts > 0) {
      RETURN_IF_ERROR(moe_mlp(w, l, tokens));
      continue;
    }
    kernels::GemvSwigluArgs mlp;  // one row (batch-1 decode): the GEMV and SwiGLU in one launch
    mlp.a = normed_, mlp.w = w.gate_up, mlp.ldw = h, mlp.bias = w.gate_up_bias, mlp.y = act_;
    mlp.inter = inter, mlp.k = h, mlp.dtype = d;
    const bool gate_up_w4 = !w.w4a16[kGateUpGemm].parts.empty(), gate_up_fp8 = !w.fp8[kGateUpGemm].parts.empty();
    if (tokens == 1 && !lora_active_ && !gate_up_w4 && !gate_up_fp8 && kernels::gemv16_swiglu_applies(mlp)) {
      RETURN_IF_ERROR(kernels::gemv16_swiglu_cuda(mlp, s));
    } else {
      if (gate_up_fp8) {
        RETURN_IF_ERROR(fp8_linear(w.fp8[kGateUpGemm], normed_, gate_up_, false, w.gate_up_bias, tokens));
      } else if (gate_up_w4) {
        RETURN_IF_ERROR(w4a16_linear(w.w4a16[kGateUpGemm], normed_, gate_up_, false, w.gate_up_bias, tokens));
      } else {
        RETURN_IF_ERROR(gemm(normed_, h, w.gate_up, 2 * inter, h, gate_up_, d, w.gate_up_bias, 0.0f, tokens));
      }
      if (lora_active_) {
        RETURN_IF_ERROR(lora_apply(lora_args(l, {LoraTarget::kGate, LoraTarget::kUp}, normed_, h, gate_up_, d, 2 * inter, tokens)));
      }
      kernels::SwigluArgs sw;
      sw.gate = gate_up_, sw.up = static_cast<uint8_t*>(gate_up_) + bytes_of(d, inter), sw.in_dtype = d;
      sw.in_ld = 2 * inter, sw.rows = tokens, sw.cols = inter, sw.y = act_, sw.y_dtype = d, sw.y_ld = inter;
      RETURN_IF_ERROR(kernels::swiglu_cuda(sw, s));
    }
    if (!w.fp8[kDownGemm].parts.empty()) {
      RETURN_IF_ERROR(fp8_linear(w.fp8[kDownGemm], act_, x_, true, w.down_bias, tokens));
    } else if (!w.w4a16[kDownGemm].parts.empty()) {
      RETURN_IF_ERROR(w4a16_linear(w.w4a16[kDownGemm], act_, x_, true, w.down_bias, tokens));
    } else {
      RETURN_IF_ERROR(gemm(act_, inter, w.down, h, inter, x_, DType::kF32, w.down_bias, 1.0f, tokens));
    }
    if (lora_active_) RETURN_IF_ERROR(lora_apply(lora_args(l, {LoraTarget::kDown}, act_, inter, x_, DType::kF32, h, tokens)));
  }
  // The logit rows: gathered, normed, projected.
  RETURN_IF_ERROR(gather_rows_f32(x_, DType::kF32, tokens, h, arrays_.logit_rows, logit_rows, h, gathered_, s));
  RETURN_IF_ERROR(norm(gathered_, DType::kF32, h, final_norm_, normed_, h, logit_rows, h, 1));
  RETURN_IF_ERROR(gemm(normed_, h, lm_head_, c.vocab_size, h, logits_, DType::kF32, nullptr, 0.0f, logit_rows));
  return ok_status();
}

Status LlamaCudaModel::moe_mlp(const Layer& w, int64_t layer, int64_t tokens) {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  cudaStream_t s = stream_.get();
  const int64_t h = c.hidden_size, i = c.intermediate_size, e_count = c.num_experts, k = c.experts_per_token;
  auto gemm = [&](const void* a, int64_t lda, const void* wt, int64_t n, int64_t kk, void* out, DType out_dtype,
                  int64_t m) {
    kernels::GemmCudaArgs g;
    g.m = m, g.n = n, g.k = kk, g.a = a, g.lda = lda, g.w = wt, g.ldw = kk, g.in_dtype = d;
    g.d = out, g.ldd = n, g.out_dtype = out_dtype;
    return gemm_->run(g, s);
  };
  auto at = [&](const void* p, DType dt, int64_t n) { return static_cast<const uint8_t*>(p) + bytes_of(dt, n); };
  auto at_mut = [&](void* p, DType dt, int64_t n) { return static_cast<uint8_t*>(p) + bytes_of(dt, n); };
  // Route: logits in f32 (HF's softmax runs in f32 on the router's output), top-k, then the pairs grouped by expert.
  RETURN_IF_ERROR(gemm(normed_, h, w.router, e_count, h, router_logits_, DType::kF32, tokens));
  int32_t* ids = moe_ids_ + layer * tokens * k;  // this layer's slice of the step's routing
  float* weights = moe_weights_ + layer * tokens * k;
  last_tokens_ = tokens;
  RETURN_IF_ERROR(kernels::moe_route_cuda(router_logits_, e_count, tokens, e_count, k, ids, weights, s));
  if (moe_gemv_path(tokens)) {
    // A few tokens (decode): every pair through its expert's weights by a GEMV that reads the expert id on the
    // device: no plan, no host round trip, so the step can replay as a CUDA graph.
    const int64_t pairs = tokens * k;
    RETURN_IF_ERROR(kernels::moe_gemv_cuda(normed_, h, k, w.w13, 2 * i * h, d, ids, pairs, 2 * i, h, moe_gate_up_, d,
                                           2 * i, s));
    kernels::SwigluArgs sw;
    sw.gate = moe_gate_up_, sw.up = at(moe_gate_up_, d, i), sw.in_dtype = d, sw.in_ld = 2 * i, sw.rows = pairs;
    sw.cols = i, sw.y = moe_act_, sw.y_dtype = d, sw.y_ld = i;
    RETURN_IF_ERROR(kernels::swiglu_cuda(sw, s));
    RETURN_IF_ERROR(kernels::moe_gemv_cuda(moe_act_, i, 1, w.w2, h * i, d, ids, pairs, h, i, moe_yp_, DType::kF32, h,
                                           s));
    return kernels::moe_combine_cuda(moe_yp_, h, /*row_of=*/nullptr, ids, weights, tokens, k, h, x_, h,
                                     /*accumulate=*/true, s);
  }
  RETURN_IF_ERROR(kernels::moe_plan_cuda(ids, tokens, e_count, k, moe_offsets_, moe_pair_, moe_row_of_, s));
  if (moe_grouped_path(tokens)) {
    // Every expert in one launch per matrix, the row counts read on the device: [w1; w3] over the pairs' rows
    // gathered from normed_ (row pair[r] / k) with SwiGLU in the epilogue, then w2 into f32 rows for the combine.
    const int64_t pairs = tokens * k, block_m = kernels::moe_grouped_gemm_block_m(pairs, e_count);
    RETURN_IF_ERROR(kernels::moe_tile_map_cuda(moe_offsets_, pairs, e_count, block_m, moe_tile_map_, s));
    kernels::MoeGroupedGemmArgs g;
    g.a = normed_, g.lda = h, g.a_rows = moe_pair_, g.a_div = k, g.w = w.w13, g.w_stride = 2 * i * h, g.dtype = d;
    g.offsets = moe_offsets_, g.experts = e_count, g.rows = pairs, g.n = i, g.k = h, g.swiglu = true;
    g.y = moe_act_, g.y_dtype = d, g.ldy = i, g.block_m = block_m, g.tile_map = moe_tile_map_;
    RETURN_IF_ERROR(kernels::moe_grouped_gemm_cuda(g, s));
    g.a = moe_act_, g.lda = i, g.a_rows = nullptr, g.w = w.w2, g.w_stride = h * i, g.n = h, g.k = i;
    g.swiglu = false, g.y = moe_yp_, g.y_dtype = DType::kF32, g.ldy = h;
    RETURN_IF_ERROR(kernels::moe_grouped_gemm_cuda(g, s));
    return kernels::moe_combine_cuda(moe_yp_, h, moe_row_of_, ids, weights, tokens, k, h, x_, h, /*accumulate=*/true,
                                     s);
  }
  RETURN_IF_ERROR(kernels::moe_permute_cuda(normed_, h, d, moe_pair_, tokens * k, k, h, moe_xp_, h, s));
  auto* offsets = moe_host_offsets_.data_as<int32_t>();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(offsets, moe_offsets_, (e_count + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  // Each expert over its rows: [w1; w3], then SwiGLU over every pair at once, then w2 (f32 out, for the combine).
  // A GEMM's M is rounded up (padded_rows) so that a few shapes serve every routing: cuBLASLt picks an algorithm
  // per new shape, which costs more than the padded rows' arithmetic (2.4x on the 2,048-token top-2 layer stack,
  // docs/perf/mixtral_gpu.md). The padding rows read the next expert's
  // inputs and write rows that expert (run later, in ascending order) overwrites, or the buffers' slack past the
  // last pair (moe_pad_rows); nothing reads them.
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t first = offsets[e], rows = padded_rows(offsets[e + 1] - offsets[e]);
    if (rows == 0) continue;
    RETURN_IF_ERROR(gemm(at(moe_xp_, d, first * h), h, at(w.w13, d, e * 2 * i * h), 2 * i, h,
                         at_mut(moe_gate_up_, d, first * 2 * i), d, rows));
  }
  kernels::SwigluArgs sw;
  sw.gate = moe_gate_up_, sw.up = at(moe_gate_up_, d, i), sw.in_dtype = d, sw.in_ld = 2 * i, sw.rows = tokens * k;
  sw.cols = i, sw.y = moe_act_, sw.y_dtype = d, sw.y_ld = i;
  RETURN_IF_ERROR(kernels::swiglu_cuda(sw, s));
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t first = offsets[e], rows = padded_rows(offsets[e + 1] - offsets[e]);
    if (rows == 0) continue;
    RETURN_IF_ERROR(gemm(at(moe_act_, d, first * i), i, at(w.w2, d, e * h * i), h, i, moe_yp_ + first * h,
                         DType::kF32, rows));
  }
  return kernels::moe_combine_cuda(moe_yp_, h, moe_row_of_, ids, weights, tokens, k, h, x_, h, /*accumulate=*/true, s);
}

Status LlamaCudaModel::copy_routing(MoeRoutingTrace& out) {
  const LlamaConfig& c = config_;
  if (c.num_experts <= 0) return failed_precondition("copy_routing on a model without experts");
  // The device holds [layers, last_tokens_, k] (a graph's bucket rows); the step's first routing_tokens_ are real.
  const int64_t k = c.experts_per_token, rows = last_tokens_, real = std::min(routing_tokens_, rows);
  out.layers = c.num_hidden_layers, out.tokens = real, out.k = k;
  out.experts.resize(static_cast<size_t>(out.layers * real * k));
  out.weights.resize(out.experts.size());
  const size_t pitch = static_cast<size_t>(rows * k), width = static_cast<size_t>(real * k);
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(out.experts.data(), width * sizeof(int32_t), moe_ids_, pitch * sizeof(int32_t),
                                         width * sizeof(int32_t), static_cast<size_t>(out.layers),
                                         cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(out.weights.data(), width * sizeof(float), moe_weights_, pitch * sizeof(float),
                                         width * sizeof(float), static_cast<size_t>(out.layers),
                                         cudaMemcpyDeviceToHost, stream_.get()));
  return stream_.synchronize();
}

bool LlamaCudaModel::moe_gemv_path(int64_t tokens) const {
  const LlamaConfig& c = config_;
  return c.num_experts > 0 && options_.dtype != DType::kF32 && tokens * c.experts_per_token <= c.num_experts &&
         tokens * c.experts_per_token <= kernels::kMoeGemvMaxPairs && c.hidden_size % 8 == 0 &&
         c.intermediate_size % 8 == 0;
}

bool LlamaCudaModel::moe_grouped_path(int64_t tokens) const {
  const LlamaConfig& c = config_;
  const int64_t pairs = tokens * c.experts_per_token;
  return c.num_experts > 0 && options_.dtype != DType::kF32 && pairs <= options_.moe_grouped_rows * c.num_experts &&
         c.hidden_size % 8 == 0 && c.intermediate_size % 8 == 0 &&
         kernels::moe_grouped_gemm_tiles(pairs, c.num_experts, 32) <= 65535;
}

Status LlamaCudaModel::capture_graphs() {
  if (dynamic_rope_) return ok_status();  // per-sequence frequencies: eager
  cudaStream_t s = stream_.get();
  // Mixtral: only the buckets whose pairs take the GEMV or the grouped path (no host round trip) have graphs.
  std::vector<int64_t> buckets;
  for (int64_t b : buckets_) {
    if (config_.num_experts == 0 || moe_gemv_path(b) || moe_grouped_path(b)) buckets.push_back(b);
  }
  // Every bucket once eagerly (kernels accept the shapes, cuBLASLt's plans are cached), then captured.
  for (int64_t b : buckets) {
    DecoderStep step;  // b sequences of one token at position 0 writing nowhere
    for (int64_t i = 0; i < b; ++i) {
      step.tokens.push_back(0), step.positions.push_back(0), step.slots.push_back(-1);
      step.query_start.push_back(static_cast<int32_t>(i)), step.seq_lens.push_back(1);
      step.logit_rows.push_back(static_cast<int32_t>(i));
    }
    step.query_start.push_back(static_cast<int32_t>(b));
    step.table_ld = table_ld_;
    step.block_tables.assign(static_cast<size_t>(b * table_ld_), 0);
    RETURN_IF_ERROR(stage(step, b));
    RETURN_IF_ERROR(launch(b, b, b, 1));
  }
  RETURN_IF_ERROR(stream_.synchronize());
  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
  // One bucket's decode step captured and instantiated into `into` (with the LoRA launches when `lora`).
  auto capture = [&](int64_t b, bool lora, std::map<int64_t, cudaGraphExec_t>& into) -> Status {
    cudaGraph_t graph = nullptr;
    arrays_ = bucket_arrays_.at(b);  // the graph reads the bucket's own arrays, which stage() fills
    lora_active_ = lora;
    CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    Status forward = launch(b, b, b, 1);
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    lora_active_ = false;
    if (!forward.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return forward.with_context(std::string("capturing the ") + (lora ? "LoRA " : "") + "decode graph of " +
                                  std::to_string(b) + " sequences");
    }
    CUDA_RETURN_IF_ERROR(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_RETURN_IF_ERROR(instantiated);
    into[b] = exec;
    CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, s));
    return ok_status();
  };
  for (int64_t b : buckets) RETURN_IF_ERROR(capture(b, false, graphs_));
  // With LoRA slots, the same buckets again with the LoRA launches (rows without an adapter skip them on the
  // device; steps without any adapter replay the plain graphs and pay nothing).
  if (options_.max_loras > 0) {
    for (int64_t b : buckets) RETURN_IF_ERROR(capture(b, true, lora_graphs_));
  }
  RETURN_IF_ERROR(stream_.synchronize());
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
  graph_bytes_ = free_before > free_after ? free_before - free_after : 0;
  return ok_status();
}

Status LlamaCudaModel::forward(const DecoderStep& step) {
  const LlamaConfig& c = config_;
  const int64_t t = step.num_tokens(), n = step.num_seqs();
  if (t <= 0 || n <= 0) return invalid_argument("a decoder step needs at least one token");
  if (t > options_.max_num_tokens && !(t == n && n <= options_.max_num_seqs)) {
    return invalid_argument("a step of " + std::to_string(t) + " tokens (max_num_tokens " +
                            std::to_string(options_.max_num_tokens) + ")");
  }
  if (n > options_.max_num_seqs || static_cast<int64_t>(step.logit_rows.size()) > options_.max_num_seqs) {
    return invalid_argument("a step of " + std::to_string(n) + " sequences asking for " +
                            std::to_string(step.logit_rows.size()) + " logit rows (at most max_num_seqs, " +
                            std::to_string(options_.max_num_seqs) + ")");
  }
  if (step.max_seq_len > max_model_len_) {
    return invalid_argument("a sequence of " + std::to_string(step.max_seq_len) + " tokens (max_model_len " +
                            std::to_string(max_model_len_) + ")");
  }
  for (int32_t id : step.tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(c.vocab_size) + ")");
    }
  }
  for (size_t i = 0; i < step.embed_rows.size(); ++i) {
    if (step.embed_rows[i] < 0 || step.embed_rows[i] >= t || (i > 0 && step.embed_rows[i] <= step.embed_rows[i - 1])) {
      return invalid_argument("embed_rows must be ascending rows of the step's tokens");
    }
  }
  if (!step.embed_rows.empty() && step.embeds == nullptr) return invalid_argument("embed_rows without embeds");
  const bool decode = t == n && static_cast<int64_t>(step.logit_rows.size()) == n && step.embed_rows.empty();
  const int64_t bucket = decode ? bucket_for(n) : -1;
  const bool lora = std::any_of(step.loras.begin(), step.loras.end(), [](const LoraAdapter* a) { return a; });
  if (!step.loras.empty() && static_cast<int64_t>(step.loras.size()) != n) {
    return invalid_argument("a decoder step's adapters disagree with its sequences");
  }
  // Gate routing's mix (a second adapter per sequence, weighted): a second delta pass per group, eagerly (the
  // LoRA graphs hold one pass).
  const bool mix = std::any_of(step.loras_second.begin(), step.loras_second.end(), [](const LoraAdapter* a) { return a; });
  if ((!step.loras_second.empty() && static_cast<int64_t>(step.loras_second.size()) != n) ||
      (!step.lora_weights.empty() && static_cast<int64_t>(step.lora_weights.size()) != 2 * n)) {
    return invalid_argument("a decoder step's second adapters or weights disagree with its sequences");
  }
  const std::map<int64_t, cudaGraphExec_t>& graphs = lora ? lora_graphs_ : graphs_;
  auto graph = bucket > 0 && !mix ? graphs.find(bucket) : graphs.end();
  if (graph != graphs.end()) {
    last_tokens_ = bucket, routing_tokens_ = t;  // the graph routes `bucket` rows, the step's first t are real
    RETURN_IF_ERROR(stage(step, bucket));
    if (lora) RETURN_IF_ERROR(lora_stage(step, bucket));
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->second, stream_.get()));
    return ok_status();
  }
  RETURN_IF_ERROR(stage(step, 0));
  if (lora) RETURN_IF_ERROR(lora_stage(step, t));
  lora_active_ = lora, lora_mix_active_ = mix;
  routing_tokens_ = t;
  eager_step_ = &step;
  Status s = launch(t, n, static_cast<int64_t>(step.logit_rows.size()), step.max_query_len);
  eager_step_ = nullptr;
  lora_active_ = lora_mix_active_ = false;
  return s;
}

}  // namespace mmserve::models
