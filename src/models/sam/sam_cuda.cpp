// SAM on an NVIDIA GPU (see sam_cuda.h): loading (the host model's weights uploaded in the compute dtype), the
// activation plan, the CUDA graphs and the entry points. The forwards are sam_cuda_forward.cpp.
#include "models/sam/sam_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_cuda.h"
#include "kernels/mask_resize/mask_resize_cuda.h"
#include "models/sam/sam_cuda_internal.h"
#include "models/sam/sam_cuda_kernels.h"

namespace mmserve::models {
namespace {

int64_t round_up_pow2(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

constexpr int64_t kTokenBucketMin = 8;

}  // namespace

SamCudaModel::~SamCudaModel() {
  if (dev_) {
    cudaSetDevice(options_.device);
    dev_.reset();
  }
}

cudaStream_t SamCudaModel::stream() const {
  return dev_->stream.get();
}

int64_t SamCudaModel::embedding_floats() const {
  return config_.vision.output_channels * config_.vision.grid() * config_.vision.grid();
}

StatusOr<std::unique_ptr<SamCudaModel>> SamCudaModel::load(const std::string& model_dir,
                                                           const SamCudaOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kF16 && options.dtype != DType::kBF16) {
    return invalid_argument(std::string("SAM on the GPU computes in f32, f16 or bf16, not ") +
                            dtype_name(options.dtype));
  }
  if (options.buckets.empty()) return invalid_argument("at least one batch bucket is needed");
  for (int64_t b : options.buckets) {
    if (b <= 0 || b > 256) return invalid_argument("batch bucket " + std::to_string(b) + " is outside [1, 256]");
  }
  auto model = std::unique_ptr<SamCudaModel>(new SamCudaModel());
  model->options_ = options;
  if (const char* graphs = std::getenv("MMSERVE_CUDA_GRAPHS"); graphs && std::string(graphs) == "0") {
    model->options_.use_graphs = false;
  }
  model->buckets_ = options.buckets;
  std::sort(model->buckets_.begin(), model->buckets_.end());
  model->buckets_.erase(std::unique(model->buckets_.begin(), model->buckets_.end()), model->buckets_.end());
  RETURN_IF_ERROR(set_cuda_device(options.device));
  model->dev_ = std::make_unique<Device>();
  RETURN_IF_ERROR(model->dev_->stream.init());
  {
    // The host model parses and checks the checkpoint (the CPU path's errors) and derives the permuted weights;
    // its f32 copy is freed once everything is on the GPU.
    ASSIGN_OR_RETURN(std::unique_ptr<SamModel> host, SamModel::load(model_dir));
    model->config_ = host->config();
    const SamVisionConfig& v = model->config_.vision;
    if (v.image_size % v.patch_size != 0) return unimplemented(model_dir + ": image_size must be a multiple of patch_size");
    if (v.head_dim() > 128 || model->config_.decoder.hidden_size % 8 != 0) {
      return unimplemented(model_dir + ": the GPU path takes a vision head_dim <= 128 and a decoder hidden_size "
                           "divisible by 8");
    }
    const int64_t sparse_max = SamModel::kPointsMax + 2;  // points + a box (or + HF's pad point)
    model->token_bucket_max_ =
        round_up_pow2(std::max(kTokenBucketMin, 1 + model->config_.decoder.num_mask_tokens() + sparse_max));
    RETURN_IF_ERROR(model->upload_weights(*host));
  }
  RETURN_IF_ERROR(model->plan_activations());
  ASSIGN_OR_RETURN(model->dev_->gemm, kernels::CublasLtGemm::create(model->dev_->a.gemm_workspace,
                                                                    kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  RETURN_IF_ERROR(model->capture_encoder_graphs());
  // One prompt on the (zero) embedding: the smallest decoder bucket's algorithms and graph, before any request.
  SamPrompt click;
  click.points = {{static_cast<float>(model->config_.prompt.image_size) / 2,
                   static_cast<float>(model->config_.prompt.image_size) / 2}};
  click.labels = {1};
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(model->dev_->a.image, 0, sizeof(float) * model->embedding_floats(),
                                       model->dev_->stream.get()));
  auto warm = model->run_decoder(click, true);
  if (!warm.ok()) return warm.status().with_context("decoder warm-up");
  return model;
}

Status SamCudaModel::upload_weights(const SamModel& host) {
  const DType dt = options_.dtype;
  const SamWeights& hw = *host.weights();
  Device& d = *dev_;
  Weights& w = d.w;
  struct Job {
    Tensor source;
    DType dtype;
    const void** target;
  };
  std::vector<Job> jobs;
  std::deque<std::vector<float>> owned;  // derived tensors, alive until uploaded
  auto add = [&](const Tensor& t, DType dtype, const void** target) {
    if (!t.empty()) jobs.push_back({t, dtype, target});
  };
  auto add_f32 = [&](const Tensor& t, const float** target) {
    add(t, DType::kF32, reinterpret_cast<const void**>(target));
  };
  // [rows, cols] -> [cols, rows] (a weight read as W^T by the CPU GEMM, as [N, K] by cuBLASLt).
  auto transposed = [&](const Tensor& t) {
    const int64_t rows = t.size(0), cols = t.size(1);
    owned.emplace_back(static_cast<size_t>(rows * cols));
    const float* src = t.data_as<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) owned.back()[c * rows + r] = src[r * cols + c];
    return Tensor(owned.back().data(), DType::kF32, {cols, rows});
  };
  auto linear = [&](const SamLinear& l, Weights::Linear& out) {
    out.out = l.weight.size(0);
    out.in = l.weight.numel() / out.out;
    add_f32(l.weight, &out.w);
    add_f32(l.bias, &out.b);
  };
  auto attention = [&](const SamAttentionWeights& a, Weights::Attention& out) {
    linear(a.q, out.q);
    linear(a.k, out.k);
    linear(a.v, out.v);
    linear(a.out, out.o);
  };

