// LlamaCudaModel (see llama_cuda.h): options, the weight and buffer plans, the upload and the loaders. The step
// (stage, launch, graphs) is in llama_cuda_step.cpp, Mixtral's expert layer in llama_cuda_moe.cpp, the checkpoints'
// quantised linears in llama_cuda_quant.cpp / llama_cuda_fp8.cpp, adapters in llama_cuda_lora*.cpp.
#include "models/llama/llama_cuda.h"

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_status.h"
#include "core/json_config.h"
#include "core/safetensors.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "models/llama/llama_cuda_kernels.h"

namespace mmserve::models {

LlamaCudaModel::~LlamaCudaModel() {
  for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
  for (auto& [bucket, exec] : lora_graphs_) cudaGraphExecDestroy(exec);
  if (gemm_workspace_ != nullptr) cudaFree(gemm_workspace_);
}

int64_t LlamaCudaModel::memory_bytes() const {
  return static_cast<int64_t>(weights_.capacity() + buffers_.capacity() + graph_bytes_ +
                              kernels::CublasLtGemm::kDefaultWorkspaceBytes);
}


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
    wants.push_back({slot, DeviceArena::aligned(storage_bytes(dtype, n)), std::move(parts), dtype});
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
      weight_slots_.emplace_back(name, static_cast<uint8_t*>(p) + storage_bytes(w.dtype, offset));
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
      storage_bytes(DType::kF32, rows * h), storage_bytes(d, rows * h), storage_bytes(d, rows * qkv_width_),
      storage_bytes(d, rows * c.q_size()), storage_bytes(d, rows * 2 * c.intermediate_size), storage_bytes(d, rows * c.intermediate_size),
      storage_bytes(DType::kF32, s * h), storage_bytes(DType::kF32, s * c.vocab_size), attn_workspace_bytes_,
      storage_bytes(DType::kI32, StepArrays::ints(rows, rows, table_ld_)), storage_bytes(DType::kF32, (s + 1) * half_dim)};
  std::vector<size_t> all = sizes;
  all.push_back(storage_bytes(DType::kF32, 2 * c.num_hidden_layers));  // the KV cache's scales (FP8 pools read them)
  w4a16_workspace_bytes_ = w4a16_workspace_need(rows);  // W4A16 (llama_cuda_quant.cpp); none for 16-bit weights
  // FP8 (llama_cuda_fp8.cpp): a GEMM's quantised input, [rows, K] codes.
  for (size_t b : {w4a16_workspace_bytes_, w4a16_scratch_need(rows), static_cast<size_t>(rows * fp8_input_k())}) {
    if (b > 0) all.push_back(b);
  }
  if (host_embeddings_) {  // the step's embedding rows and the identity ids (llama_cuda_embed.cpp)
    all.push_back(storage_bytes(d, rows * h));
    all.push_back(storage_bytes(DType::kI32, rows));
  }
  const int64_t e_count = c.num_experts;
  const int64_t pairs = rows * std::max<int64_t>(c.experts_per_token, 1) + (e_count > 0 ? kMoePadRows : 0);
  if (e_count > 0) {  // Mixtral: the router's logits, the routing, the plan and the pairs' activations
    for (size_t b : {storage_bytes(DType::kF32, rows * e_count), storage_bytes(DType::kI32, c.num_hidden_layers * pairs),
                     storage_bytes(DType::kF32, c.num_hidden_layers * pairs),
                     storage_bytes(DType::kI32, e_count + 1), storage_bytes(DType::kI32, pairs), storage_bytes(DType::kI32, pairs),
                     storage_bytes(d, pairs * h), storage_bytes(d, pairs * 2 * c.intermediate_size),
                     storage_bytes(d, pairs * c.intermediate_size), storage_bytes(DType::kF32, pairs * h),
                     storage_bytes(DType::kI32, 2 * kernels::moe_grouped_gemm_tiles(pairs, e_count, 32))}) {
      all.push_back(b);
    }
  }
  // LoRA: the slots' matrices, ranks and scales, the rows' slots and the shrink's workspace.
  const int64_t loras = options_.max_loras, r_max = lora_slot_rank(), layers = c.num_hidden_layers;
  if (loras > 0) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (c.num_experts > 0 && t >= static_cast<int>(LoraTarget::kGate)) continue;  // Mixtral: no dense MLP
      const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
      all.push_back(storage_bytes(d, loras * layers * r_max * in));
      all.push_back(storage_bytes(d, loras * layers * out * r_max));
    }
    for (size_t b : {storage_bytes(DType::kI32, loras * layers * kLoraTargets), storage_bytes(DType::kF32, loras * layers * kLoraTargets),
                     storage_bytes(DType::kI32, 4 * rows), storage_bytes(DType::kF32, lora_workspace_floats(rows))}) {
      all.push_back(b);
    }
  }
  size_t buffer_bytes = 0;
  for (size_t b : all) buffer_bytes += DeviceArena::aligned(b) + DeviceArena::kAlignment;
  for (int64_t b : buckets_) {
    buffer_bytes += DeviceArena::aligned(storage_bytes(DType::kI32, StepArrays::ints(b, b, table_ld_))) + DeviceArena::kAlignment;
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
  ASSIGN_OR_RETURN(normed_, buffers_.allocate(storage_bytes(d, rows * h)));
  ASSIGN_OR_RETURN(qkv_, buffers_.allocate(storage_bytes(d, rows * qkv_width_)));
  ASSIGN_OR_RETURN(attn_, buffers_.allocate(storage_bytes(d, rows * c.q_size())));
  ASSIGN_OR_RETURN(gate_up_, buffers_.allocate(storage_bytes(d, rows * 2 * c.intermediate_size)));
  ASSIGN_OR_RETURN(act_, buffers_.allocate(storage_bytes(d, rows * c.intermediate_size)));
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
    ASSIGN_OR_RETURN(moe_xp_, buffers_.allocate(storage_bytes(d, pairs * h)));
    ASSIGN_OR_RETURN(moe_gate_up_, buffers_.allocate(storage_bytes(d, pairs * 2 * c.intermediate_size)));
    ASSIGN_OR_RETURN(moe_act_, buffers_.allocate(storage_bytes(d, pairs * c.intermediate_size)));
    ASSIGN_OR_RETURN(moe_yp_, buffers_.allocate_array<float>(pairs * h));
    ASSIGN_OR_RETURN(moe_tile_map_,
                     buffers_.allocate_array<int32_t>(2 * kernels::moe_grouped_gemm_tiles(pairs, e_count, 32)));
    RETURN_IF_ERROR(moe_host_offsets_.init(storage_bytes(DType::kI32, e_count + 1)));
  }
  if (loras > 0) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (c.num_experts > 0 && t >= static_cast<int>(LoraTarget::kGate)) continue;
      const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
      ASSIGN_OR_RETURN(lora_a_[t], buffers_.allocate(storage_bytes(d, loras * layers * r_max * in)));
      ASSIGN_OR_RETURN(lora_b_[t], buffers_.allocate(storage_bytes(d, loras * layers * out * r_max)));
    }
    ASSIGN_OR_RETURN(lora_ranks_, buffers_.allocate_array<int32_t>(loras * layers * kLoraTargets));
    ASSIGN_OR_RETURN(lora_scales_, buffers_.allocate_array<float>(loras * layers * kLoraTargets));
    // Rows' slots and weights, first and second adapter (gate routing's mix): [4, rows] words, one H2D copy each.
    ASSIGN_OR_RETURN(lora_row_slot_, buffers_.allocate_array<int32_t>(4 * rows));
    lora_rows_ = rows;
    lora_t_floats_ = lora_workspace_floats(rows);
    ASSIGN_OR_RETURN(lora_t_, buffers_.allocate_array<float>(lora_t_floats_));
    CUDA_RETURN_IF_ERROR(cudaMemset(lora_ranks_, 0, storage_bytes(DType::kI32, loras * layers * kLoraTargets)));
    CUDA_RETURN_IF_ERROR(cudaMemset(lora_row_slot_, 0xff, storage_bytes(DType::kI32, 2 * rows)));  // -1: no adapter
    RETURN_IF_ERROR(lora_host_rows_.init(storage_bytes(DType::kI32, 4 * rows)));
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
  CUDA_RETURN_IF_ERROR(cudaMemset(arrays_.tables, 0, storage_bytes(DType::kI32, rows * table_ld_)));
  for (const auto& [b, a] : bucket_arrays_) {
    CUDA_RETURN_IF_ERROR(cudaMemset(a.tokens, 0, storage_bytes(DType::kI32, StepArrays::ints(b, b, table_ld_))));
  }
  if (!inv_freq_.empty()) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(d_inv_freq_, inv_freq_.data(), inv_freq_.size() * 4, cudaMemcpyHostToDevice));
  }
  // Staging for the step's arrays (pinned: the copies are asynchronous).
  RETURN_IF_ERROR(staging_.init(storage_bytes(DType::kI32, rows * (6 + table_ld_) + 1) +
                                storage_bytes(DType::kF32, (s + 1) * half_dim)));
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

}  // namespace mmserve::models
