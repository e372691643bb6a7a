// Whisper on an NVIDIA GPU (see whisper_cuda.h): load, the encoder, the decoder forward and the step graphs (the
// decoder rows' prefill / step / reorder are in whisper_cuda_rows.cpp). The forward below mirrors whisper.cpp step
// by step; each step is one kernel or one cuBLASLt GEMM:
//
//   encoder: im2col -> conv1 GEMM (+bias) -> gelu -> im2col (stride 2) -> conv2 GEMM (+bias, f32 out)
//            -> gelu + sinusoidal positions -> N pre-LN blocks (one fused QKV GEMM, attention_kv with q = k = v
//            column slices of it) -> layer_norm (written in `dtype`: what the cross K/V GEMMs read)
//   decoder: token + learned position embedding (positions from device memory) -> N layers of
//              self-attention: LN, QKV GEMM, kv_cache_append at each row's position, attention_kv over the
//                              cache (bottom-right causal, per-row lengths), out GEMM into the f32 stream
//              cross-attention: LN, q GEMM, attention_kv over the row's cross K/V (maybe compressed), out GEMM
//              MLP: LN, fc1 GEMM, activation, fc2 GEMM into the stream
//            -> layer_norm of the rows whose logits are wanted (gathered) -> logits GEMM (f32 out)
#include "models/whisper/whisper_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>

#include "core/cuda/cuda_status.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/attention/attention_kv_cuda.h"
#include "kernels/conv1d/im2col_1d_cuda.h"
#include "kernels/kv_cache/kv_cache_cuda.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "models/common/tensor_parallel.h"
#include "models/whisper/whisper_cuda_internal.h"

namespace mmserve::models {

using kernels::GemmCudaArgs;
using kernels::KvStorage;

const char* whisper_cross_kv_name(WhisperCrossKv storage) {
  switch (storage) {
    case KvStorage::kSame: return "same";
    case KvStorage::kFp8E4M3: return "fp8_e4m3";
    case KvStorage::kInt8: return "int8";
  }
  return "?";
}

size_t WhisperCudaMemory::total() const {
  return weight_bytes + self_kv_bytes + cross_kv_bytes + activation_bytes + workspace_bytes + graph_bytes;
}

std::string WhisperCudaMemory::to_string() const {
  auto mib = [](size_t b) {
    std::ostringstream s;
    s.precision(1);
    s << std::fixed << static_cast<double>(b) / (1 << 20) << " MiB";
    return s.str();
  };
  std::string out =
      "weights " + mib(weight_bytes) + ", self KV " + mib(self_kv_bytes) + ", cross K/V " + mib(cross_kv_bytes);
  if (cross_kv_bytes_same > cross_kv_bytes) out += " (saved " + mib(cross_kv_bytes_same - cross_kv_bytes) + ")";
  out += ", activations " + mib(activation_bytes) + ", workspace " + mib(workspace_bytes) + ", graphs " +
         mib(graph_bytes) + ", pinned " + mib(pinned_bytes);
  return out;
}

// ------------------------------------------------------------------------------------ load

WhisperCudaModel::~WhisperCudaModel() {
  for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
}

StatusOr<std::unique_ptr<WhisperCudaModel>> WhisperCudaModel::load(const std::string& model_dir,
                                                                   const WhisperCudaOptions& options) {
  // The host model parses and checks the checkpoint (same errors as the CPU path) and fuses QKV; its f32
  // copy is freed once the weights are on the GPU.
  ASSIGN_OR_RETURN(std::unique_ptr<WhisperModel> host, WhisperModel::load(model_dir));
  return load(*host, options);
}

StatusOr<std::unique_ptr<WhisperCudaModel>> WhisperCudaModel::load(const WhisperModel& host,
                                                                   const WhisperCudaOptions& options) {
  auto model = std::unique_ptr<WhisperCudaModel>(new WhisperCudaModel());
  RETURN_IF_ERROR(model->init(host, options));
  return model;
}

Status WhisperCudaModel::init(const WhisperModel& host, const WhisperCudaOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kF16 && options.dtype != DType::kBF16) {
    return invalid_argument(std::string("Whisper on the GPU computes in f32, f16 or bf16, not ") +
                            dtype_name(options.dtype));
  }
  if (options.max_batch < 1 || options.max_batch > 256) {
    return invalid_argument("max_batch " + std::to_string(options.max_batch) + " is outside [1, 256]");
  }
  config_ = host.config();
  options_ = options;
  if (options.tp_collective != nullptr) {
    tp_world_ = options.tp_collective->world_size();
    if (options.tp_rank < 0 || options.tp_rank >= tp_world_) {
      return invalid_argument("tensor-parallel rank " + std::to_string(options.tp_rank) + " of " +
                              std::to_string(tp_world_));
    }
    tp_rank_ = options.tp_rank;
    for (const auto& [part, heads] : {std::pair<const char*, int64_t>{"encoder", config_.encoder_attention_heads},
                                      std::pair<const char*, int64_t>{"decoder", config_.decoder_attention_heads}}) {
      if (heads % tp_world_ != 0) {
        return invalid_argument("tensor parallel over " + std::to_string(tp_world_) + " GPUs needs the " + part +
                                "'s " + std::to_string(heads) + " heads to divide by " + std::to_string(tp_world_));
      }
    }
    if (!options.tp_collective->graph_capturable()) options_.cuda_graphs = false;
  }
  attn_width_ = config_.d_model / tp_world_;
  encoder_ffn_ = tp_shard_range(config_.encoder_ffn_dim, tp_world_, tp_rank_)->size();
  decoder_ffn_ = tp_shard_range(config_.decoder_ffn_dim, tp_world_, tp_rank_)->size();
  if (const char* graphs = std::getenv("MMSERVE_CUDA_GRAPHS"); graphs && std::string(graphs) == "0") {
    options_.cuda_graphs = false;
  }
  capacity_ = options.capacity == 0 ? config_.max_target_positions : options.capacity;
  if (capacity_ < 1 || capacity_ > config_.max_target_positions) {
    return invalid_argument("capacity " + std::to_string(capacity_) + " is outside 1.." +
                            std::to_string(config_.max_target_positions) + " (max_target_positions)");
  }
  max_prefill_ = capacity_;
  frames_max_ = config_.max_source_positions;
  ln_rows_max_ = 2 * options_.max_batch;
  std::vector<int64_t> wanted = options.buckets;
  if (wanted.empty()) {
    for (int64_t b = 1; b < options_.max_batch; b *= 2) wanted.push_back(b);  // powers of two
  }
  for (int64_t b : wanted) {
    if (b < 1) return invalid_argument("batch bucket " + std::to_string(b) + " must be positive");
    if (b <= options_.max_batch) buckets_.push_back(b);
  }
  buckets_.push_back(options_.max_batch);
  std::sort(buckets_.begin(), buckets_.end());
  buckets_.erase(std::unique(buckets_.begin(), buckets_.end()), buckets_.end());

