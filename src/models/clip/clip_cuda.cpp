// CLIP on an NVIDIA GPU (see clip_cuda.h). The forward below mirrors clip.cpp step by step; each step is
// one kernel or one cuBLASLt GEMM.
#include "models/clip/clip_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>

#include "core/cuda/cuda_status.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/embedding/embedding_cuda.h"
#include "kernels/l2_normalize/l2_normalize_cuda.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "kernels/patch_embed/patch_embed_cuda.h"
#include "models/common/tensor_parallel.h"

namespace mmserve::models {

using kernels::GemmCudaArgs;

// Device pointers into weight_arena_. Norms are f32; matrices, embeddings and the biases of GEMMs with a
// 16-bit output are in the compute dtype; biases of GEMMs that write the f32 residual stream are f32.
struct ClipCudaModel::BlockWeights {
  const float *ln1_w = nullptr, *ln1_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
  const void *qkv_w = nullptr, *qkv_b = nullptr;  // [3H, H], [3H] (dtype)
  const void* out_w = nullptr;                    // [H, H] (dtype)
  const float* out_b = nullptr;                   // [H] f32 (null on ranks > 0 under tensor parallel)
  const void *fc1_w = nullptr, *fc1_b = nullptr;  // [I, H], [I] (dtype)
  const void* fc2_w = nullptr;                    // [H, I] (dtype)
  const float* fc2_b = nullptr;                   // [H] f32 (null on ranks > 0)
};
// Under tensor parallel a rank holds qkv [3H/T, H], out [H, H/T], fc1 [I_r, H], fc2 [H, I_r] (the shapes of
// TowerShape); everything outside the blocks is whole on every rank.

struct ClipCudaModel::Weights {
  std::vector<BlockWeights> text, vision;
  const void *token_embedding = nullptr, *text_positions = nullptr;
  const float *final_ln_w = nullptr, *final_ln_b = nullptr;
  const void *class_embedding = nullptr, *patch_weight = nullptr, *vision_positions = nullptr;
  const float *pre_ln_w = nullptr, *pre_ln_b = nullptr, *post_ln_w = nullptr, *post_ln_b = nullptr;
  const void *visual_projection = nullptr, *text_projection = nullptr;
};

// Activation buffers of one rank, sized for the largest bucket of either tower (they run one at a time).
struct ClipCudaModel::Activations {
  float* pixels = nullptr;        // [B, C, S, S]
  void* patches = nullptr;        // [B * P, C * p * p] (dtype)
  float* patch_out = nullptr;     // [B * P, H]
  float* x = nullptr;             // [rows, H] the residual stream
  void* normed = nullptr;         // [rows, H] (dtype)
  void* qkv = nullptr;            // [rows, 3H] (dtype)
  void* context = nullptr;        // [rows, H] (dtype)
  void* mlp = nullptr;            // [rows, I] (dtype)
  void* pooled = nullptr;         // [B, H] (dtype)
  float* embeds = nullptr;        // [B, projection_dim]
  int32_t* class_rows = nullptr;  // [B]: b * (P + 1), constant
  int32_t* text_ints = nullptr;   // [B * T ids | B lengths | B pooling rows], one copy per call
  void* workspace = nullptr;      // cuBLASLt
};

// What one GPU of the model holds: everything a forward touches, so ranks share nothing but the collective.
struct ClipCudaModel::Rank {
  int index = 0;   // rank in the tensor-parallel group (0 without one)
  int device = 0;  // CUDA ordinal
  CudaStream stream;
  DeviceArena weight_arena;
  DeviceArena activation_arena;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Activations> act;
  std::unique_ptr<kernels::CublasLtGemm> gemm;
  PinnedBuffer pinned_in, pinned_out;
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs;  // (tower, bucket) -> graph
  size_t graph_bytes = 0;
  // Pipeline parallel: the blocks [begin, end) of each tower this stage holds, whether it embeds the inputs
  // (stage 0) and pools the outputs (the last stage). Without a pipeline: every block, both ends.
  int64_t vision_begin = 0, vision_end = 0, text_begin = 0, text_end = 0;
  bool first_stage = true, last_stage = true;
  CudaEvent done, copied;  // pipeline: this stage's micro-batch finished / its input was copied in
  ~Rank() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  }
};

namespace {

// Bytes each activation buffer of one tower needs at batch `b` (the plan; also the per-bucket report).
struct TowerNeeds {
  size_t pixels = 0, patches = 0, patch_out = 0, x = 0, normed = 0, qkv = 0, context = 0, mlp = 0, pooled = 0,
         embeds = 0, ints = 0;
  size_t total() const {
    size_t sum = 0;
    for (size_t s : {pixels, patches, patch_out, x, normed, qkv, context, mlp, pooled, embeds, ints}) {
      sum += DeviceArena::aligned(s);
    }
    return sum;
  }
};

// `inner` and `mlp` are one rank's widths of the attention and the MLP (the whole model without tensor parallel).
TowerNeeds vision_needs(const ClipConfig& c, int64_t b, size_t e, int64_t inner, int64_t mlp) {
  const ClipVisionConfig& v = c.vision;
  const int64_t p = v.num_patches(), rows = b * (p + 1), h = v.hidden_size;
  TowerNeeds n;
  n.pixels = sizeof(float) * b * v.num_channels * v.image_size * v.image_size;
  n.patches = e * b * p * v.num_channels * v.patch_size * v.patch_size;
  n.patch_out = sizeof(float) * b * p * h;
  n.x = sizeof(float) * rows * h;
  n.normed = e * rows * h;
  n.qkv = e * rows * 3 * inner;
  n.context = e * rows * inner;
  n.mlp = e * rows * mlp;
  n.pooled = e * b * h;
  n.embeds = sizeof(float) * b * c.projection_dim;
  n.ints = sizeof(int32_t) * b;
  return n;
}

TowerNeeds text_needs(const ClipConfig& c, int64_t b, size_t e, int64_t inner, int64_t mlp) {
  const ClipTextConfig& t = c.text;
  const int64_t rows = b * t.max_position_embeddings, h = t.hidden_size;
  TowerNeeds n;
  n.x = sizeof(float) * rows * h;
  n.normed = e * rows * h;
  n.qkv = e * rows * 3 * inner;
  n.context = e * rows * inner;
  n.mlp = e * rows * mlp;
  n.pooled = e * b * h;
  n.embeds = sizeof(float) * b * c.projection_dim;
  n.ints = sizeof(int32_t) * (rows + 2 * b);
  return n;
}

}  // namespace

