// LlamaCudaModel (see llama_cuda.h): one decoder step: the host's arrays staged (stage), the layers' kernels
// launched on the stream (launch), the decode graphs per batch bucket captured and replayed (capture_graphs,
// forward). Mixtral's expert layer, which launch calls, is in llama_cuda_moe.cpp.
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_status.h"
#include "kernels/gemm/gemm_small_m_cuda.h"
#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/rms_norm/rms_norm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/swiglu/swiglu_cuda.h"
#include "models/llama/llama_cuda.h"
#include "models/llama/llama_cuda_kernels.h"

namespace mmserve::models {

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
  wr.k = static_cast<uint8_t*>(qkv_) + storage_bytes(d, q);
  wr.v = static_cast<uint8_t*>(qkv_) + storage_bytes(d, q + kv);
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
      void* k = static_cast<uint8_t*>(qkv_) + storage_bytes(d, q);
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
        rope.x = static_cast<uint8_t*>(qkv_) + storage_bytes(d, first * qkv_width_);
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
      sw.gate = gate_up_, sw.up = static_cast<uint8_t*>(gate_up_) + storage_bytes(d, inter), sw.in_dtype = d;
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