  // The attention kernel's limits, checked once here rather than at the first request (the probe's pointers
  // only need to be non-null: nothing is launched).
  const DType dt = options_.dtype;
  static float probe_target = 0.0f;
  kernels::AttentionKvArgs probe;
  probe.q = probe.k = probe.v = probe.out = &probe_target;
  probe.k_scale = probe.v_scale = &probe_target;
  probe.q_ld = probe.kv_ld = probe.out_ld = attn_width_;
  probe.dtype = dt, probe.batch = 1, probe.q_len = frames_max_, probe.kv_len = frames_max_;
  probe.heads = config_.encoder_attention_heads / tp_world_;
  probe.head_dim = config_.d_model / config_.encoder_attention_heads;
  probe.kv_batch_stride = frames_max_;
  bool supported = kernels::attention_kv_cuda_supported(probe);
  probe.heads = config_.decoder_attention_heads / tp_world_;
  probe.head_dim = config_.d_model / config_.decoder_attention_heads;
  probe.storage = options_.cross_kv, probe.q_len = 1;
  supported = supported && kernels::attention_kv_cuda_supported(probe);
  if (!supported) {
    return unimplemented("the attention kernel does not take this model's head size " + std::to_string(probe.head_dim) +
                         " in " + dtype_name(dt));
  }