ClipCudaModel::~ClipCudaModel() {
  // Each rank frees its memory (and its graphs, which may hold NCCL work) with its own device current, before the
  // group's communicators go.
  for (std::unique_ptr<Rank>& rank : ranks_) {
    cudaSetDevice(rank->device);
    rank.reset();
  }
  group_.reset();
}

std::string ClipCudaModel::tp_collective() const {
  return group_ ? group_->kind() : "";
}

Status ClipCudaModel::health() {
  return group_ ? group_->health() : ok_status();
}

void ClipCudaModel::abort_tp_group(const Status& why) {
  if (group_) group_->abort(why);
}

namespace {

// One tower's shapes on rank `rank` of `world`: its share of the heads (which divide) and of the MLP rows.
template <typename TowerConfig, typename Shape>
Shape tower_shape(const TowerConfig& c, int64_t world, int rank) {
  Shape t;
  t.hidden = c.hidden_size;
  t.head_dim = c.hidden_size / c.num_attention_heads;
  t.heads = c.num_attention_heads / world;
  t.mlp = tp_shard_range(c.intermediate_size, world, rank)->size();
  return t;
}

}  // namespace

ClipCudaModel::TowerShape ClipCudaModel::vision_shape(int rank) const {
  return tower_shape<ClipVisionConfig, TowerShape>(config_.vision, tp_world_size(), rank);
}

ClipCudaModel::TowerShape ClipCudaModel::text_shape(int rank) const {
  return tower_shape<ClipTextConfig, TowerShape>(config_.text, tp_world_size(), rank);
}

StatusOr<std::unique_ptr<ClipCudaModel>> ClipCudaModel::load(const std::string& model_dir,
                                                             const ClipCudaOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kF16 && options.dtype != DType::kBF16) {
    return invalid_argument(std::string("CLIP on the GPU computes in f32, f16 or bf16, not ") +
                            dtype_name(options.dtype));
  }
  if (options.buckets.empty()) return invalid_argument("at least one batch bucket is needed");
  for (int64_t b : options.buckets) {
    if (b <= 0 || b > 4096) return invalid_argument("batch bucket " + std::to_string(b) + " is outside [1, 4096]");
  }
  auto model = std::unique_ptr<ClipCudaModel>(new ClipCudaModel());
  model->options_ = options;
  // MMSERVE_CUDA_GRAPHS=0 runs every forward eagerly (compute-sanitizer runs, kernel debugging).
  if (const char* graphs = std::getenv("MMSERVE_CUDA_GRAPHS"); graphs && std::string(graphs) == "0") {
    model->options_.use_graphs = false;
  }
  model->buckets_ = options.buckets;
  std::sort(model->buckets_.begin(), model->buckets_.end());
  model->buckets_.erase(std::unique(model->buckets_.begin(), model->buckets_.end()), model->buckets_.end());
  model->max_batch_ = model->buckets_.back();
  if (!options.pipeline_devices.empty()) {
    if (options.pipeline_devices.size() != 2) {
      return invalid_argument("pipeline parallel takes 2 stages, not " +
                              std::to_string(options.pipeline_devices.size()));
    }
    if (!options.tp_devices.empty()) return invalid_argument("pipeline and tensor parallel cannot be combined (yet)");
    if (options.vision_micro_batch < 1 || options.vision_micro_batch > 4096 || options.text_micro_batch < 1 ||
        options.text_micro_batch > 4096) {
      return invalid_argument("micro-batch sizes must be in [1, 4096] (vision " +
                              std::to_string(options.vision_micro_batch) + ", text " +
                              std::to_string(options.text_micro_batch) + ")");
    }
    // Graphs and activations per micro-batch: the largest call is split into micro-batches.
    model->buckets_ = {std::min(options.text_micro_batch, options.vision_micro_batch),
                       std::max(options.text_micro_batch, options.vision_micro_batch)};
    model->buckets_.erase(std::unique(model->buckets_.begin(), model->buckets_.end()), model->buckets_.end());
  }
  RETURN_IF_ERROR(model->make_ranks());
  {
    // The host model parses and checks the checkpoint (same errors as the CPU path) and fuses QKV; its f32
    // copy is freed once every rank's weights are on its GPU.
    ASSIGN_OR_RETURN(std::unique_ptr<ClipModel> host, ClipModel::load(model_dir));
    model->config_ = host->config();
    model->logit_scale_ = host->logit_scale();
    const ClipConfig& c = model->config_;
    const int64_t world = model->tp_world_size();
    for (const auto& [tower, heads] : {std::pair<const char*, int64_t>{"vision", c.vision.num_attention_heads},
                                       std::pair<const char*, int64_t>{"text", c.text.num_attention_heads}}) {
      if (heads % world != 0) {
        return invalid_argument(model_dir + ": tensor parallel over " + std::to_string(world) + " GPUs needs the " +
                                tower + " tower's " + std::to_string(heads) + " heads to divide by " +
                                std::to_string(world));
      }
    }
    if (!kernels::attention_cuda_supported(options.dtype, c.vision.num_patches() + 1,
                                           c.vision.hidden_size / c.vision.num_attention_heads) ||
        !kernels::attention_cuda_supported(options.dtype, c.text.max_position_embeddings,
                                           c.text.hidden_size / c.text.num_attention_heads)) {
      return unimplemented(model_dir + ": the fused attention kernel does not take this model's sequence " +
                           "length or head size");
    }
    if (c.vision.image_size % c.vision.patch_size != 0) {
      return unimplemented(model_dir + ": image_size must be a multiple of patch_size");
    }
    model->assign_layers();
    for (std::unique_ptr<Rank>& rank : model->ranks_) {
      RETURN_IF_ERROR(set_cuda_device(rank->device));
      RETURN_IF_ERROR(rank->stream.init());
      RETURN_IF_ERROR(model->upload_weights(*rank, *host));
    }
  }
  for (std::unique_ptr<Rank>& rank : model->ranks_) {
    RETURN_IF_ERROR(set_cuda_device(rank->device));
    RETURN_IF_ERROR(model->plan_activations(*rank));
    ASSIGN_OR_RETURN(
        rank->gemm, kernels::CublasLtGemm::create(rank->act->workspace, kernels::CublasLtGemm::kDefaultWorkspaceBytes));
  }
  RETURN_IF_ERROR(model->capture_graphs());
  RETURN_IF_ERROR(set_cuda_device(model->ranks_[0]->device));  // the caller's thread drives rank 0
  return model;
}