  // Image encoder.
  const SamVisionWeights& v = hw.vision;
  w.vision.resize(v.layers.size());
  for (size_t i = 0; i < v.layers.size(); ++i) {
    const SamVisionLayerWeights& l = v.layers[i];
    Weights::VisionLayer& o = w.vision[i];
    add_f32(l.block.ln1_weight, &o.ln1_w);
    add_f32(l.block.ln1_bias, &o.ln1_b);
    add_f32(l.block.ln2_weight, &o.ln2_w);
    add_f32(l.block.ln2_bias, &o.ln2_b);
    add(l.block.qkv_weight, dt, &o.qkv_w);
    add(l.block.qkv_bias, dt, &o.qkv_b);
    add(l.block.out_weight, dt, &o.proj_w);
    add_f32(l.block.out_bias, &o.proj_b);
    add(l.block.fc1_weight, dt, &o.fc1_w);
    add(l.block.fc1_bias, dt, &o.fc1_b);
    add(l.block.fc2_weight, dt, &o.fc2_w);
    add_f32(l.block.fc2_bias, &o.fc2_b);
    add_f32(l.rel_pos_h, &o.rel_h);
    add_f32(l.rel_pos_w, &o.rel_w);
    o.window = l.window;
  }
  add(v.patch_weight, dt, &w.patch_w);
  add_f32(v.patch_bias, &w.patch_b);
  add_f32(v.pos_embed, &w.pos_embed);
  add(v.neck_conv1, dt, &w.neck1_w);
  add_f32(v.neck_norm1.weight, &w.neck_ln1_w);
  add_f32(v.neck_norm1.bias, &w.neck_ln1_b);
  add(v.neck_conv2, dt, &w.neck2_w);
  add_f32(v.neck_norm2.weight, &w.neck_ln2_w);
  add_f32(v.neck_norm2.bias, &w.neck_ln2_b);

