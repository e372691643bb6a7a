// CLIP on an NVIDIA GPU (see clip_cuda.h): loading. The ranks (one per GPU of a tensor-parallel group or pipeline
// stage), the weights sliced and uploaded per rank, the activation plan. The forward is clip_cuda_forward.cpp.
#include "models/clip/clip_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <deque>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_cuda.h"
#include "models/clip/clip_cuda_internal.h"
#include "models/common/tensor_parallel.h"

namespace mmserve::models {

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
  if (options.staging_slot_bytes == 0) return invalid_argument("staging_slot_bytes must be positive");
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
    ASSIGN_OR_RETURN(std::unique_ptr<ClipModel> host, ClipModel::load(model_dir, options.merge_lora.get()));
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
  if (model->ranks_[0]->pixel_staging.size() > 0) RETURN_IF_ERROR(model->choose_host_copy());
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
  if (!group_ && !pipelined()) {  // host pixels go through the staging ring (stage_pixels); no slot beyond a batch
    const ClipVisionConfig& vc = config_.vision;
    const size_t batch_bytes = sizeof(float) * max_batch_ * vc.num_channels * vc.image_size * vc.image_size;
    rank.staging_slot_bytes = std::min(options_.staging_slot_bytes, batch_bytes);
    RETURN_IF_ERROR(rank.pixel_staging.init(kPixelStagingSlots * rank.staging_slot_bytes));
    for (CudaEvent& copied : rank.staging_copied) RETURN_IF_ERROR(copied.init());
    memory_.pinned_bytes += rank.pixel_staging.size();
    const size_t level_bytes = DeviceArena::aligned(batch_bytes / sizeof(float));
    const size_t table_bytes = DeviceArena::aligned(sizeof(float) * vc.num_channels * 256);
    RETURN_IF_ERROR(rank.level_arena.init(level_bytes + table_bytes));
    ASSIGN_OR_RETURN(rank.levels, rank.level_arena.allocate_array<uint8_t>(static_cast<int64_t>(level_bytes)));
    ASSIGN_OR_RETURN(rank.level_table, rank.level_arena.allocate_array<float>(vc.num_channels * 256));
    memory_.activation_bytes += level_bytes + table_bytes;
  }
  return ok_status();
}

}  // namespace mmserve::models