Status ClipCudaModel::make_ranks() {
  std::vector<int> devices = pipelined() ? options_.pipeline_devices : options_.tp_devices;
  if (devices.empty()) devices.push_back(options_.device);
  for (size_t r = 0; r < devices.size(); ++r) {
    RETURN_IF_ERROR(set_cuda_device(devices[r]));
    auto rank = std::make_unique<Rank>();
    rank->index = pipelined() ? 0 : static_cast<int>(r);  // a stage holds whole layers: rank 0 of no group
    rank->device = devices[r];
    RETURN_IF_ERROR(rank->done.init());
    RETURN_IF_ERROR(rank->copied.init());
    ranks_.push_back(std::move(rank));
  }
  if (pipelined() && devices[0] != devices[1]) {
    // The stream crosses between the stages by a device-to-device copy: direct over NVLink/PCIe when the GPUs can
    // reach each other (else the driver stages it through the host, correct but slower).
    for (const auto& [from, to] :
         {std::pair<int, int>{devices[0], devices[1]}, std::pair<int, int>{devices[1], devices[0]}}) {
      int can = 0;
      CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can, from, to));
      if (!can) continue;
      RETURN_IF_ERROR(set_cuda_device(from));
      const cudaError_t enabled = cudaDeviceEnablePeerAccess(to, 0);
      if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // already on (another model, or the topology probe): fine
      } else {
        CUDA_RETURN_IF_ERROR(enabled);
      }
    }
  }
  if (options_.tp_devices.empty()) return ok_status();  // one GPU, or pipeline stages (no collective)
  ASSIGN_OR_RETURN(group_, TpGroup::create(devices, options_.tp_collective));
  if (!group_->graph_capturable()) options_.use_graphs = false;  // staged sums synchronise on the host
  return ok_status();
}

void ClipCudaModel::assign_layers() {
  const int64_t vision = config_.vision.num_hidden_layers, text = config_.text.num_hidden_layers;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = *ranks_[r];
    rank.vision_begin = 0, rank.vision_end = vision, rank.text_begin = 0, rank.text_end = text;
    if (!pipelined()) continue;
    // Two stages: the first half of each tower's blocks (rounded down) on stage 0, the rest on stage 1.
    rank.first_stage = r == 0;
    rank.last_stage = r + 1 == ranks_.size();
    if (r == 0) {
      rank.vision_end = vision / 2, rank.text_end = text / 2;
    } else {
      rank.vision_begin = vision / 2, rank.text_begin = text / 2;
    }
  }
}