  // Prompt encoder: the dense path and the image PE on the device, the sparse tables on the host.
  const SamPromptWeights& p = hw.prompt;
  add_f32(p.image_pe, &w.image_pe);
  add_f32(p.no_mask_embed, &w.no_mask);
  const int64_t mic = config_.prompt.mask_input_channels;
  w.mask_conv1 = {nullptr, nullptr, mic / 4, 4};
  add_f32(p.mask_conv1_weight, &w.mask_conv1.w);  // [mic/4, 1, 2, 2] = [mic/4, (c, ky, kx)]
  add_f32(p.mask_conv1_bias, &w.mask_conv1.b);
  w.mask_conv2 = {nullptr, nullptr, mic, mic};
  add_f32(p.mask_conv2_weight, &w.mask_conv2.w);  // [mic, mic/4, 2, 2] = [mic, (c, ky, kx)]
  add_f32(p.mask_conv2_bias, &w.mask_conv2.b);
  linear(p.mask_conv3, w.mask_conv3);
  add_f32(p.mask_norm1.weight, &w.mask_ln1_w);
  add_f32(p.mask_norm1.bias, &w.mask_ln1_b);
  add_f32(p.mask_norm2.weight, &w.mask_ln2_w);
  add_f32(p.mask_norm2.bias, &w.mask_ln2_b);
  auto keep = [&](const Tensor& t) {
    d.host_tables.emplace_back(t.data_as<float>(), t.data_as<float>() + t.numel());
    std::vector<int64_t> shape = t.shape();
    return Tensor(d.host_tables.back().data(), DType::kF32, shape);
  };
  d.host_tables.reserve(4 + p.point_embed.size());  // the views point into these vectors: no reallocation
  d.host_prompt.positional_embedding = keep(p.positional_embedding);
  d.host_prompt.not_a_point_embed = keep(p.not_a_point_embed);
  for (const Tensor& e : p.point_embed) d.host_prompt.point_embed.push_back(keep(e));

  // Mask decoder.
  const SamDecoderWeights& dw = hw.decoder;
  d.output_tokens.assign(dw.output_tokens.data_as<float>(),
                         dw.output_tokens.data_as<float>() + dw.output_tokens.numel());
  w.two_way.resize(dw.layers.size());
  for (size_t i = 0; i < dw.layers.size(); ++i) {
    const SamTwoWayLayerWeights& l = dw.layers[i];
    Weights::TwoWayLayer& o = w.two_way[i];
    attention(l.self_attn, o.self_attn);
    attention(l.cross_token_to_image, o.token_to_image);
    attention(l.cross_image_to_token, o.image_to_token);
    const SamNorm* norms[4] = {&l.norm1, &l.norm2, &l.norm3, &l.norm4};
    for (int n = 0; n < 4; ++n) {
      add_f32(norms[n]->weight, &o.norm_w[n]);
      add_f32(norms[n]->bias, &o.norm_b[n]);
    }
    linear(l.mlp1, o.mlp1);
    linear(l.mlp2, o.mlp2);
  }
  attention(dw.final_attn, w.final_attn);
  add_f32(dw.final_norm.weight, &w.final_norm_w);
  add_f32(dw.final_norm.bias, &w.final_norm_b);
  const Tensor up1 = transposed(dw.upscale1_weight), up2 = transposed(dw.upscale2_weight);
  w.upscale1 = {nullptr, nullptr, up1.size(0), up1.size(1)};
  add_f32(up1, &w.upscale1.w);
  add_f32(dw.upscale1_bias, &w.upscale1.b);
  w.upscale2 = {nullptr, nullptr, up2.size(0), up2.size(1)};
  add_f32(up2, &w.upscale2.w);
  add_f32(dw.upscale2_bias, &w.upscale2.b);
  add_f32(dw.upscale_norm.weight, &w.upscale_norm_w);
  add_f32(dw.upscale_norm.bias, &w.upscale_norm_b);
  w.hypernetworks.resize(dw.hypernetworks.size());
  for (size_t i = 0; i < dw.hypernetworks.size(); ++i) {
    w.hypernetworks[i].resize(dw.hypernetworks[i].size());
    for (size_t j = 0; j < dw.hypernetworks[i].size(); ++j) linear(dw.hypernetworks[i][j], w.hypernetworks[i][j]);
  }
  w.iou_head.resize(dw.iou_head.size());
  for (size_t j = 0; j < dw.iou_head.size(); ++j) linear(dw.iou_head[j], w.iou_head[j]);

