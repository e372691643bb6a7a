// LlavaCudaVision (see llava_cuda.h): load (the tower's and projector's tensors, converted on the host), the plan of
// the device buffers, the forward of llava.cpp's encode_images, one kernel or GEMM per step, and the projector's LoRA
// deltas with their device cache.
#include "models/llava/llava_cuda.h"

#include <algorithm>
#include <cstring>

#include "core/cuda/cuda_status.h"
#include "core/json_config.h"
#include "core/safetensors.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "kernels/patch_embed/patch_embed_cuda.h"
#include "models/llama/llama_cuda_kernels.h"
#include "models/llava/llava_cuda_kernels.h"

namespace mmserve::models {
namespace {

// n host f32 values to `dst` on the device in `dtype` (f32, or bf16/f16 converted on the host through `half`).
Status upload_as(const float* src, int64_t n, DType dtype, void* dst, std::vector<uint16_t>& half) {
  if (dtype == DType::kF32) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return ok_status();
  }
  half.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) half[i] = dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
  CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, half.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return ok_status();
}

// One device tensor to fill: from a host f32 tensor (load) or random (benchmarks).
struct Job {
  Tensor source;  // empty for random weights
  int64_t numel = 0;
  DType dtype = DType::kF32;
  const void** target = nullptr;
  bool norm = false;  // random: ones
};

// Every tensor the tower and projector need, in `dtype` but the f32 norms and the f32 biases of the GEMMs that write
// f32 (the blocks' residual stream, linear_2's features); the blocks past `layers` are left out. `tower` and
// `weights` supply the host tensors (null for random weights).
std::vector<Job> plan_jobs(const LlavaConfig& c, int64_t layers, DType dt, const ClipVisionTower* tower,
                           const F32Weights* weights, const std::string& projector,
                           std::vector<EncoderBlockCudaWeights>& blocks, const void** class_embedding,
                           const void** patch_weight, const void** positions, const float** pre_ln_w,
                           const float** pre_ln_b, const void** l1w, const void** l1b, const void** l2w,
                           const float** l2b) {
  const ClipVisionConfig& v = c.vision;
  const int64_t vh = v.hidden_size, vi = v.intermediate_size, h = c.text.hidden_size;
  const int64_t in = vh * static_cast<int64_t>(c.feature_layers.size());
  std::vector<Job> jobs;
  auto f32 = [](const float** p) { return reinterpret_cast<const void**>(p); };
  auto add = [&](const Tensor& t, int64_t n, DType d, const void** target, bool norm = false) {
    jobs.push_back({t, n, d, target, norm});
  };
  auto host = [&](const std::string& name) { return weights != nullptr ? weights->get(name) : Tensor(); };
  blocks.assign(static_cast<size_t>(layers), EncoderBlockCudaWeights());
  for (int64_t l = 0; l < layers; ++l) {
    EncoderBlockCudaWeights& b = blocks[static_cast<size_t>(l)];
    const EncoderBlockWeights* s = tower != nullptr ? &tower->blocks()[static_cast<size_t>(l)] : nullptr;
    auto pick = [&](Tensor EncoderBlockWeights::*m) { return s != nullptr ? s->*m : Tensor(); };
    add(pick(&EncoderBlockWeights::ln1_weight), vh, DType::kF32, f32(&b.ln1_w), true);
    add(pick(&EncoderBlockWeights::ln1_bias), vh, DType::kF32, f32(&b.ln1_b));
    add(pick(&EncoderBlockWeights::ln2_weight), vh, DType::kF32, f32(&b.ln2_w), true);
    add(pick(&EncoderBlockWeights::ln2_bias), vh, DType::kF32, f32(&b.ln2_b));
    add(pick(&EncoderBlockWeights::qkv_weight), 3 * vh * vh, dt, &b.qkv_w);
    add(pick(&EncoderBlockWeights::qkv_bias), 3 * vh, dt, &b.qkv_b);
    add(pick(&EncoderBlockWeights::out_weight), vh * vh, dt, &b.out_w);
    add(pick(&EncoderBlockWeights::out_bias), vh, DType::kF32, f32(&b.out_b));
    add(pick(&EncoderBlockWeights::fc1_weight), vi * vh, dt, &b.fc1_w);
    add(pick(&EncoderBlockWeights::fc1_bias), vi, dt, &b.fc1_b);
    add(pick(&EncoderBlockWeights::fc2_weight), vh * vi, dt, &b.fc2_w);
    add(pick(&EncoderBlockWeights::fc2_bias), vh, DType::kF32, f32(&b.fc2_b));
  }
  const std::string vision = tower != nullptr ? tower->prefix() : std::string();
  add(host(vision + "embeddings.class_embedding"), vh, dt, class_embedding);
  add(host(vision + "embeddings.patch_embedding.weight"), vh * v.num_channels * v.patch_size * v.patch_size, dt,
      patch_weight);
  add(host(vision + "embeddings.position_embedding.weight"), (v.num_patches() + 1) * vh, dt, positions);
  add(host(vision + "pre_layrnorm.weight"), vh, DType::kF32, f32(pre_ln_w), true);
  add(host(vision + "pre_layrnorm.bias"), vh, DType::kF32, f32(pre_ln_b));
  add(host(projector + "linear_1.weight"), h * in, dt, l1w);
  add(host(projector + "linear_2.weight"), h * h, dt, l2w);
  if (c.projector_bias) {
    add(host(projector + "linear_1.bias"), h, dt, l1b);
    add(host(projector + "linear_2.bias"), h, DType::kF32, f32(l2b));
  }
  return jobs;
}

}  // namespace