Status ClipCudaModel::upload_weights(Rank& rank, const ClipModel& host) {
  const DType dt = options_.dtype;
  const int64_t world = tp_world_size();
  // Two passes over one list of (source, dtype, destination): sum the sizes, make one allocation, copy.
  struct Job {
    Tensor source;
    DType dtype;
    const void** target;
  };
  std::vector<Job> jobs;
  std::deque<HostTensor> slices;  // this rank's shares of the sharded tensors, alive until uploaded
  rank.weights = std::make_unique<Weights>();
  Weights& w = *rank.weights;
  auto add = [&](const Tensor& t, DType dtype, const void** target) { jobs.push_back({t, dtype, target}); };
  auto add_f32 = [&](const Tensor& t, const float** target) {
    jobs.push_back({t, DType::kF32, reinterpret_cast<const void**>(target)});
  };
  // A block tensor under its tensor-parallel rule (whole when world is 1; a row-parallel bias only on rank 0).
  auto add_sharded = [&](const Tensor& t, TpSplit split, int64_t heads, DType dtype, const void** target,
                         const std::string& name) -> Status {
    if (world == 1) {
      add(t, dtype, target);
      return ok_status();
    }
    ASSIGN_OR_RETURN(HostTensor slice, tp_slice(t, split, heads, world, rank.index, name));
    if (slice.empty()) return ok_status();  // stays null: this rank adds no bias
    slices.push_back(std::move(slice));
    add(slices.back().view(), dtype, target);
    return ok_status();
  };
  auto blocks = [&](const std::vector<EncoderBlockWeights>& src, std::vector<BlockWeights>& dst, int64_t heads,
                    const std::string& tower, int64_t begin, int64_t end) -> Status {
    dst.resize(src.size());
    for (size_t i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {  // this stage's blocks
      const std::string layer = tower + ".encoder.layers." + std::to_string(i) + ".";
      const auto f32_target = [](const float** p) { return reinterpret_cast<const void**>(p); };
      add_f32(src[i].ln1_weight, &dst[i].ln1_w);
      add_f32(src[i].ln1_bias, &dst[i].ln1_b);
      add_f32(src[i].ln2_weight, &dst[i].ln2_w);
      add_f32(src[i].ln2_bias, &dst[i].ln2_b);
      RETURN_IF_ERROR(add_sharded(src[i].qkv_weight, TpSplit::kFusedQkvHeads, heads, dt, &dst[i].qkv_w, layer + "qkv"));
      RETURN_IF_ERROR(add_sharded(src[i].qkv_bias, TpSplit::kFusedQkvHeads, heads, dt, &dst[i].qkv_b, layer + "qkv"));
      RETURN_IF_ERROR(add_sharded(src[i].out_weight, TpSplit::kRowHeads, heads, dt, &dst[i].out_w,
                                  layer + "self_attn.out_proj.weight"));
      RETURN_IF_ERROR(add_sharded(src[i].out_bias, TpSplit::kRowBias, heads, DType::kF32, f32_target(&dst[i].out_b),
                                  layer + "self_attn.out_proj.bias"));
      RETURN_IF_ERROR(add_sharded(src[i].fc1_weight, TpSplit::kColumn, 0, dt, &dst[i].fc1_w, layer + "mlp.fc1.weight"));
      RETURN_IF_ERROR(add_sharded(src[i].fc1_bias, TpSplit::kColumn, 0, dt, &dst[i].fc1_b, layer + "mlp.fc1.bias"));
      RETURN_IF_ERROR(add_sharded(src[i].fc2_weight, TpSplit::kRow, 0, dt, &dst[i].fc2_w, layer + "mlp.fc2.weight"));
      RETURN_IF_ERROR(add_sharded(src[i].fc2_bias, TpSplit::kRowBias, 0, DType::kF32, f32_target(&dst[i].fc2_b),
                                  layer + "mlp.fc2.bias"));
    }
    return ok_status();
  };
  RETURN_IF_ERROR(blocks(host.text_blocks(), w.text, config_.text.num_attention_heads, "text_model", rank.text_begin,
                         rank.text_end));
  RETURN_IF_ERROR(blocks(host.vision_blocks(), w.vision, config_.vision.num_attention_heads, "vision_model",
                         rank.vision_begin, rank.vision_end));
  add(host.weight("text_model.embeddings.token_embedding.weight"), dt, &w.token_embedding);
  add(host.weight("text_model.embeddings.position_embedding.weight"), dt, &w.text_positions);
  add_f32(host.weight("text_model.final_layer_norm.weight"), &w.final_ln_w);
  add_f32(host.weight("text_model.final_layer_norm.bias"), &w.final_ln_b);
  add(host.weight("vision_model.embeddings.class_embedding"), dt, &w.class_embedding);
  add(host.weight("vision_model.embeddings.patch_embedding.weight"), dt, &w.patch_weight);
  add(host.weight("vision_model.embeddings.position_embedding.weight"), dt, &w.vision_positions);
  add_f32(host.weight("vision_model.pre_layrnorm.weight"), &w.pre_ln_w);
  add_f32(host.weight("vision_model.pre_layrnorm.bias"), &w.pre_ln_b);
  add_f32(host.weight("vision_model.post_layernorm.weight"), &w.post_ln_w);
  add_f32(host.weight("vision_model.post_layernorm.bias"), &w.post_ln_b);
  add(host.weight("visual_projection.weight"), dt, &w.visual_projection);
  add(host.weight("text_projection.weight"), dt, &w.text_projection);

  size_t total = 0;
  for (const Job& j : jobs) total += DeviceArena::aligned(storage_bytes(j.dtype, j.source.numel()));
  RETURN_IF_ERROR(rank.weight_arena.init(total));
  memory_.weight_bytes += total;
  std::vector<uint16_t> half;
  for (const Job& j : jobs) {
    const int64_t n = j.source.numel();
    ASSIGN_OR_RETURN(void* dst, rank.weight_arena.allocate(storage_bytes(j.dtype, n)));
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

Status ClipCudaModel::plan_activations(Rank& rank) {
  const size_t e = dtype_size(options_.dtype);
  const int64_t b = buckets_.back();  // the largest graphed batch (a micro-batch under pipeline parallel)
  const TowerShape vs = vision_shape(rank.index), ts = text_shape(rank.index);
  const TowerNeeds v = vision_needs(config_, b, e, vs.inner(), vs.mlp),
                   t = text_needs(config_, b, e, ts.inner(), ts.mlp);
  if (rank.index == 0) {
    for (int64_t bucket : buckets_) {
      memory_.vision_bucket_bytes[bucket] = vision_needs(config_, bucket, e, vs.inner(), vs.mlp).total();
      memory_.text_bucket_bytes[bucket] = text_needs(config_, bucket, e, ts.inner(), ts.mlp).total();
    }
  }
  // Each buffer takes the larger of the two towers' needs.
  const size_t sizes[] = {v.pixels,
                          v.patches,
                          v.patch_out,
                          std::max(v.x, t.x),
                          std::max(v.normed, t.normed),
                          std::max(v.qkv, t.qkv),
                          std::max(v.context, t.context),
                          std::max(v.mlp, t.mlp),
                          std::max(v.pooled, t.pooled),
                          std::max(v.embeds, t.embeds),
                          v.ints,
                          t.ints,
                          kernels::CublasLtGemm::kDefaultWorkspaceBytes};
  size_t total = 0;
  for (size_t s : sizes) total += DeviceArena::aligned(s);
  RETURN_IF_ERROR(rank.activation_arena.init(total));
  memory_.activation_bytes += total - kernels::CublasLtGemm::kDefaultWorkspaceBytes;
  memory_.workspace_bytes += kernels::CublasLtGemm::kDefaultWorkspaceBytes;
  rank.act = std::make_unique<Activations>();
  Activations& a = *rank.act;
  void* p[13];
  for (int i = 0; i < 13; ++i) {
    ASSIGN_OR_RETURN(p[i], rank.activation_arena.allocate(sizes[i]));
  }
  a.pixels = static_cast<float*>(p[0]);
  a.patches = p[1];
  a.patch_out = static_cast<float*>(p[2]);
  a.x = static_cast<float*>(p[3]);
  a.normed = p[4];
  a.qkv = p[5];
  a.context = p[6];
  a.mlp = p[7];
  a.pooled = p[8];
  a.embeds = static_cast<float*>(p[9]);
  a.class_rows = static_cast<int32_t*>(p[10]);
  a.text_ints = static_cast<int32_t*>(p[11]);
  a.workspace = p[12];
  // Inputs start as zeros (a bucket's padding rows are then finite), and the class rows are constant.
  CUDA_RETURN_IF_ERROR(cudaMemset(a.pixels, 0, sizes[0]));
  CUDA_RETURN_IF_ERROR(cudaMemset(a.x, 0, sizes[3]));  // a later stage's warm-up reads x before any copy
  CUDA_RETURN_IF_ERROR(cudaMemset(a.text_ints, 0, sizes[11]));
  std::vector<int32_t> class_rows(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) class_rows[i] = static_cast<int32_t>(i * (config_.vision.num_patches() + 1));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(a.class_rows, class_rows.data(), b * sizeof(int32_t), cudaMemcpyHostToDevice));

  // Pipeline parallel stages every micro-batch's text layout in page-locked memory up front (a copy from pageable
  // memory could make the host wait for a stage's stream and serialise the stages).
  size_t pinned_in = t.ints;
  if (pipelined()) {
    const int64_t micro = options_.text_micro_batch, seq = config_.text.max_position_embeddings;
    pinned_in = sizeof(int32_t) * ((max_batch_ + micro - 1) / micro) * (micro * seq + 2 * micro);
  }
  RETURN_IF_ERROR(rank.pinned_in.init(pinned_in));
  RETURN_IF_ERROR(rank.pinned_out.init(sizeof(float) * max_batch_ * config_.projection_dim));
  memory_.pinned_bytes += rank.pinned_in.size() + rank.pinned_out.size();
  return ok_status();
}

Status ClipCudaModel::reduce_residual(Rank& rank, int64_t rows, int64_t hidden) {
  if (!group_) return ok_status();
  return group_->collective()->all_reduce_sum(rank.index, rank.act->x, rows * hidden, DType::kF32, rank.stream.get());
}

Status ClipCudaModel::encoder_block(Rank& rank, const BlockWeights& w, int64_t rows, int64_t seq, int64_t batch,
                                    const TowerShape& shape, float eps, kernels::Activation activation, bool causal,
                                    const int32_t* kv_lengths) {
  const DType dt = options_.dtype;
  const Activations& a = *rank.act;
  cudaStream_t s = rank.stream.get();
  const int64_t hidden = shape.hidden, inner = shape.inner(), mlp = shape.mlp;
  // Rank 0 adds its partial sums onto the residual stream (beta = 1); the other ranks overwrite their copy with
  // theirs (beta = 0), so the all-reduce that follows leaves x + the sum of every rank's part (tensor_parallel.h).
  const float residual_beta = rank.index == 0 ? 1.0f : 0.0f;
  // normed = layer_norm1(x)
  kernels::LayerNormCudaArgs ln;
  ln.x = a.x, ln.x_ld = hidden, ln.weight = w.ln1_w, ln.bias = w.ln1_b, ln.eps = eps, ln.rows = rows;
  ln.cols = hidden, ln.y = a.normed, ln.y_dtype = dt, ln.y_ld = hidden;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  // qkv = normed @ [Wq; Wk; Wv]^T + b   (this rank's heads: [q_r | k_r | v_r])
  GemmCudaArgs g;
  g.m = rows, g.n = 3 * inner, g.k = hidden, g.a = a.normed, g.lda = hidden, g.w = w.qkv_w, g.ldw = hidden;
  g.in_dtype = dt, g.d = a.qkv, g.ldd = 3 * inner, g.out_dtype = dt, g.bias = w.qkv_b;
  RETURN_IF_ERROR(rank.gemm->run(g, s));
  // context = attention(q, k, v)
  kernels::AttentionCudaArgs at;
  at.qkv = a.qkv, at.qkv_ld = 3 * inner, at.out = a.context, at.out_ld = inner, at.dtype = dt;
  at.batch = batch, at.seq = seq, at.heads = shape.heads, at.head_dim = shape.head_dim;
  at.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim)), at.causal = causal, at.kv_lengths = kv_lengths;
  RETURN_IF_ERROR(kernels::attention_cuda(at, s));
  // x += context @ Wo^T + bo  (f32 output, beta = 1: the residual add)
  g = GemmCudaArgs{};
  g.m = rows, g.n = hidden, g.k = inner, g.a = a.context, g.lda = inner, g.w = w.out_w, g.ldw = inner;
  g.in_dtype = dt, g.d = a.x, g.ldd = hidden, g.out_dtype = DType::kF32, g.bias = w.out_b, g.beta = residual_beta;
  RETURN_IF_ERROR(rank.gemm->run(g, s));
  RETURN_IF_ERROR(reduce_residual(rank, rows, hidden));
  // normed = layer_norm2(x)
  ln.weight = w.ln2_w, ln.bias = w.ln2_b;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  // mlp = act(normed @ W1^T + b1)
  g = GemmCudaArgs{};
  g.m = rows, g.n = mlp, g.k = hidden, g.a = a.normed, g.lda = hidden, g.w = w.fc1_w, g.ldw = hidden;
  g.in_dtype = dt, g.d = a.mlp, g.ldd = mlp, g.out_dtype = dt, g.bias = w.fc1_b;
  RETURN_IF_ERROR(rank.gemm->run(g, s));
  RETURN_IF_ERROR(kernels::activation_cuda(activation, a.mlp, dt, rows * mlp, s));
  // x += mlp @ W2^T + b2
  g = GemmCudaArgs{};
  g.m = rows, g.n = hidden, g.k = mlp, g.a = a.mlp, g.lda = mlp, g.w = w.fc2_w;
  g.ldw = mlp, g.in_dtype = dt, g.d = a.x, g.ldd = hidden, g.out_dtype = DType::kF32, g.bias = w.fc2_b;
  g.beta = residual_beta;
  RETURN_IF_ERROR(rank.gemm->run(g, s));
  return reduce_residual(rank, rows, hidden);
}