  size_t total = 0;
  for (const Job& j : jobs) total += DeviceArena::aligned(storage_bytes(j.dtype, j.source.numel()));
  RETURN_IF_ERROR(d.weight_arena.init(total));
  memory_.weight_bytes = total;
  std::vector<uint16_t> half;
  for (const Job& j : jobs) {
    const int64_t n = j.source.numel();
    ASSIGN_OR_RETURN(void* dst, d.weight_arena.allocate(storage_bytes(j.dtype, n)));
    const float* src = j.source.data_as<float>();
    if (j.dtype == DType::kF32) {
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
      half.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) half[i] = j.dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, half.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
    *j.target = dst;
  }
  return ok_status();
}

Status SamCudaModel::plan_activations() {
  const SamVisionConfig& v = config_.vision;
  const SamMaskDecoderConfig& dc = config_.decoder;
  const size_t e = dtype_size(options_.dtype), f = sizeof(float);
  const int64_t b = buckets_.back(), g = v.grid(), t = g * g, c = v.hidden_size, out = v.output_channels;
  int64_t window_rows = 0, bias_floats = 0;
  for (int64_t i = 0; i < v.num_hidden_layers; ++i) {
    const int64_t window = v.layer_window(i), span = window > 0 ? window : g;
    const int64_t side = window > 0 ? (g + window - 1) / window : 1;
    if (window > 0) window_rows = std::max(window_rows, side * side * window * window);
    if (v.use_rel_pos) {
      bias_floats = std::max(bias_floats, side * side * v.num_attention_heads * span * span * 2 * span);
    }
  }
  const int64_t p = g * g, hid = dc.hidden_size, n = token_bucket_max_, rows = std::max(n, p);
  const int64_t mt = dc.num_mask_tokens(), mic = config_.prompt.mask_input_channels;
  const int64_t widest = std::max(hid, dc.iou_head_hidden_dim);
  // The decoder's attentions: the tokens' attention to the image runs its queries as batch rows of q_len 1
  // (sam_cuda_forward.cpp), whose split-KV partials need workspace; the largest over the token buckets.
  size_t attention_ws = 256;
  for (int64_t bucket = kTokenBucketMin; bucket <= n; bucket *= 2) {
    kernels::AttentionKvArgs probe;
    probe.batch = bucket, probe.q_len = 1, probe.kv_len = p, probe.heads = dc.num_attention_heads;
    probe.head_dim = hid / dc.attention_downsample_rate / dc.num_attention_heads, probe.dtype = DType::kF32;
    probe.kv_shared = true;
    attention_ws = std::max(attention_ws, kernels::attention_kv_cuda_workspace_bytes(probe));
  }
  struct Buffer {
    void** target;
    size_t bytes;
  };
  Activations& a = dev_->a;
  auto fp = [](float** p) { return reinterpret_cast<void**>(p); };
  const std::vector<Buffer> encoder = {
      {fp(&a.pixels), f * b * v.num_channels * v.image_size * v.image_size},
      {&a.patches, e * b * t * v.num_channels * v.patch_size * v.patch_size},
      {fp(&a.x), f * b * t * c},
      {&a.normed, e * b * t * c},
      {&a.qkv, e * b * t * 3 * c},
      {&a.window_qkv, e * b * window_rows * 3 * c},
      {&a.context, e * b * std::max(t, window_rows) * c},
      {&a.mlp, e * b * t * v.mlp_dim},
      {fp(&a.bias), f * b * bias_floats},
      {fp(&a.neck1), f * b * t * out},
      {&a.neck1_h, e * b * t * out},
      {&a.columns, e * b * t * 9 * out},
      {fp(&a.neck2), f * b * t * out},
      {fp(&a.embed_t), f * b * t * out}};
  const std::vector<Buffer> decoder = {
      {fp(&a.image), f * p * hid},       {fp(&a.keys), f * p * hid},        {fp(&a.key_in), f * p * hid},
      {fp(&a.dense), f * p * hid},       {fp(&a.tokens), f * n * hid},      {fp(&a.queries), f * n * hid},
      {fp(&a.query_in), f * n * hid},    {fp(&a.q), f * rows * hid},        {fp(&a.k), f * rows * hid},
      {fp(&a.v), f * rows * hid},        {fp(&a.ctx), f * rows * hid},      {fp(&a.mlp_d), f * n * dc.mlp_dim},
      {fp(&a.up1_tmp), f * p * hid},     {fp(&a.up1), f * 4 * p * (hid / 4)},
      {fp(&a.up2_tmp), f * 4 * p * (hid / 2)}, {fp(&a.up2), f * 16 * p * (hid / 8)},
      {fp(&a.hyper), f * mt * (hid / 8)}, {fp(&a.ff_a), f * widest},      {fp(&a.ff_b), f * widest},
      {fp(&a.masks), f * mt * 16 * p},   {fp(&a.iou), f * mt},              {reinterpret_cast<void**>(&a.kv_len), 4},
      {fp(&a.mask_in), f * 16 * p},      {fp(&a.s2d1), f * 16 * p},         {fp(&a.conv1), f * 4 * p * (mic / 4)},
      {fp(&a.s2d2), f * p * mic},        {fp(&a.conv2), f * p * mic},
      {&a.attention_workspace, attention_ws},
      {&a.gemm_workspace, kernels::CublasLtGemm::kDefaultWorkspaceBytes}};
  size_t total = 0;
  for (const auto* list : {&encoder, &decoder})
    for (const Buffer& buf : *list) total += DeviceArena::aligned(std::max<size_t>(buf.bytes, 1));
  RETURN_IF_ERROR(dev_->activation_arena.init(total));
  for (const auto* list : {&encoder, &decoder}) {
    for (const Buffer& buf : *list) {
      ASSIGN_OR_RETURN(*buf.target, dev_->activation_arena.allocate(std::max<size_t>(buf.bytes, 1)));
    }
  }
  a.attention_workspace_bytes = attention_ws;
  memory_.activation_bytes = total - kernels::CublasLtGemm::kDefaultWorkspaceBytes;
  memory_.workspace_bytes = kernels::CublasLtGemm::kDefaultWorkspaceBytes;
  // Inputs start as zeros: a bucket's padding images and a decoder bucket's padding tokens are then finite.
  CUDA_RETURN_IF_ERROR(cudaMemset(a.pixels, 0, encoder[0].bytes));
  CUDA_RETURN_IF_ERROR(cudaMemset(a.tokens, 0, f * n * hid));
  // Pinned staging: in = [tokens N * hidden | kv length (4 floats) | mask 16 P | embedding P * hidden];
  // out = max(masks + scores, the largest bucket's embeddings).
  RETURN_IF_ERROR(dev_->pinned_in.init(f * (n * hid + 4 + 16 * p + p * hid)));
  RETURN_IF_ERROR(dev_->pinned_out.init(f * std::max(mt * 16 * p + mt, b * t * out)));
  memory_.pinned_bytes = dev_->pinned_in.size() + dev_->pinned_out.size();
  return ok_status();
}

int64_t SamCudaModel::bucket_for(int64_t n) const {
  for (int64_t b : buckets_) {
    if (b >= n) return b;
  }
  return buckets_.back();
}

Status SamCudaModel::capture_encoder_graphs() {
  cudaStream_t s = dev_->stream.get();
  // Eager runs first: every kernel accepts the shapes, and cuBLASLt's algorithms are chosen and cached.
  for (int64_t bucket : buckets_) RETURN_IF_ERROR(vision_forward(bucket));
  RETURN_IF_ERROR(dev_->stream.synchronize());
  if (!options_.use_graphs) return ok_status();
  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
  for (int64_t bucket : buckets_) {
    cudaGraph_t graph = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    Status forward = vision_forward(bucket);
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (!forward.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return forward.with_context("capturing the encoder's CUDA graph");
    }
    CUDA_RETURN_IF_ERROR(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_RETURN_IF_ERROR(instantiated);
    dev_->encoder_graphs[bucket] = exec;
    CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, s));
  }
  RETURN_IF_ERROR(dev_->stream.synchronize());
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
  memory_.graph_bytes += free_before > free_after ? free_before - free_after : 0;
  return ok_status();
}