  RETURN_IF_ERROR(set_cuda_device(options_.device));
  RETURN_IF_ERROR(stream_.init());
  RETURN_IF_ERROR(upload_weights(host));
  RETURN_IF_ERROR(plan_state());
  RETURN_IF_ERROR(plan_activations());
  ASSIGN_OR_RETURN(gemm_, kernels::CublasLtGemm::create(act_->gemm_ws, kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  return capture_graphs();
}

Status WhisperCudaModel::upload_weights(const WhisperModel& host) {
  const DType dt = options_.dtype;
  struct Job {
    Tensor source;
    DType dtype;
    const void** target;
  };
  std::vector<Job> jobs;
  std::deque<HostTensor> slices;  // this rank's shares under tensor parallel, alive until uploaded
  Status sliced;                  // the first slicing error
  weights_ = std::make_unique<Weights>();
  Weights& w = *weights_;
  // A tensor whole (no tensor parallel, or a replicated one), or this rank's share of it under `split`
  // (models/common/tensor_parallel.h); a row-parallel bias stays null on ranks > 0.
  auto add_as = [&](const std::string& name, DType dtype, const void** target, TpSplit split, int64_t heads) {
    if (tp_world_ == 1 || split == TpSplit::kReplicated) {
      jobs.push_back({host.weight(name), dtype, target});
      return;
    }
    StatusOr<HostTensor> slice = tp_slice(host.weight(name), split, heads, tp_world_, tp_rank_, name);
    if (!slice.ok()) {
      if (sliced.ok()) sliced = slice.status();
      return;
    }
    if (slice->empty()) return;
    slices.push_back(std::move(*slice));
    jobs.push_back({slices.back().view(), dtype, target});
  };
  auto add = [&](const std::string& name, const void** target, TpSplit split = TpSplit::kReplicated,
                 int64_t heads = 0) { add_as(name, dt, target, split, heads); };
  auto add_f32 = [&](const std::string& name, const float** target, TpSplit split = TpSplit::kReplicated) {
    add_as(name, DType::kF32, reinterpret_cast<const void**>(target), split, 0);
  };
  // The CPU model's fused QKV ("<p>.self_attn.qkv.*", zero k bias) and HF's names for the rest.
  auto block = [&](const std::string& p, BlockWeightsCuda& b, int64_t heads) {
    add_f32(p + ".self_attn_layer_norm.weight", &b.ln1_w);
    add_f32(p + ".self_attn_layer_norm.bias", &b.ln1_b);
    add(p + ".self_attn.qkv.weight", &b.qkv_w, TpSplit::kFusedQkvHeads, heads);
    add(p + ".self_attn.qkv.bias", &b.qkv_b, TpSplit::kFusedQkvHeads, heads);
    add(p + ".self_attn.out_proj.weight", &b.out_w, TpSplit::kRowHeads, heads);
    add_f32(p + ".self_attn.out_proj.bias", &b.out_b, TpSplit::kRowBias);
    add_f32(p + ".final_layer_norm.weight", &b.ln2_w);
    add_f32(p + ".final_layer_norm.bias", &b.ln2_b);
    add(p + ".fc1.weight", &b.fc1_w, TpSplit::kColumn);
    add(p + ".fc1.bias", &b.fc1_b, TpSplit::kColumn);
    add(p + ".fc2.weight", &b.fc2_w, TpSplit::kRow);
    add_f32(p + ".fc2.bias", &b.fc2_b, TpSplit::kRowBias);
  };
  const int64_t enc_heads = config_.encoder_attention_heads, dec_heads = config_.decoder_attention_heads;
  add("model.encoder.conv1.weight", &w.conv1_w);
  add("model.encoder.conv1.bias", &w.conv1_b);
  add("model.encoder.conv2.weight", &w.conv2_w);
  add_f32("model.encoder.conv2.bias", &w.conv2_b);
  add("model.encoder.embed_positions.weight", &w.encoder_positions);
  w.encoder.resize(static_cast<size_t>(config_.encoder_layers));
  for (int64_t i = 0; i < config_.encoder_layers; ++i) {
    block("model.encoder.layers." + std::to_string(i), w.encoder[i], enc_heads);
  }
  add_f32("model.encoder.layer_norm.weight", &w.encoder_ln_w);
  add_f32("model.encoder.layer_norm.bias", &w.encoder_ln_b);
  add("model.decoder.embed_tokens.weight", &w.tokens);
  add("model.decoder.embed_positions.weight", &w.decoder_positions);
  w.decoder.resize(static_cast<size_t>(config_.decoder_layers));
  for (int64_t i = 0; i < config_.decoder_layers; ++i) {
    const std::string p = "model.decoder.layers." + std::to_string(i);
    LayerWeights& l = w.decoder[i];
    block(p, l.self, dec_heads);
    add_f32(p + ".encoder_attn_layer_norm.weight", &l.cross_ln_w);
    add_f32(p + ".encoder_attn_layer_norm.bias", &l.cross_ln_b);
    add(p + ".encoder_attn.q_proj.weight", &l.cross_q_w, TpSplit::kColumnHeads, dec_heads);
    add(p + ".encoder_attn.q_proj.bias", &l.cross_q_b, TpSplit::kColumnHeads, dec_heads);
    add(p + ".encoder_attn.k_proj.weight", &l.cross_k_w, TpSplit::kColumnHeads, dec_heads);
    add(p + ".encoder_attn.v_proj.weight", &l.cross_v_w, TpSplit::kColumnHeads, dec_heads);
    add(p + ".encoder_attn.v_proj.bias", &l.cross_v_b, TpSplit::kColumnHeads, dec_heads);
    add(p + ".encoder_attn.out_proj.weight", &l.cross_out_w, TpSplit::kRowHeads, dec_heads);
    add_f32(p + ".encoder_attn.out_proj.bias", &l.cross_out_b, TpSplit::kRowBias);
  }
  add_f32("model.decoder.layer_norm.weight", &w.decoder_ln_w);
  add_f32("model.decoder.layer_norm.bias", &w.decoder_ln_b);
  if (!config_.tie_word_embeddings) add("proj_out.weight", &w.lm_head);

  RETURN_IF_ERROR(sliced);
  size_t total = 0;
  for (const Job& j : jobs) {
    if (j.source.data() == nullptr) return internal_error("Whisper weight table: a tensor is missing");
    total += DeviceArena::aligned(storage_bytes(j.dtype, j.source.numel()));
  }
  RETURN_IF_ERROR(weight_arena_.init(total));
  memory_.weight_bytes = total;
  std::vector<uint16_t> half;
  for (const Job& j : jobs) {
    const int64_t n = j.source.numel();
    ASSIGN_OR_RETURN(void* dst, weight_arena_.allocate(storage_bytes(j.dtype, n)));
    const float* src = j.source.data_as<float>();
    if (j.dtype == DType::kF32) {
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
      half.resize(static_cast<size_t>(n));
      if (j.dtype == DType::kBF16) {
        for (int64_t i = 0; i < n; ++i) half[i] = f32_to_bf16(src[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) half[i] = f32_to_f16(src[i]);
      }
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, half.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
    *j.target = dst;
  }
  if (config_.tie_word_embeddings) w.lm_head = w.tokens;
  return ok_status();
}

Status WhisperCudaModel::plan_state() {
  const size_t e = dtype_size(options_.dtype);
  const size_t ce = options_.cross_kv == KvStorage::kSame ? e : 1;
  // Under tensor parallel a rank caches its heads only: attn_width_ = d / T columns, heads / T scales per row.
  const int64_t mb = options_.max_batch, d = attn_width_, heads = config_.decoder_attention_heads / tp_world_;
  const size_t self_bytes = static_cast<size_t>(mb * capacity_ * d) * e;
  const size_t cross_bytes = static_cast<size_t>(mb * frames_max_ * d) * ce;
  const size_t scale_bytes = options_.cross_kv == KvStorage::kSame ? 0 : sizeof(float) * mb * heads;
  const size_t layers = static_cast<size_t>(config_.decoder_layers);
  const size_t total = layers * (2 * DeviceArena::aligned(self_bytes) + 2 * DeviceArena::aligned(cross_bytes) +
                                 2 * DeviceArena::aligned(scale_bytes));
  RETURN_IF_ERROR(state_arena_.init(total));
  state_ = std::make_unique<State>();
  for (size_t l = 0; l < layers; ++l) {
    ASSIGN_OR_RETURN(void* sk, state_arena_.allocate(self_bytes));
    ASSIGN_OR_RETURN(void* sv, state_arena_.allocate(self_bytes));
    ASSIGN_OR_RETURN(void* ck, state_arena_.allocate(cross_bytes));
    ASSIGN_OR_RETURN(void* cv, state_arena_.allocate(cross_bytes));
    state_->self_k.push_back(sk), state_->self_v.push_back(sv);
    state_->cross_k.push_back(ck), state_->cross_v.push_back(cv);
    if (scale_bytes > 0) {
      ASSIGN_OR_RETURN(void* ks, state_arena_.allocate(scale_bytes));
      ASSIGN_OR_RETURN(void* vs, state_arena_.allocate(scale_bytes));
      state_->k_scale.push_back(static_cast<float*>(ks)), state_->v_scale.push_back(static_cast<float*>(vs));
    } else {
      state_->k_scale.push_back(nullptr), state_->v_scale.push_back(nullptr);
    }
  }
  // Zeros: rows that pad a bucket read finite values.
  CUDA_RETURN_IF_ERROR(cudaMemset(state_->self_k[0], 0, state_arena_.used()));  // the arena's first allocation
  memory_.self_kv_bytes = layers * 2 * self_bytes;
  memory_.cross_kv_bytes = layers * 2 * (cross_bytes + scale_bytes);
  memory_.cross_kv_bytes_same = layers * 2 * static_cast<size_t>(mb * frames_max_ * d) * e;
  return ok_status();
}

Status WhisperCudaModel::plan_activations() {
  const WhisperConfig& c = config_;
  const size_t e = dtype_size(options_.dtype);
  const size_t ce = options_.cross_kv == KvStorage::kSame ? e : 1;
  const int64_t mb = options_.max_batch, d = c.d_model, da = attn_width_, mel_frames = 2 * frames_max_;
  const int64_t rows_max = std::max(mb * frames_max_, mb * max_prefill_);
  const int64_t ffn = std::max(encoder_ffn_, decoder_ffn_);
  const int64_t ints = 6 * mb + mb * max_prefill_;

  // Split-KV partials of the decode steps: the largest need over the buckets and both attentions.
  size_t attention_ws = 0;
  for (int64_t b = 1; b <= mb; ++b) {  // every batch a prefill of one token or a step may run
    kernels::AttentionKvArgs a;
    a.dtype = options_.dtype, a.batch = b, a.q_len = 1, a.heads = c.decoder_attention_heads / tp_world_;
    a.head_dim = d / c.decoder_attention_heads;
    a.kv_len = capacity_, a.kv_batch_stride = capacity_;
    attention_ws = std::max(attention_ws, kernels::attention_kv_cuda_workspace_bytes(a));
    a.kv_len = frames_max_, a.kv_batch_stride = frames_max_, a.storage = options_.cross_kv;
    attention_ws = std::max(attention_ws, kernels::attention_kv_cuda_workspace_bytes(a));
  }
  // In-place beam reorders of a self cache or a cross K/V array.
  kernels::KvCacheGatherArgs g;
  g.batch = mb, g.batch_src = mb, g.capacity = capacity_, g.rows = capacity_, g.width = da, g.element_bytes = e;
  size_t gather = kernels::kv_cache_gather_scratch_bytes(g);
  g.capacity = frames_max_, g.rows = frames_max_, g.element_bytes = ce;
  gather = std::max(gather, kernels::kv_cache_gather_scratch_bytes(g));

  const size_t sizes[] = {sizeof(float) * mb * c.num_mel_bins * mel_frames,
                          e * std::max(mb * mel_frames * c.num_mel_bins * 3, mb * frames_max_ * d * 3),
                          e * mb * mel_frames * d,
                          sizeof(float) * rows_max * d,
                          e * rows_max * d,
                          e * rows_max * std::max(3 * da, d),  // qkv (a rank's heads); the cross q
                          e * rows_max * da,
                          e * rows_max * ffn,
                          sizeof(float) * ln_rows_max_ * c.vocab_size,
                          sizeof(int32_t) * ints,
                          attention_ws,
                          gather,
                          kernels::CublasLtGemm::kDefaultWorkspaceBytes};
  constexpr int kBuffers = sizeof(sizes) / sizeof(sizes[0]);
  size_t total = 0;
  for (size_t s : sizes) total += DeviceArena::aligned(std::max<size_t>(s, 1));
  RETURN_IF_ERROR(activation_arena_.init(total));
  void* p[kBuffers];
  for (int i = 0; i < kBuffers; ++i) {
    ASSIGN_OR_RETURN(p[i], activation_arena_.allocate(std::max<size_t>(sizes[i], 1)));
  }
  act_ = std::make_unique<Activations>();
  Activations& a = *act_;
  a.mel = static_cast<float*>(p[0]);
  a.cols = p[1];
  a.conv1 = p[2];
  a.x = static_cast<float*>(p[3]);
  a.normed = p[4];
  a.qkv = p[5];
  a.context = p[6];
  a.mlp = p[7];
  a.logits = static_cast<float*>(p[8]);
  a.ints = static_cast<int32_t*>(p[9]);
  a.attention_ws = p[10], a.attention_ws_bytes = attention_ws;
  a.gather_scratch = p[11], a.gather_scratch_bytes = gather;
  a.gemm_ws = p[12];
  CUDA_RETURN_IF_ERROR(cudaMemset(a.ints, 0, sizes[9]));
  memory_.workspace_bytes = attention_ws + gather + kernels::CublasLtGemm::kDefaultWorkspaceBytes;
  memory_.activation_bytes = total - memory_.workspace_bytes;

  RETURN_IF_ERROR(pinned_ints_.init(sizeof(int32_t) * ints));
  RETURN_IF_ERROR(pinned_logits_.init(sizeof(float) * ln_rows_max_ * c.vocab_size));
  memory_.pinned_bytes = pinned_ints_.size() + pinned_logits_.size();
  return ok_status();
}

// ------------------------------------------------------------------------------------ encoder

StatusOr<std::shared_ptr<const WhisperEncoded>> WhisperCudaModel::encode(const Tensor& mel) {
  const WhisperConfig& c = config_;
  if (mel.dims() != 3 || mel.size(1) != c.num_mel_bins || mel.dtype() != DType::kF32 || !mel.is_contiguous()) {
    return invalid_argument("input_features must be contiguous f32 [windows, " + std::to_string(c.num_mel_bins) +
                            ", frames], got " + mel.shape_string());
  }
  RETURN_IF_ERROR(set_cuda_device(options_.device));
  return encode_on_device(mel.data_as<float>(), mel.size(0), mel.size(2));
}

StatusOr<std::shared_ptr<const WhisperEncoded>> WhisperCudaModel::encode_on_device(const float* mel, int64_t windows,
                                                                                   int64_t mel_frames) {
  const WhisperConfig& c = config_;
  if (windows < 1) return invalid_argument("encode() needs at least one window");
  if (mel_frames < 1 || mel_frames > 2 * frames_max_) {
    return invalid_argument("input_features has " + std::to_string(mel_frames) + " frames; the encoder takes 1 to " +
                            std::to_string(2 * frames_max_));
  }
  const int64_t frames = whisper_encoder_frames(mel_frames), d = c.d_model;
  const size_t e = dtype_size(options_.dtype);
  auto encoded = std::make_shared<Encoded>();
  encoded->owner = this;
  encoded->id = next_encoded_id_++;
  encoded->windows_ = windows, encoded->frames_ = frames, encoded->d = d, encoded->dtype = options_.dtype;
  RETURN_IF_ERROR(encoded->buffer.init(DeviceArena::aligned(e * windows * frames * d)));
  ASSIGN_OR_RETURN(encoded->data, encoded->buffer.allocate(e * windows * frames * d));
  // cudaMemcpyDefault: the mel may be host memory (encode) or this device's (encode_on_device).
  const int64_t window_floats = c.num_mel_bins * mel_frames;
  for (int64_t w0 = 0; w0 < windows; w0 += options_.max_batch) {
    const int64_t n = std::min(options_.max_batch, windows - w0);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(act_->mel, mel + w0 * window_floats, sizeof(float) * n * window_floats,
                                         cudaMemcpyDefault, stream_.get()));
    RETURN_IF_ERROR(encoder_forward(n, mel_frames, static_cast<char*>(encoded->data) + e * w0 * frames * d));
  }
  RETURN_IF_ERROR(stream_.synchronize());
  return std::shared_ptr<const WhisperEncoded>(std::move(encoded));
}

Status WhisperCudaModel::encoded_to_host(const WhisperEncoded& encoded, std::vector<float>& out) {
  const auto* ours = dynamic_cast<const Encoded*>(&encoded);
  if (!ours) return invalid_argument("not an encoder output of a GPU Whisper model");
  const int64_t n = ours->windows_ * ours->frames_ * ours->d;
  std::vector<uint8_t> raw(storage_bytes(ours->dtype, n));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(raw.data(), ours->data, raw.size(), cudaMemcpyDeviceToHost));
  out.resize(static_cast<size_t>(n));
  if (!convert_to_f32(ours->dtype, raw.data(), out.data(), n)) return internal_error("unexpected encoder dtype");
  return ok_status();
}

Status WhisperCudaModel::encoder_forward(int64_t windows, int64_t mel_frames, void* out) {
  const WhisperConfig& c = config_;
  const DType dt = options_.dtype;
  const size_t e = dtype_size(dt);
  const Activations& a = *act_;
  const Weights& w = *weights_;
  cudaStream_t s = stream_.get();
  const int64_t d = c.d_model, frames = whisper_encoder_frames(mel_frames), rows = windows * frames;
  // A rank's share under tensor parallel: da = d / T attention columns, heads / T heads, its fc1 rows.
  const int64_t da = attn_width_, heads = c.encoder_attention_heads / tp_world_, ffn = encoder_ffn_;
  const int64_t head_dim = d / c.encoder_attention_heads;
  const float beta = residual_beta();

  // conv1: im2col of the channel-major mel, GEMM (+bias) in dtype, gelu.
  kernels::Im2col1dArgs im;
  im.input = a.mel, im.in_dtype = DType::kF32, im.channels_last = false, im.out = a.cols, im.out_dtype = dt;
  im.out_ld = c.num_mel_bins * 3, im.batch = windows, im.channels = c.num_mel_bins, im.frames = mel_frames;
  im.kernel = 3, im.stride = 1, im.padding = 1;
  RETURN_IF_ERROR(kernels::im2col_1d_cuda(im, s));
  GemmCudaArgs g;
  g.m = windows * mel_frames, g.n = d, g.k = c.num_mel_bins * 3, g.a = a.cols, g.lda = g.k, g.w = w.conv1_w;
  g.ldw = g.k, g.in_dtype = dt, g.d = a.conv1, g.ldd = d, g.out_dtype = dt, g.bias = w.conv1_b;
  RETURN_IF_ERROR(gemm_->run(g, s));
  RETURN_IF_ERROR(kernels::activation_cuda(kernels::Activation::kGelu, a.conv1, dt, windows * mel_frames * d, s));
  // conv2 (stride 2) over conv1's frame rows, into the f32 stream; then gelu + positions.
  im = kernels::Im2col1dArgs{};
  im.input = a.conv1, im.in_dtype = dt, im.channels_last = true, im.in_ld = d, im.out = a.cols, im.out_dtype = dt;
  im.out_ld = d * 3, im.batch = windows, im.channels = d, im.frames = mel_frames, im.kernel = 3, im.stride = 2;
  im.padding = 1;
  RETURN_IF_ERROR(kernels::im2col_1d_cuda(im, s));
  g = GemmCudaArgs{};
  g.m = rows, g.n = d, g.k = 3 * d, g.a = a.cols, g.lda = 3 * d, g.w = w.conv2_w, g.ldw = 3 * d, g.in_dtype = dt;
  g.d = a.x, g.ldd = d, g.out_dtype = DType::kF32, g.bias = w.conv2_b;
  RETURN_IF_ERROR(gemm_->run(g, s));
  RETURN_IF_ERROR(whisper_cuda_kernels::encoder_gelu_positions(a.x, w.encoder_positions, dt, windows, frames, d, s));

  for (const BlockWeightsCuda& b : w.encoder) {
    kernels::LayerNormCudaArgs ln;
    ln.x = a.x, ln.x_ld = d, ln.weight = b.ln1_w, ln.bias = b.ln1_b, ln.eps = c.layer_norm_eps, ln.rows = rows;
    ln.cols = d, ln.y = a.normed, ln.y_dtype = dt, ln.y_ld = d;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = 3 * da, g.k = d, g.a = a.normed, g.lda = d, g.w = b.qkv_w, g.ldw = d, g.in_dtype = dt;
    g.d = a.qkv, g.ldd = 3 * da, g.out_dtype = dt, g.bias = b.qkv_b;
    RETURN_IF_ERROR(gemm_->run(g, s));
    kernels::AttentionKvArgs at;
    at.q = a.qkv, at.q_ld = 3 * da, at.k = static_cast<const char*>(a.qkv) + e * da;
    at.v = static_cast<const char*>(a.qkv) + 2 * e * da, at.kv_ld = 3 * da, at.kv_batch_stride = frames;
    at.out = a.context, at.out_ld = da, at.dtype = dt, at.batch = windows, at.q_len = frames, at.kv_len = frames;
    at.heads = heads, at.head_dim = head_dim, at.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    RETURN_IF_ERROR(kernels::attention_kv_cuda(at, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = d, g.k = da, g.a = a.context, g.lda = da, g.w = b.out_w, g.ldw = da, g.in_dtype = dt;
    g.d = a.x, g.ldd = d, g.out_dtype = DType::kF32, g.bias = b.out_b, g.beta = beta;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(reduce_residual(rows));
    ln.weight = b.ln2_w, ln.bias = b.ln2_b;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = ffn, g.k = d, g.a = a.normed, g.lda = d, g.w = b.fc1_w, g.ldw = d, g.in_dtype = dt;
    g.d = a.mlp, g.ldd = ffn, g.out_dtype = dt, g.bias = b.fc1_b;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(kernels::activation_cuda(c.activation_function, a.mlp, dt, rows * ffn, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = d, g.k = ffn, g.a = a.mlp, g.lda = ffn, g.w = b.fc2_w, g.ldw = ffn, g.in_dtype = dt;
    g.d = a.x, g.ldd = d, g.out_dtype = DType::kF32, g.bias = b.fc2_b, g.beta = beta;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(reduce_residual(rows));
  }
  kernels::LayerNormCudaArgs ln;
  ln.x = a.x, ln.x_ld = d, ln.weight = w.encoder_ln_w, ln.bias = w.encoder_ln_b, ln.eps = c.layer_norm_eps;
  ln.rows = rows, ln.cols = d, ln.y = out, ln.y_dtype = dt, ln.y_ld = d;
  return kernels::layer_norm_cuda(ln, s);
}

// ------------------------------------------------------------------------------------ decoder

Status WhisperCudaModel::compute_cross_kv(int64_t row0, int64_t count, const void* encoder_rows, int64_t frames) {
  const WhisperConfig& c = config_;
  const DType dt = options_.dtype;
  const size_t e = dtype_size(dt);
  // A rank computes the K/V of its heads only (da = d / T columns).
  const int64_t d = c.d_model, da = attn_width_, heads = c.decoder_attention_heads / tp_world_;
  const bool compressed = options_.cross_kv != KvStorage::kSame;
  cudaStream_t s = stream_.get();
  // Compressed: K and V go through the (idle between calls) qkv activation buffer, then quantize_kv.
  void* scratch_k = act_->qkv;
  void* scratch_v = static_cast<char*>(act_->qkv) + e * options_.max_batch * frames_max_ * da;
  for (size_t l = 0; l < weights_->decoder.size(); ++l) {
    const LayerWeights& w = weights_->decoder[l];
    void* k_dst = static_cast<char*>(state_->cross_k[l]) + (compressed ? 1 : e) * row0 * frames_max_ * da;
    void* v_dst = static_cast<char*>(state_->cross_v[l]) + (compressed ? 1 : e) * row0 * frames_max_ * da;
    GemmCudaArgs g;
    g.m = count * frames, g.n = da, g.k = d, g.a = encoder_rows, g.lda = d, g.w = w.cross_k_w, g.ldw = d;
    g.in_dtype = dt, g.d = compressed ? scratch_k : k_dst, g.ldd = da, g.out_dtype = dt;
    RETURN_IF_ERROR(gemm_->run(g, s));
    g.w = w.cross_v_w, g.bias = w.cross_v_b, g.d = compressed ? scratch_v : v_dst;
    RETURN_IF_ERROR(gemm_->run(g, s));
    if (compressed) {
      kernels::QuantizeKvArgs q;
      q.src = scratch_k, q.src_ld = da, q.dtype = dt, q.dst = k_dst, q.dst_ld = da, q.dst_batch_stride = frames_max_;
      q.storage = options_.cross_kv, q.scale = state_->k_scale[l] + row0 * heads, q.batch = count, q.rows = frames;
      q.heads = heads, q.head_dim = da / heads;
      RETURN_IF_ERROR(kernels::quantize_kv(q, s));
      q.src = scratch_v, q.dst = v_dst, q.scale = state_->v_scale[l] + row0 * heads;
      RETURN_IF_ERROR(kernels::quantize_kv(q, s));
    }
  }
  return ok_status();
}

Status WhisperCudaModel::decoder_forward(int64_t row0, int64_t batch, int64_t n, int64_t logit_rows) {
  const WhisperConfig& c = config_;
  const DType dt = options_.dtype;
  const size_t e = dtype_size(dt);
  const size_t ce = options_.cross_kv == KvStorage::kSame ? e : 1;
  const Activations& a = *act_;
  const Weights& w = *weights_;
  cudaStream_t s = stream_.get();
  const int64_t mb = options_.max_batch, d = c.d_model, rows = batch * n, ffn = decoder_ffn_;
  // A rank's share under tensor parallel: its heads (da = d / T columns of q, k, v, caches) and fc1 rows.
  const int64_t da = attn_width_, heads = c.decoder_attention_heads / tp_world_;
  const int64_t head_dim = d / c.decoder_attention_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), beta = residual_beta();
  const int32_t* positions = a.ints;
  const int32_t* self_lengths = a.ints + mb;
  const int32_t* cross_lengths = a.ints + 2 * mb;
  const int32_t* ln_rows = a.ints + 3 * mb;
  const int32_t* ids = a.ints + 5 * mb;

  RETURN_IF_ERROR(whisper_cuda_kernels::decoder_embedding(ids, positions, batch, n, w.tokens, w.decoder_positions, dt,
                                                          c.vocab_size, c.max_target_positions, d, a.x, s));
  for (size_t l = 0; l < w.decoder.size(); ++l) {
    const LayerWeights& lw = w.decoder[l];
    const BlockWeightsCuda& b = lw.self;
    void* cache_k = static_cast<char*>(state_->self_k[l]) + e * row0 * capacity_ * da;
    void* cache_v = static_cast<char*>(state_->self_v[l]) + e * row0 * capacity_ * da;
    // Self-attention: LN, QKV, append k/v at each row's position, attend over the cache.
    kernels::LayerNormCudaArgs ln;
    ln.x = a.x, ln.x_ld = d, ln.weight = b.ln1_w, ln.bias = b.ln1_b, ln.eps = c.layer_norm_eps, ln.rows = rows;
    ln.cols = d, ln.y = a.normed, ln.y_dtype = dt, ln.y_ld = d;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
    GemmCudaArgs g;
    g.m = rows, g.n = 3 * da, g.k = d, g.a = a.normed, g.lda = d, g.w = b.qkv_w, g.ldw = d, g.in_dtype = dt;
    g.d = a.qkv, g.ldd = 3 * da, g.out_dtype = dt, g.bias = b.qkv_b;
    RETURN_IF_ERROR(gemm_->run(g, s));
    kernels::KvCacheAppendArgs ap;
    ap.k = static_cast<const char*>(a.qkv) + e * da, ap.v = static_cast<const char*>(a.qkv) + 2 * e * da;
    ap.src_ld = 3 * da, ap.k_cache = cache_k, ap.v_cache = cache_v, ap.dtype = dt, ap.batch = batch, ap.n = n;
    ap.capacity = capacity_, ap.width = da, ap.positions = positions;
    RETURN_IF_ERROR(kernels::kv_cache_append(ap, s));
    kernels::AttentionKvArgs at;
    at.q = a.qkv, at.q_ld = 3 * da, at.k = cache_k, at.v = cache_v, at.kv_ld = da, at.kv_batch_stride = capacity_;
    at.out = a.context, at.out_ld = da, at.dtype = dt, at.batch = batch, at.q_len = n, at.kv_len = capacity_;
    at.heads = heads, at.head_dim = head_dim, at.scale = scale, at.kv_lengths = self_lengths, at.causal = true;
    at.workspace = a.attention_ws, at.workspace_bytes = a.attention_ws_bytes;
    RETURN_IF_ERROR(kernels::attention_kv_cuda(at, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = d, g.k = da, g.a = a.context, g.lda = da, g.w = b.out_w, g.ldw = da, g.in_dtype = dt;
    g.d = a.x, g.ldd = d, g.out_dtype = DType::kF32, g.bias = b.out_b, g.beta = beta;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(reduce_residual(rows));

    // Cross-attention over the row's encoder K/V (computed when the row joined).
    ln.weight = lw.cross_ln_w, ln.bias = lw.cross_ln_b;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = da, g.k = d, g.a = a.normed, g.lda = d, g.w = lw.cross_q_w, g.ldw = d, g.in_dtype = dt;
    g.d = a.qkv, g.ldd = da, g.out_dtype = dt, g.bias = lw.cross_q_b;
    RETURN_IF_ERROR(gemm_->run(g, s));
    at = kernels::AttentionKvArgs{};
    at.q = a.qkv, at.q_ld = da;
    at.k = static_cast<const char*>(state_->cross_k[l]) + ce * row0 * frames_max_ * da;
    at.v = static_cast<const char*>(state_->cross_v[l]) + ce * row0 * frames_max_ * da;
    at.kv_ld = da, at.kv_batch_stride = frames_max_, at.out = a.context, at.out_ld = da, at.dtype = dt;
    at.storage = options_.cross_kv;
    if (options_.cross_kv != KvStorage::kSame) {
      at.k_scale = state_->k_scale[l] + row0 * heads, at.v_scale = state_->v_scale[l] + row0 * heads;
    }
    at.batch = batch, at.q_len = n, at.kv_len = frames_max_, at.heads = heads, at.head_dim = head_dim;
    at.scale = scale, at.kv_lengths = cross_lengths;
    at.workspace = a.attention_ws, at.workspace_bytes = a.attention_ws_bytes;
    RETURN_IF_ERROR(kernels::attention_kv_cuda(at, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = d, g.k = da, g.a = a.context, g.lda = da, g.w = lw.cross_out_w, g.ldw = da, g.in_dtype = dt;
    g.d = a.x, g.ldd = d, g.out_dtype = DType::kF32, g.bias = lw.cross_out_b, g.beta = beta;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(reduce_residual(rows));

    // MLP.
    ln.weight = b.ln2_w, ln.bias = b.ln2_b;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = ffn, g.k = d, g.a = a.normed, g.lda = d, g.w = b.fc1_w, g.ldw = d, g.in_dtype = dt;
    g.d = a.mlp, g.ldd = ffn, g.out_dtype = dt, g.bias = b.fc1_b;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(kernels::activation_cuda(c.activation_function, a.mlp, dt, rows * ffn, s));
    g = GemmCudaArgs{};
    g.m = rows, g.n = d, g.k = ffn, g.a = a.mlp, g.lda = ffn, g.w = b.fc2_w, g.ldw = ffn, g.in_dtype = dt;
    g.d = a.x, g.ldd = d, g.out_dtype = DType::kF32, g.bias = b.fc2_b, g.beta = beta;
    RETURN_IF_ERROR(gemm_->run(g, s));
    RETURN_IF_ERROR(reduce_residual(rows));
  }
  // Final layer norm of the rows whose logits are wanted (gathered), then logits = h @ lm_head^T in f32.
  kernels::LayerNormCudaArgs ln;
  ln.x = a.x, ln.x_ld = d, ln.row_index = ln_rows, ln.weight = w.decoder_ln_w, ln.bias = w.decoder_ln_b;
  ln.eps = c.layer_norm_eps, ln.rows = logit_rows, ln.cols = d, ln.y = a.normed, ln.y_dtype = dt, ln.y_ld = d;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  GemmCudaArgs g;
  g.m = logit_rows, g.n = c.vocab_size, g.k = d, g.a = a.normed, g.lda = d, g.w = w.lm_head, g.ldw = d;
  g.in_dtype = dt, g.d = a.logits, g.ldd = c.vocab_size, g.out_dtype = DType::kF32;
  return gemm_->run(g, s);
}

float WhisperCudaModel::residual_beta() const {
  // Rank 0 adds its partial sums onto the f32 stream, the other ranks overwrite their copy with theirs, so the
  // all-reduce after each row-parallel GEMM leaves x + every rank's part (models/common/tensor_parallel.h).
  return tp_rank_ == 0 ? 1.0f : 0.0f;
}

Status WhisperCudaModel::reduce_residual(int64_t rows) {
  if (options_.tp_collective == nullptr) return ok_status();
  return options_.tp_collective->all_reduce_sum(tp_rank_, act_->x, rows * config_.d_model, DType::kF32, stream_.get());
}

Status WhisperCudaModel::upload_inputs(int64_t id_count) {
  const int64_t mb = options_.max_batch;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(act_->ints, pinned_ints_.data(), sizeof(int32_t) * (5 * mb + id_count),
                                       cudaMemcpyHostToDevice, stream_.get()));
  return ok_status();
}

Status WhisperCudaModel::copy_logits(int64_t rows, float* out) {
  const size_t bytes = sizeof(float) * rows * config_.vocab_size;
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pinned_logits_.data(), act_->logits, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  RETURN_IF_ERROR(stream_.synchronize());
  std::memcpy(out, pinned_logits_.data(), bytes);
  return ok_status();
}

Status WhisperCudaModel::capture_graphs() {
  cudaStream_t s = stream_.get();
  // Eager runs first (padding inputs: position 0, one visible key): they check that every kernel takes the
  // shapes and let cuBLASLt choose (and the wrapper cache) every algorithm, so the captures make no heuristic
  // calls. They write position 0 of rows that hold no request yet.
  const int64_t mb = options_.max_batch;
  int32_t* in = pinned_ints_.data_as<int32_t>();
  for (int64_t bucket : buckets_) {
    for (int64_t i = 0; i < bucket; ++i) {
      in[i] = 0, in[mb + i] = 1, in[2 * mb + i] = 1, in[3 * mb + i] = static_cast<int32_t>(i), in[5 * mb + i] = 0;
    }
    RETURN_IF_ERROR(upload_inputs(bucket));
    RETURN_IF_ERROR(decoder_forward(0, bucket, 1, bucket));
    RETURN_IF_ERROR(stream_.synchronize());  // the next bucket rewrites the pinned inputs
  }
  if (!options_.cuda_graphs) return ok_status();
  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
  for (int64_t bucket : buckets_) {
    cudaGraph_t graph = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    Status forward = decoder_forward(0, bucket, 1, bucket);
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (!forward.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return forward.with_context("capturing the decoder step graph");
    }
    CUDA_RETURN_IF_ERROR(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_RETURN_IF_ERROR(instantiated);
    graphs_[bucket] = exec;
    CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, s));
  }
  RETURN_IF_ERROR(stream_.synchronize());
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
  memory_.graph_bytes = free_before > free_after ? free_before - free_after : 0;
  return ok_status();
}

int64_t WhisperCudaModel::bucket_for(int64_t n) const {
  for (int64_t b : buckets_) {
    if (b >= n) return b;
  }
  return buckets_.back();
}

}  // namespace mmserve::models