Status ClipCudaModel::vision_forward(Rank& rank, int64_t batch) {
  const ClipVisionConfig& v = config_.vision;
  const DType dt = options_.dtype;
  const Activations& a = *rank.act;
  const Weights& w = *rank.weights;
  cudaStream_t s = rank.stream.get();
  const int64_t patches = v.num_patches(), seq = patches + 1, hidden = v.hidden_size, rows = batch * seq;
  const int64_t patch_cols = v.num_channels * v.patch_size * v.patch_size;
  GemmCudaArgs g;
  kernels::LayerNormCudaArgs ln;
  if (rank.first_stage) {
    // Embeddings: [class; conv(pixels)] + positions, then pre_layrnorm (in place, f32).
    RETURN_IF_ERROR(
        kernels::im2col_patches_cuda(a.pixels, batch, v.num_channels, v.image_size, v.patch_size, a.patches, dt, s));
    g.m = batch * patches, g.n = hidden, g.k = patch_cols, g.a = a.patches, g.lda = patch_cols, g.w = w.patch_weight;
    g.ldw = patch_cols, g.in_dtype = dt, g.d = a.patch_out, g.ldd = hidden, g.out_dtype = DType::kF32;
    RETURN_IF_ERROR(rank.gemm->run(g, s));
    RETURN_IF_ERROR(kernels::assemble_vision_embeddings_cuda(a.patch_out, w.class_embedding, w.vision_positions, dt,
                                                             batch, patches, hidden, a.x, s));
    ln.x = a.x, ln.x_ld = hidden, ln.weight = w.pre_ln_w, ln.bias = w.pre_ln_b, ln.eps = v.layer_norm_eps;
    ln.rows = rows, ln.cols = hidden, ln.y = a.x, ln.y_dtype = DType::kF32, ln.y_ld = hidden;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  }
  const TowerShape shape = vision_shape(rank.index);
  for (int64_t l = rank.vision_begin; l < rank.vision_end; ++l) {
    RETURN_IF_ERROR(encoder_block(rank, w.vision[l], rows, seq, batch, shape, v.layer_norm_eps, v.hidden_act,
                                  /*causal=*/false, /*kv_lengths=*/nullptr));
  }
  if (!rank.last_stage) return ok_status();
  // Pool the class tokens through post_layernorm (one gathered layer norm), then project.
  ln = kernels::LayerNormCudaArgs{};
  ln.x = a.x, ln.x_ld = hidden, ln.row_index = a.class_rows, ln.weight = w.post_ln_w, ln.bias = w.post_ln_b;
  ln.eps = v.layer_norm_eps, ln.rows = batch, ln.cols = hidden, ln.y = a.pooled, ln.y_dtype = dt, ln.y_ld = hidden;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  g = GemmCudaArgs{};
  g.m = batch, g.n = config_.projection_dim, g.k = hidden, g.a = a.pooled, g.lda = hidden, g.w = w.visual_projection;
  g.ldw = hidden, g.in_dtype = dt, g.d = a.embeds, g.ldd = config_.projection_dim, g.out_dtype = DType::kF32;
  return rank.gemm->run(g, s);
}