Status SamCudaModel::run_encoder(int64_t bucket) {
  auto it = dev_->encoder_graphs.find(bucket);
  if (it != dev_->encoder_graphs.end()) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, dev_->stream.get()));
    return ok_status();
  }
  return vision_forward(bucket);
}

StatusOr<const float*> SamCudaModel::encode_images_on_device(const float* pixels, int64_t n) {
  if (n < 1 || n > max_batch()) {
    return invalid_argument("image batch of " + std::to_string(n) + " (the GPU model takes 1.." +
                            std::to_string(max_batch()) + " per call)");
  }
  MMSERVE_CHECK(pixels != nullptr, "encode_images_on_device: null pixels");
  const SamVisionConfig& v = config_.vision;
  cudaStream_t s = dev_->stream.get();
  const size_t bytes = sizeof(float) * n * v.num_channels * v.image_size * v.image_size;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_->a.pixels, pixels, bytes, cudaMemcpyDefault, s));
  RETURN_IF_ERROR(run_encoder(bucket_for(n)));
  RETURN_IF_ERROR(dev_->stream.synchronize());
  return static_cast<const float*>(dev_->a.neck2);
}

Status SamCudaModel::encode_images(const float* pixels, int64_t n, float* embeddings) {
  if (n < 0) return invalid_argument("encode_images: negative image count " + std::to_string(n));
  const SamVisionConfig& v = config_.vision;
  const int64_t image_floats = v.num_channels * v.image_size * v.image_size, t = v.grid() * v.grid();
  cudaStream_t s = dev_->stream.get();
  for (int64_t first = 0; first < n; first += max_batch()) {
    const int64_t count = std::min(max_batch(), n - first);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_->a.pixels, pixels + first * image_floats,
                                         sizeof(float) * count * image_floats, cudaMemcpyHostToDevice, s));
    RETURN_IF_ERROR(run_encoder(bucket_for(count)));
    RETURN_IF_ERROR(models::sam_transpose_cuda(dev_->a.neck2, count, t, v.output_channels, dev_->a.embed_t, s));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_->pinned_out.data(), dev_->a.embed_t,
                                         sizeof(float) * count * embedding_floats(), cudaMemcpyDeviceToHost, s));
    RETURN_IF_ERROR(dev_->stream.synchronize());
    std::memcpy(embeddings + first * embedding_floats(), dev_->pinned_out.data(),
                sizeof(float) * count * embedding_floats());
  }
  return ok_status();
}