LlavaCudaVision::~LlavaCudaVision() {
  if (gemm_workspace_ != nullptr) cudaFree(gemm_workspace_);
}

Status LlavaCudaVision::init(const LlavaConfig& config, const LlavaCudaVisionOptions& options) {
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16 && options.dtype != DType::kF32) {
    return unimplemented(std::string("LLaVA's vision tower on the GPU runs in bf16, f16 or f32, not ") +
                         dtype_name(options.dtype));
  }
  if (options.max_images <= 0) return invalid_argument("max_images must be positive");
  config_ = config;
  options_ = options;
  layers_ = *std::max_element(config.feature_layers.begin(), config.feature_layers.end());
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  RETURN_IF_ERROR(stream_.init());
  CUDA_RETURN_IF_ERROR(cudaMalloc(&gemm_workspace_, kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  ASSIGN_OR_RETURN(gemm_,
                   kernels::CublasLtGemm::create(gemm_workspace_, kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  // Buffers for max_images.
  const ClipVisionConfig& v = config.vision;
  const DType d = options.dtype;
  const int64_t n = options.max_images, p = v.num_patches(), seq = p + 1, vh = v.hidden_size;
  const int64_t t = config.tokens_per_image(), h = config.text.hidden_size;
  const int64_t in = vh * static_cast<int64_t>(config.feature_layers.size());
  const int64_t patch_cols = v.num_channels * v.patch_size * v.patch_size;
  const std::vector<size_t> sizes = {storage_bytes(DType::kF32, n * v.num_channels * v.image_size * v.image_size),
                                     storage_bytes(d, n * p * patch_cols),
                                     storage_bytes(DType::kF32, n * p * vh),
                                     storage_bytes(DType::kF32, n * seq * vh),
                                     storage_bytes(d, n * seq * vh),
                                     storage_bytes(d, n * seq * 3 * vh),
                                     storage_bytes(d, n * seq * vh),
                                     storage_bytes(d, n * seq * v.intermediate_size),
                                     storage_bytes(d, n * t * in),
                                     storage_bytes(d, n * t * h),
                                     storage_bytes(DType::kF32, n * t * h)};
  size_t total = 0;
  for (size_t b : sizes) total += DeviceArena::aligned(b) + DeviceArena::kAlignment;
  RETURN_IF_ERROR(buffers_.init(total));
  ASSIGN_OR_RETURN(pixels_, buffers_.allocate_array<float>(n * v.num_channels * v.image_size * v.image_size));
  ASSIGN_OR_RETURN(patches_, buffers_.allocate(storage_bytes(d, n * p * patch_cols)));
  ASSIGN_OR_RETURN(patch_out_, buffers_.allocate_array<float>(n * p * vh));
  ASSIGN_OR_RETURN(block_.x, buffers_.allocate_array<float>(n * seq * vh));
  ASSIGN_OR_RETURN(block_.normed, buffers_.allocate(storage_bytes(d, n * seq * vh)));
  ASSIGN_OR_RETURN(block_.qkv, buffers_.allocate(storage_bytes(d, n * seq * 3 * vh)));
  ASSIGN_OR_RETURN(block_.context, buffers_.allocate(storage_bytes(d, n * seq * vh)));
  ASSIGN_OR_RETURN(block_.mlp, buffers_.allocate(storage_bytes(d, n * seq * v.intermediate_size)));
  ASSIGN_OR_RETURN(selected_, buffers_.allocate(storage_bytes(d, n * t * in)));
  ASSIGN_OR_RETURN(mid_, buffers_.allocate(storage_bytes(d, n * t * h)));
  ASSIGN_OR_RETURN(features_, buffers_.allocate_array<float>(n * t * h));
  return ok_status();
}

StatusOr<std::unique_ptr<LlavaCudaVision>> LlavaCudaVision::load(const std::string& model_dir,
                                                                 const LlavaCudaVisionOptions& options) {
  const std::string config_path = model_dir + "/config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  ASSIGN_OR_RETURN(LlavaConfig config, parse_llava_config(json, config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  ASSIGN_OR_RETURN(LlavaLayout layout, detect_llava_layout(*store, model_dir));
  WeightCheckOptions check;
  check.ignored_suffixes = {"rotary_emb.inv_freq", "position_ids"};
  RETURN_IF_ERROR(check_weights(*store, llava_weight_specs(config, layout), check).with_context(model_dir));
  // The tower's tensors in f32 on the host (q/k/v fused by ClipVisionTower), then converted and uploaded.
  ASSIGN_OR_RETURN(std::unique_ptr<F32Weights> host, F32Weights::load(*store, llava_vision_specs(config, layout)));
  const ClipVisionTower tower = ClipVisionTower::bind(config.vision, *host, layout.vision);
  std::unique_ptr<LlavaCudaVision> m(new LlavaCudaVision());
  RETURN_IF_ERROR(m->init(config, options));
  if (config.is_next()) {  // packed on the host with the tiles' features (llava_next.h)
    const Tensor newline = host->get(layout.newline);
    m->image_newline_.assign(newline.data_as<float>(), newline.data_as<float>() + config.text.hidden_size);
  }
  std::vector<Job> jobs = plan_jobs(config, m->layers_, options.dtype, &tower, host.get(), layout.projector, m->blocks_,
                                    &m->class_embedding_, &m->patch_weight_, &m->positions_, &m->pre_ln_w_,
                                    &m->pre_ln_b_, &m->linear1_w_, &m->linear1_b_, &m->linear2_w_, &m->linear2_b_);
  size_t total = 0;
  for (const Job& j : jobs) total += DeviceArena::aligned(storage_bytes(j.dtype, j.numel));
  RETURN_IF_ERROR(m->weights_.init(total));
  std::vector<uint16_t> half;
  for (const Job& j : jobs) {
    if (j.source.numel() != j.numel) return internal_error("LLaVA tower: a tensor of an unexpected size");
    ASSIGN_OR_RETURN(void* dst, m->weights_.allocate(storage_bytes(j.dtype, j.numel)));
    RETURN_IF_ERROR(upload_as(j.source.data_as<float>(), j.numel, j.dtype, dst, half));
    *j.target = dst;
  }
  return m;
}

StatusOr<std::unique_ptr<LlavaCudaVision>> LlavaCudaVision::random(const LlavaConfig& config,
                                                                   const LlavaCudaVisionOptions& options,
                                                                   uint64_t seed) {
  std::unique_ptr<LlavaCudaVision> m(new LlavaCudaVision());
  RETURN_IF_ERROR(m->init(config, options));
  if (config.is_next()) m->image_newline_.assign(static_cast<size_t>(config.text.hidden_size), 0.01f);
  std::vector<Job> jobs = plan_jobs(config, m->layers_, options.dtype, nullptr, nullptr, "", m->blocks_,
                                    &m->class_embedding_, &m->patch_weight_, &m->positions_, &m->pre_ln_w_,
                                    &m->pre_ln_b_, &m->linear1_w_, &m->linear1_b_, &m->linear2_w_, &m->linear2_b_);
  size_t total = 0;
  for (const Job& j : jobs) total += DeviceArena::aligned(storage_bytes(j.dtype, j.numel));
  RETURN_IF_ERROR(m->weights_.init(total));
  for (const Job& j : jobs) {
    ASSIGN_OR_RETURN(void* dst, m->weights_.allocate(storage_bytes(j.dtype, j.numel)));
    RETURN_IF_ERROR(fill_weights(dst, j.dtype, j.numel, ++seed, j.norm ? 0.0f : 0.02f, 1.0f, m->stream_.get()));
    *j.target = dst;
  }
  RETURN_IF_ERROR(m->stream_.synchronize());
  return m;
}

Status LlavaCudaVision::forward(int64_t n, const ProjectorLora* lora) {
  const LlavaConfig& c = config_;
  const ClipVisionConfig& v = c.vision;
  const DType dt = options_.dtype;
  cudaStream_t s = stream_.get();
  const int64_t p = v.num_patches(), seq = p + 1, vh = v.hidden_size, rows = n * seq, h = c.text.hidden_size;
  const int64_t t = c.tokens_per_image(), in = vh * static_cast<int64_t>(c.feature_layers.size());
  const int64_t patch_cols = v.num_channels * v.patch_size * v.patch_size;
  // Embeddings: [class; conv(pixels)] + positions, then pre_layrnorm (in place, f32).
  RETURN_IF_ERROR(
      kernels::im2col_patches_cuda(pixels_, n, v.num_channels, v.image_size, v.patch_size, patches_, dt, s));
  kernels::GemmCudaArgs g;
  g.m = n * p, g.n = vh, g.k = patch_cols, g.a = patches_, g.lda = patch_cols, g.w = patch_weight_, g.ldw = patch_cols;
  g.in_dtype = dt, g.d = patch_out_, g.ldd = vh, g.out_dtype = DType::kF32;
  RETURN_IF_ERROR(gemm_->run(g, s));
  RETURN_IF_ERROR(
      kernels::assemble_vision_embeddings_cuda(patch_out_, class_embedding_, positions_, dt, n, p, vh, block_.x, s));
  kernels::LayerNormCudaArgs ln;
  ln.x = block_.x, ln.x_ld = vh, ln.weight = pre_ln_w_, ln.bias = pre_ln_b_, ln.eps = v.layer_norm_eps;
  ln.rows = rows, ln.cols = vh, ln.y = block_.x, ln.y_dtype = DType::kF32, ln.y_ld = vh;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  // hidden_states[i] of each listed layer, side by side in the projector's input.
  auto select = [&](int64_t index) -> Status {
    for (size_t j = 0; j < c.feature_layers.size(); ++j) {
      if (c.feature_layers[j] != index) continue;
      RETURN_IF_ERROR(select_vision_features_cuda(block_.x, n, seq, c.drop_cls ? 1 : 0, vh, selected_, dt, in,
                                                  static_cast<int64_t>(j) * vh, s));
    }
    return ok_status();
  };
  RETURN_IF_ERROR(select(0));
  EncoderBlockCudaArgs args;
  args.rows = rows, args.seq = seq, args.batch = n, args.eps = v.layer_norm_eps, args.activation = v.hidden_act;
  args.dtype = dt;
  const EncoderBlockCudaShape shape{vh, v.num_attention_heads, vh / v.num_attention_heads, v.intermediate_size};
  for (int64_t l = 0; l < layers_; ++l) {
    RETURN_IF_ERROR(encoder_block_cuda(blocks_[static_cast<size_t>(l)], block_, shape, args, *gemm_, s));
    RETURN_IF_ERROR(select(l + 1));
  }
  // The projector: linear_2(act(linear_1(selected))), the output f32; an adapter's deltas join each linear's output
  // (linear_1's before the activation, as PEFT's lora.Linear wraps the linear alone).
  g = kernels::GemmCudaArgs{};
  g.m = n * t, g.n = h, g.k = in, g.a = selected_, g.lda = in, g.w = linear1_w_, g.ldw = in, g.in_dtype = dt;
  g.d = mid_, g.ldd = h, g.out_dtype = dt, g.bias = linear1_b_;
  RETURN_IF_ERROR(gemm_->run(g, s));
  if (lora != nullptr && lora->rank[0] > 0) RETURN_IF_ERROR(add_projector_delta(*lora, 0, selected_, n * t, mid_, dt));
  RETURN_IF_ERROR(kernels::activation_cuda(c.projector_act, mid_, dt, n * t * h, s));
  g = kernels::GemmCudaArgs{};
  g.m = n * t, g.n = h, g.k = h, g.a = mid_, g.lda = h, g.w = linear2_w_, g.ldw = h, g.in_dtype = dt;
  g.d = features_, g.ldd = h, g.out_dtype = DType::kF32, g.bias = linear2_b_;
  RETURN_IF_ERROR(gemm_->run(g, s));
  if (lora != nullptr && lora->rank[1] > 0) {
    RETURN_IF_ERROR(add_projector_delta(*lora, 1, mid_, n * t, features_, DType::kF32));
  }
  return ok_status();
}

Status LlavaCudaVision::add_projector_delta(const ProjectorLora& lora, int k, const void* x, int64_t rows, void* y,
                                            DType y_dtype) {
  // linear_1: [in -> h], linear_2: [h -> h]; x is the linear's input in the model's dtype.
  const int64_t h = config_.text.hidden_size;
  const int64_t in = k == 0 ? config_.vision.hidden_size * static_cast<int64_t>(config_.feature_layers.size()) : h;
  const int64_t r = lora.rank[k];
  kernels::GemmCudaArgs g;
  g.m = rows, g.n = r, g.k = in, g.a = x, g.lda = in, g.w = lora.a[k], g.ldw = in, g.in_dtype = options_.dtype;
  g.d = lora.scratch, g.ldd = r, g.out_dtype = y_dtype;  // the rank values in y's dtype, B's too (see the header)
  RETURN_IF_ERROR(gemm_->run(g, stream_.get()));
  g = kernels::GemmCudaArgs{};
  g.m = rows, g.n = h, g.k = r, g.a = lora.scratch, g.lda = r, g.w = lora.b[k], g.ldw = r, g.in_dtype = y_dtype;
  g.d = y, g.ldd = h, g.out_dtype = y_dtype, g.alpha = lora.scale[k], g.beta = 1.0f;
  return gemm_->run(g, stream_.get());
}

void LlavaCudaVision::drop_expired_projector_loras() {
  // Called between encodes (every forward synchronised its stream), so no queued GEMM still reads a freed entry.
  projector_loras_.erase(std::remove_if(projector_loras_.begin(), projector_loras_.end(),
                                        [](const ProjectorLora& e) { return e.adapter.expired(); }),
                         projector_loras_.end());
}

StatusOr<const LlavaCudaVision::ProjectorLora*> LlavaCudaVision::projector_lora(
    const std::shared_ptr<const LoraAdapter>& adapter) {
  drop_expired_projector_loras();
  if (adapter == nullptr || !adapter->adapts_projector()) return nullptr;
  for (ProjectorLora& e : projector_loras_) {
    if (e.id == adapter->id) {
      e.used = ++projector_lora_clock_;
      return &e;
    }
  }
  // A new load: its shapes checked against this projector (a load for another model's would read out of bounds).
  const int64_t h = config_.text.hidden_size;
  const int64_t in = config_.vision.hidden_size * static_cast<int64_t>(config_.feature_layers.size());
  const std::array<std::array<int64_t, 2>, 2> features = {{{in, h}, {h, h}}};
  ProjectorLora entry;
  entry.id = adapter->id, entry.adapter = adapter;
  int64_t r_max = 0;
  size_t total = 0;
  for (int k = 0; k < 2; ++k) {
    const LoraModule& m = adapter->projector[k];
    if (!m.present()) continue;
    if (m.in != features[k][0] || m.out != features[k][1]) {
      return invalid_argument("adapter '" + adapter->name + "': its projector linear_" + std::to_string(k + 1) +
                              " is [" + std::to_string(m.in) + " -> " + std::to_string(m.out) + "], this model's [" +
                              std::to_string(features[k][0]) + " -> " + std::to_string(features[k][1]) + "]");
    }
    if (static_cast<int64_t>(m.a.size()) != m.rank * m.in || static_cast<int64_t>(m.b.size()) != m.out * m.rank) {
      return failed_precondition("adapter '" + adapter->name + "' holds no f32 matrices for its projector linear_" +
                                 std::to_string(k + 1));
    }
    entry.rank[k] = m.rank, entry.scale[k] = m.scale;
    r_max = std::max(r_max, m.rank);
    total += DeviceArena::aligned(storage_bytes(options_.dtype, m.rank * m.in)) +
             DeviceArena::aligned(storage_bytes(k == 0 ? options_.dtype : DType::kF32, m.out * m.rank));
  }
  const int64_t scratch = options_.max_images * config_.tokens_per_image() * r_max;
  total += DeviceArena::aligned(storage_bytes(DType::kF32, scratch));  // f32: the wider of the two dtypes it holds
  if (projector_loras_.size() >= kProjectorLoraEntries) {
    projector_loras_.erase(
        std::min_element(projector_loras_.begin(), projector_loras_.end(),
                         [](const ProjectorLora& x, const ProjectorLora& y) { return x.used < y.used; }));
  }
  entry.memory = std::make_unique<DeviceArena>();
  RETURN_IF_ERROR(entry.memory->init(total));
  std::vector<uint16_t> half;
  for (int k = 0; k < 2; ++k) {
    const LoraModule& m = adapter->projector[k];
    if (!m.present()) continue;
    const DType b_dtype = k == 0 ? options_.dtype : DType::kF32;
    ASSIGN_OR_RETURN(void* a, entry.memory->allocate(storage_bytes(options_.dtype, m.rank * m.in)));
    ASSIGN_OR_RETURN(void* b, entry.memory->allocate(storage_bytes(b_dtype, m.out * m.rank)));
    RETURN_IF_ERROR(upload_as(m.a.data(), m.rank * m.in, options_.dtype, a, half));
    RETURN_IF_ERROR(upload_as(m.b.data(), m.out * m.rank, b_dtype, b, half));
    entry.a[k] = a, entry.b[k] = b;
  }
  ASSIGN_OR_RETURN(entry.scratch, entry.memory->allocate(storage_bytes(DType::kF32, scratch)));
  entry.used = ++projector_lora_clock_;
  projector_loras_.push_back(std::move(entry));
  return &projector_loras_.back();
}

Status LlavaCudaVision::encode_on_device(const float* device_pixels, int64_t n) {
  if (n <= 0 || n > options_.max_images) return invalid_argument("encode_on_device takes 1..max_images images");
  const ClipVisionConfig& v = config_.vision;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pixels_, device_pixels, n * v.num_channels * v.image_size * v.image_size * 4,
                                       cudaMemcpyDeviceToDevice, stream_.get()));
  return forward(n);
}

Status LlavaCudaVision::encode(const float* pixels, int64_t n, float* features) {
  return encode(pixels, n, features, nullptr);
}

Status LlavaCudaVision::encode(const float* pixels, int64_t n, float* features,
                               const std::shared_ptr<const LoraAdapter>& adapter) {
  const ClipVisionConfig& v = config_.vision;
  const int64_t per_image = v.num_channels * v.image_size * v.image_size;
  const int64_t per_features = config_.tokens_per_image() * config_.text.hidden_size;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  // Also without an adapter: the entries of adapters unloaded since the last image are freed here.
  ASSIGN_OR_RETURN(const ProjectorLora* lora, projector_lora(adapter));
  for (int64_t first = 0; first < n; first += options_.max_images) {
    const int64_t m = std::min(options_.max_images, n - first);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pixels_, pixels + first * per_image, m * per_image * sizeof(float),
                                         cudaMemcpyHostToDevice, stream_.get()));
    RETURN_IF_ERROR(forward(m, lora));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(features + first * per_features, features_, m * per_features * sizeof(float),
                                         cudaMemcpyDeviceToHost, stream_.get()));
    RETURN_IF_ERROR(stream_.synchronize());
  }
  return ok_status();
}

}  // namespace mmserve::models