Status ClipCudaModel::text_forward(Rank& rank, int64_t batch) {
  const ClipTextConfig& t = config_.text;
  const DType dt = options_.dtype;
  const Activations& a = *rank.act;
  const Weights& w = *rank.weights;
  cudaStream_t s = rank.stream.get();
  const int64_t seq = t.max_position_embeddings, hidden = t.hidden_size, rows = batch * seq;
  const int32_t* ids = a.text_ints;
  const int32_t* lengths = ids + rows;
  const int32_t* pool_rows = lengths + batch;
  if (rank.first_stage) {
    RETURN_IF_ERROR(kernels::token_position_embedding_cuda(ids, batch, seq, w.token_embedding, w.text_positions, dt,
                                                           t.vocab_size, hidden, a.x, s));
  }
  const TowerShape shape = text_shape(rank.index);
  for (int64_t l = rank.text_begin; l < rank.text_end; ++l) {
    RETURN_IF_ERROR(encoder_block(rank, w.text[l], rows, seq, batch, shape, t.layer_norm_eps, t.hidden_act,
                                  /*causal=*/true, lengths));
  }
  if (!rank.last_stage) return ok_status();
  // final_layer_norm is per row, so only the pooled (EOS) rows need it: gather + normalise in one launch.
  kernels::LayerNormCudaArgs ln;
  ln.x = a.x, ln.x_ld = hidden, ln.row_index = pool_rows, ln.weight = w.final_ln_w, ln.bias = w.final_ln_b;
  ln.eps = t.layer_norm_eps, ln.rows = batch, ln.cols = hidden, ln.y = a.pooled, ln.y_dtype = dt, ln.y_ld = hidden;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  GemmCudaArgs g;
  g.m = batch, g.n = config_.projection_dim, g.k = hidden, g.a = a.pooled, g.lda = hidden, g.w = w.text_projection;
  g.ldw = hidden, g.in_dtype = dt, g.d = a.embeds, g.ldd = config_.projection_dim, g.out_dtype = DType::kF32;
  return rank.gemm->run(g, s);
}

Status ClipCudaModel::run_ranks(const std::function<Status(Rank&)>& body) {
  // A group of one still goes through the group: its health (an aborted group serves nothing) and its rank thread.
  if (!group_ && ranks_.size() == 1) return body(*ranks_[0]);
  if (!group_) {  // pipeline stages: independent, in turn
    for (std::unique_ptr<Rank>& rank : ranks_) {
      CUDA_RETURN_IF_ERROR(cudaSetDevice(rank->device));  // checked at load
      RETURN_IF_ERROR(body(*rank));
    }
    CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[0]->device));
    return ok_status();
  }
  return group_->run([&](int r) { return body(*ranks_[r]); });
}