StatusOr<int64_t> SamCudaModel::stage_prompt(const SamPrompt& prompt, int64_t* real_tokens) {
  const int64_t hid = config_.decoder.hidden_size;
  std::vector<float> tokens = dev_->output_tokens;
  sam_sparse_embeddings(config_.prompt, dev_->host_prompt, prompt, tokens);
  const int64_t count = static_cast<int64_t>(tokens.size()) / hid;
  const int64_t bucket = round_up_pow2(std::max(kTokenBucketMin, count));
  MMSERVE_CHECK(bucket <= token_bucket_max_, "decoder token bucket above the planned maximum");
  float* in = dev_->pinned_in.data_as<float>();
  std::memcpy(in, tokens.data(), sizeof(float) * tokens.size());
  std::fill(in + tokens.size(), in + bucket * hid, 0.0f);
  const int32_t length = static_cast<int32_t>(count);
  std::memcpy(in + token_bucket_max_ * hid, &length, sizeof(length));
  *real_tokens = count;
  return bucket;
}

StatusOr<SamMasks> SamCudaModel::run_decoder(const SamPrompt& prompt, bool multimask_output,
                                             const SamMaskGeometry* post) {
  RETURN_IF_ERROR(sam_check_prompt(config_, prompt));
  Device& d = *dev_;
  cudaStream_t s = d.stream.get();
  const int64_t hid = config_.decoder.hidden_size, grid = config_.prompt.image_embedding_size(), p = grid * grid;
  const int64_t mt = config_.decoder.num_mask_tokens();
  int64_t real = 0;
  ASSIGN_OR_RETURN(const int64_t bucket, stage_prompt(prompt, &real));
  float* in = d.pinned_in.data_as<float>();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.a.tokens, in, sizeof(float) * bucket * hid, cudaMemcpyHostToDevice, s));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.a.kv_len, in + token_bucket_max_ * hid, sizeof(int32_t),
                                       cudaMemcpyHostToDevice, s));
  const bool dense = prompt.mask_input != nullptr;
  if (dense) {
    float* mask = in + token_bucket_max_ * hid + 4;
    std::memcpy(mask, prompt.mask_input, sizeof(float) * 16 * p);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.a.mask_in, mask, sizeof(float) * 16 * p, cudaMemcpyHostToDevice, s));
  }
  const auto key = std::make_pair(bucket, dense);
  auto it = d.decoder_graphs.find(key);
  if (it != d.decoder_graphs.end()) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, s));
  } else {
    RETURN_IF_ERROR(decoder_forward(bucket, dense));  // this call's result (and the algorithms, cached)
    if (options_.use_graphs) {
      RETURN_IF_ERROR(d.stream.synchronize());
      size_t free_before = 0, free_after = 0, total = 0;
      CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
      cudaGraph_t graph = nullptr;
      CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      Status forward = decoder_forward(bucket, dense);
      const cudaError_t end = cudaStreamEndCapture(s, &graph);
      if (!forward.ok()) {
        if (graph) cudaGraphDestroy(graph);
        return forward.with_context("capturing the decoder's CUDA graph");
      }
      CUDA_RETURN_IF_ERROR(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      CUDA_RETURN_IF_ERROR(instantiated);
      CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, s));
      d.decoder_graphs[key] = exec;
      RETURN_IF_ERROR(d.stream.synchronize());
      CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
      memory_.graph_bytes += free_before > free_after ? free_before - free_after : 0;
    }
  }
  // HF: masks[:, :, 1:] and iou_pred[:, :, 1:] when multimask_output, else [0:1] of both.
  const int64_t first = multimask_output ? 1 : 0, count = multimask_output ? mt - 1 : 1, side = 4 * grid;
  float* out = d.pinned_out.data_as<float>();
  SamMasks masks;
  masks.count = count;
  masks.height = masks.width = side;
  if (post != nullptr) {
    const kernels::MaskResizeShape shape{static_cast<int>(count), static_cast<int>(side), static_cast<int>(side),
                                         post->pad_height, post->pad_width, post->crop_height, post->crop_width,
                                         post->out_height, post->out_width};
    if (!kernels::mask_resize_shape_valid(shape)) {
      return invalid_argument("mask post-processing: the image geometry does not fit (crop " +
                              std::to_string(post->crop_height) + "x" + std::to_string(post->crop_width) + " in pad " +
                              std::to_string(post->pad_height) + "x" + std::to_string(post->pad_width) + ", out " +
                              std::to_string(post->out_height) + "x" + std::to_string(post->out_width) + ")");
    }
    const size_t bytes = static_cast<size_t>(count) * post->out_height * post->out_width;
    if (d.post_masks.capacity() < bytes) {  // grows with the largest image seen (cudaMalloc off the usual path)
      RETURN_IF_ERROR(d.stream.synchronize());
      RETURN_IF_ERROR(d.post_masks.init(DeviceArena::aligned(bytes)));
      RETURN_IF_ERROR(d.post_pinned.init(DeviceArena::aligned(bytes)));
    }
    d.post_masks.reset();
    ASSIGN_OR_RETURN(uint8_t* device_masks, d.post_masks.allocate_array<uint8_t>(static_cast<int64_t>(bytes)));
    RETURN_IF_ERROR(kernels::mask_resize_threshold_cuda(d.a.masks + first * side * side, shape, post->threshold,
                                                        device_masks, s));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.post_pinned.data(), device_masks, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, d.a.iou + first, sizeof(float) * count, cudaMemcpyDeviceToHost, s));
    RETURN_IF_ERROR(d.stream.synchronize());
    const uint8_t* host = d.post_pinned.data_as<uint8_t>();
    masks.masks.assign(host, host + bytes);
    masks.mask_height = post->out_height;
    masks.mask_width = post->out_width;
    masks.iou_scores.assign(out, out + count);
    return masks;
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, d.a.masks + first * side * side, sizeof(float) * count * side * side,
                                       cudaMemcpyDeviceToHost, s));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out + count * side * side, d.a.iou + first, sizeof(float) * count,
                                       cudaMemcpyDeviceToHost, s));
  RETURN_IF_ERROR(d.stream.synchronize());
  masks.low_res_logits.assign(out, out + count * side * side);
  masks.iou_scores.assign(out + count * side * side, out + count * side * side + count);
  return masks;
}

StatusOr<SamMasks> SamCudaModel::decode(const float* embedding, const SamPrompt& prompt, bool multimask_output) {
  MMSERVE_CHECK(embedding != nullptr, "decode: null embedding");
  RETURN_IF_ERROR(sam_check_prompt(config_, prompt));
  const int64_t hid = config_.decoder.hidden_size, p = config_.prompt.image_embedding_size() *
                                                           config_.prompt.image_embedding_size();
  float* rows = dev_->pinned_in.data_as<float>() + token_bucket_max_ * hid + 4 + 16 * p;
  for (int64_t i = 0; i < p; ++i) {  // [hidden, grid, grid] -> channels-last rows
    for (int64_t ch = 0; ch < hid; ++ch) rows[i * hid + ch] = embedding[ch * p + i];
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_->a.image, rows, sizeof(float) * p * hid, cudaMemcpyHostToDevice,
                                       dev_->stream.get()));
  return run_decoder(prompt, multimask_output);
}

StatusOr<SamMasks> SamCudaModel::decode_on_device(const float* device_rows, const SamPrompt& prompt,
                                                  bool multimask_output, const SamMaskGeometry* post) {
  MMSERVE_CHECK(device_rows != nullptr, "decode_on_device: null embedding");
  RETURN_IF_ERROR(sam_check_prompt(config_, prompt));
  if (device_rows != dev_->a.image) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_->a.image, device_rows, sizeof(float) * embedding_floats(),
                                         cudaMemcpyDeviceToDevice, dev_->stream.get()));
  }
  return run_decoder(prompt, multimask_output, post);
}

}  // namespace mmserve::models