Status ClipCudaModel::capture_graphs() {
  // Eager runs first: they check every kernel accepts the shapes and let cuBLASLt choose (and us cache)
  // every algorithm, so the captures below make no heuristic calls. Under tensor parallel they also make NCCL
  // set up its connections before any capture.
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    for (int64_t bucket : buckets_) {
      RETURN_IF_ERROR(vision_forward(rank, bucket));
      RETURN_IF_ERROR(text_forward(rank, bucket));
    }
    return rank.stream.synchronize();
  }));
  if (!options_.use_graphs) return ok_status();
  // Each rank captures its own graphs (with its all-reduces) on its own thread; captures only record work, so
  // the ranks need not be in step here.
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    cudaStream_t s = rank.stream.get();
    size_t free_before = 0, free_after = 0, total = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
    for (int64_t bucket : buckets_) {
      for (Tower tower : {Tower::kVision, Tower::kText}) {
        cudaGraph_t graph = nullptr;
        CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        Status forward = tower == Tower::kVision ? vision_forward(rank, bucket) : text_forward(rank, bucket);
        const cudaError_t end = cudaStreamEndCapture(s, &graph);
        if (!forward.ok()) {
          if (graph) cudaGraphDestroy(graph);
          return forward.with_context("capturing the CUDA graph");
        }
        CUDA_RETURN_IF_ERROR(end);
        cudaGraphExec_t exec = nullptr;
        const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        CUDA_RETURN_IF_ERROR(instantiated);
        rank.graphs[{static_cast<int>(tower), bucket}] = exec;
        CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, s));
      }
    }
    RETURN_IF_ERROR(rank.stream.synchronize());
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
    rank.graph_bytes = free_before > free_after ? free_before - free_after : 0;
    return ok_status();
  }));
  for (const std::unique_ptr<Rank>& rank : ranks_) memory_.graph_bytes += rank->graph_bytes;
  return ok_status();
}

int64_t ClipCudaModel::bucket_for(int64_t n) const {
  for (int64_t b : buckets_) {
    if (b >= n) return b;
  }
  return buckets_.back();
}

Status ClipCudaModel::launch(Rank& rank, Tower tower, int64_t bucket) {
  auto it = rank.graphs.find({static_cast<int>(tower), bucket});
  if (it != rank.graphs.end()) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, rank.stream.get()));
    return ok_status();
  }
  return tower == Tower::kVision ? vision_forward(rank, bucket) : text_forward(rank, bucket);
}

Status ClipCudaModel::run(Rank& rank, Tower tower, int64_t bucket, int64_t n, bool normalize) {
  cudaStream_t s = rank.stream.get();
  RETURN_IF_ERROR(launch(rank, tower, bucket));
  if (rank.index == 0) {  // every rank holds the same embeddings; rank 0's are the output
    const int64_t dim = config_.projection_dim;
    if (normalize) RETURN_IF_ERROR(kernels::l2_normalize_rows_cuda(rank.act->embeds, n, dim, s));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rank.pinned_out.data(), rank.act->embeds, n * dim * sizeof(float), cudaMemcpyDeviceToHost, s));
  }
  return rank.stream.synchronize();
}

Status ClipCudaModel::encode_images(const float* pixels, int64_t n, float* embeds, bool normalize) {
  return copy_and_encode_images(pixels, cudaMemcpyHostToDevice, n, embeds, normalize);
}

Status ClipCudaModel::encode_images_on_device(const float* device_pixels, int64_t n, float* embeds, bool normalize) {
  // cudaMemcpyDefault: under tensor parallel the other ranks copy from rank 0's GPU.
  return copy_and_encode_images(device_pixels, cudaMemcpyDefault, n, embeds, normalize);
}

Status ClipCudaModel::copy_and_encode_images(const float* pixels, cudaMemcpyKind kind, int64_t n, float* embeds,
                                             bool normalize) {
  if (n < 0 || n > max_batch()) {
    return invalid_argument("image batch of " + std::to_string(n) + " (the GPU model takes 0.." +
                            std::to_string(max_batch()) + " per call)");
  }
  if (n == 0) return ok_status();
  const ClipVisionConfig& v = config_.vision;
  const size_t bytes = sizeof(float) * n * v.num_channels * v.image_size * v.image_size;
  if (pipelined()) {
    const int64_t image_floats = v.num_channels * v.image_size * v.image_size;
    Rank& stage0 = *ranks_[0];
    return run_pipeline(Tower::kVision, n, embeds, normalize, [&](int64_t, int64_t first, int64_t count) -> Status {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage0.act->pixels, pixels + first * image_floats,
                                           sizeof(float) * count * image_floats, cudaMemcpyDefault,
                                           stage0.stream.get()));
      return ok_status();
    });
  }
  const int64_t bucket = bucket_for(n);
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    if (pixels != rank.act->pixels) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.act->pixels, pixels, bytes, kind, rank.stream.get()));
    }
    return run(rank, Tower::kVision, bucket, n, normalize);
  }));
  std::memcpy(embeds, ranks_[0]->pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

Status ClipCudaModel::encode_texts(const std::vector<std::vector<int32_t>>& ids, float* embeds, bool normalize) {
  const ClipTextConfig& t = config_.text;
  const int64_t n = static_cast<int64_t>(ids.size()), seq = t.max_position_embeddings;
  if (n > max_batch()) {
    return invalid_argument("text batch of " + std::to_string(n) + " (the GPU model takes 0.." +
                            std::to_string(max_batch()) + " per call)");
  }
  if (n == 0) return ok_status();
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<int32_t>& row = ids[b];
    if (row.empty()) return invalid_argument("text " + std::to_string(b) + " has no tokens");
    if (static_cast<int64_t>(row.size()) > seq) {
      return invalid_argument("text " + std::to_string(b) + " has " + std::to_string(row.size()) +
                              " tokens; the model takes at most " + std::to_string(seq));
    }
    for (int32_t id : row) {
      if (id < 0 || id >= t.vocab_size) {
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                std::to_string(t.vocab_size) + ")");
      }
    }
  }
  // The layout text_forward reads for texts [first, first + count) in `bucket` rows: [bucket * seq ids | bucket
  // lengths | bucket pooling rows]; padding rows get one visible key (finite output) and pool their first token.
  auto fill = [&](int64_t first, int64_t count, int64_t bucket, int32_t* in) {
    const int64_t rows = bucket * seq;
    std::fill(in, in + rows + 2 * bucket, 0);
    for (int64_t b = 0; b < bucket; ++b) {
      in[rows + b] = 1;
      in[rows + bucket + b] = static_cast<int32_t>(b * seq);
    }
    for (int64_t b = 0; b < count; ++b) {
      const std::vector<int32_t>& row = ids[first + b];
      std::copy(row.begin(), row.end(), in + b * seq);
      in[rows + b] = static_cast<int32_t>(row.size());
      in[rows + bucket + b] = static_cast<int32_t>(b * seq + clip_pooling_position(row, t.eos_token_id));
    }
    return sizeof(int32_t) * (rows + 2 * bucket);
  };
  if (pipelined()) {
    // Every micro-batch's layout up front: both stages read it (lengths and pooling rows), each copying it on its
    // own stream when its previous micro-batch is done with the buffer.
    const int64_t micro = options_.text_micro_batch, chunks = (n + micro - 1) / micro;
    const int64_t stride = micro * seq + 2 * micro;
    int32_t* layouts = ranks_[0]->pinned_in.data_as<int32_t>();  // sized for max_batch() texts (plan_activations)
    std::vector<size_t> bytes(static_cast<size_t>(chunks));
    for (int64_t i = 0; i < chunks; ++i) {
      const int64_t count = std::min(micro, n - i * micro);
      bytes[i] = fill(i * micro, count, bucket_for(count), layouts + i * stride);
    }
    return run_pipeline(Tower::kText, n, embeds, normalize, [&](int64_t i, int64_t, int64_t) -> Status {
      for (const std::unique_ptr<Rank>& stage : ranks_) {
        CUDA_RETURN_IF_ERROR(cudaSetDevice(stage->device));
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage->act->text_ints, layouts + i * stride, bytes[i],
                                             cudaMemcpyHostToDevice, stage->stream.get()));
      }
      CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[0]->device));
      return ok_status();
    });
  }
  const int64_t bucket = bucket_for(n);
  // Filled in rank 0's pinned staging; the other ranks copy it into theirs.
  int32_t* in = ranks_[0]->pinned_in.data_as<int32_t>();
  const size_t bytes = fill(0, n, bucket, in);
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    int32_t* staged = rank.pinned_in.data_as<int32_t>();
    if (staged != in) std::memcpy(staged, in, bytes);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rank.act->text_ints, staged, bytes, cudaMemcpyHostToDevice, rank.stream.get()));
    return run(rank, Tower::kText, bucket, n, normalize);
  }));
  std::memcpy(embeds, ranks_[0]->pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

Status ClipCudaModel::run_pipeline(Tower tower, int64_t n, float* embeds, bool normalize,
                                   const std::function<Status(int64_t, int64_t, int64_t)>& stage_input) {
  Rank& s0 = *ranks_[0];
  Rank& s1 = *ranks_[1];
  const bool vision = tower == Tower::kVision;
  const int64_t micro = vision ? options_.vision_micro_batch : options_.text_micro_batch;
  const int64_t seq = vision ? config_.vision.num_patches() + 1 : config_.text.max_position_embeddings;
  const int64_t hidden = vision ? config_.vision.hidden_size : config_.text.hidden_size;
  const int64_t dim = config_.projection_dim;
  for (int64_t i = 0, first = 0; first < n; ++i, first += micro) {
    const int64_t count = std::min(micro, n - first), bucket = bucket_for(count);
    // Stage 0: micro-batch i may overwrite its residual stream once stage 1 has copied micro-batch i - 1 out of it
    // (the overlap); without overlap, once stage 1 has finished it.
    CUDA_RETURN_IF_ERROR(cudaSetDevice(s0.device));
    if (i > 0) {
      CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(s0.stream.get(), options_.pipeline_overlap ? s1.copied.get() : s1.done.get(), 0));
    }
    RETURN_IF_ERROR(stage_input(i, first, count));
    RETURN_IF_ERROR(launch(s0, tower, bucket));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s0.done.get(), s0.stream.get()));
    // Stage 1: take the stream (one device-to-device copy, peer-to-peer across GPUs), run, emit the embeddings.
    CUDA_RETURN_IF_ERROR(cudaSetDevice(s1.device));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s1.stream.get(), s0.done.get(), 0));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s1.act->x, s0.act->x, sizeof(float) * bucket * seq * hidden, cudaMemcpyDefault,
                                         s1.stream.get()));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s1.copied.get(), s1.stream.get()));
    RETURN_IF_ERROR(launch(s1, tower, bucket));
    if (normalize) RETURN_IF_ERROR(kernels::l2_normalize_rows_cuda(s1.act->embeds, count, dim, s1.stream.get()));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s1.pinned_out.data_as<float>() + first * dim, s1.act->embeds,
                                         sizeof(float) * count * dim, cudaMemcpyDeviceToHost, s1.stream.get()));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s1.done.get(), s1.stream.get()));
  }
  RETURN_IF_ERROR(s1.stream.synchronize());
  CUDA_RETURN_IF_ERROR(cudaSetDevice(s0.device));
  RETURN_IF_ERROR(s0.stream.synchronize());
  std::memcpy(embeds, s1.pinned_out.data(), sizeof(float) * n * dim);
  return ok_status();
}

}  // namespace mmserve::models
