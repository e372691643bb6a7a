// CLIP on an NVIDIA GPU: the same model as clip.h, its forward written out for the CUDA kernels, captured
// into CUDA graphs per (tower, batch bucket).
//
// Precision: weights and GEMM inputs in `dtype` (bf16 by default; f16; or f32 as the precise path), the
// residual stream in f32: the output projections (out_proj, fc2) are cuBLASLt GEMMs with 16-bit inputs, an
// f32 output and beta = 1, so the residual add is fused into the GEMM and never rounded to 16 bits. Layer
// norms read the f32 stream and write the next GEMM's 16-bit input. This keeps bf16 embeddings within
// ~1e-3 of HF's f32 ones (HF's own bf16 forward rounds the stream every layer and is worse).
//
// Memory: one DeviceArena for the weights, one for the activations of the largest bucket (planned from the
// config, shared by both towers since they run one after the other on the model's stream), pinned staging
// for inputs and outputs. Nothing is allocated after load. Host pixels are read straight from the callers'
// buffers (a server batch passes one piece per request: no joined host copy), either through a small ring of
// pinned slots (ClipCudaOptions::staging_slot_bytes each; the calling thread fills one slot with streaming
// stores while the others' copies to the GPU run) or as one pageable cudaMemcpyAsync per piece (the driver's
// own staging); HostCopy::kAuto times both at load and keeps the faster (host_copy_description() says which).
// Graphs: at load, every (tower, bucket) forward is run once eagerly (which also picks and caches every
// cuBLASLt algorithm) and then captured; a batch of n replays the smallest bucket >= n with the rows past n
// left as padding (their outputs are never read). The text tower always runs max_position_embeddings (77)
// tokens per text: shorter texts are padded and masked (causal + key lengths), so one graph per bucket serves
// every length. One ClipCudaModel is driven by one thread at a time (the server's engine thread of the
// instance).
//
// Tensor parallel (issue 6 item 2; ClipCudaOptions::tp_devices): the model is T ranks, rank r on tp_devices[r],
// each holding its slice of every encoder block (models/common/tensor_parallel.h: QKV and fc1 column-parallel by
// whole heads / rows, out_proj and fc2 row-parallel) and a full copy of everything else. Each rank runs the whole
// forward on its own thread (core/rank_workers.h) and stream; after out_proj and after fc2 one all-reduce of the
// f32 residual stream (core/cuda/collective.h) makes every rank's stream whole again. Rank 0's embeddings are the
// output. With NCCL each rank captures its own graphs, all-reduces included; the host-staged collective (ranks may
// share a GPU: one-GPU checks of the sharded forward) runs eagerly. A rank failing mid-forward aborts the
// collective (the others stop waiting) and puts the model out of service: every later call is kInternal naming
// the group, which the server's replica handling takes out of rotation (issue 6 item 6).
//
// Pipeline parallel (issue 6 item 3; ClipCudaOptions::pipeline_devices): two stages, stage 0 holding the embeddings
// and the first half of each tower's blocks, stage 1 the second half and the pooling head. A batch runs as
// micro-batches (vision 8 and text 4 by default, the design document's), each stage replaying its own graph per
// micro-batch; the f32 residual stream of micro-batch i crosses to stage 1 with one device-to-device copy, and
// stage 0 starts micro-batch i + 1 as soon as that copy is done, so the stages work on consecutive micro-batches at
// once. Events order it all on the two streams; the host only waits for the last embeddings. Each stage's
// activations are sized for one micro-batch. With pipeline_overlap = false every micro-batch goes through both
// stages before the next starts (the benchmark's baseline for the overlap).
// Code: clip_cuda.cpp (load: ranks, sharding, upload, activation plan), clip_cuda_forward.cpp (forward, graphs,
// encode entry points, pipeline), clip_cuda_host_copy.cpp (host pixels to the GPU), clip_cuda_internal.h (the
// device-side structures they use).
// Tests: tests/conformance/clip_cuda_test.cpp (HF goldens in bf16/f16/f32, graphs vs eager, buckets),
// tests/conformance/clip_cuda_tp_test.cpp (tensor and pipeline parallel, faults), tests/unit/engine/
// clip_batch_cuda_test.cpp (host pixels in pieces, both copy ways, bit for bit against device pixels).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/cuda/tp_group.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/gemm/gemm_cuda.h"
#include "models/clip/clip.h"
#include "models/common/encoder_block_cuda.h"

namespace mmserve::models {

using mmserve::TpCollectiveKind;

// How host pixels reach a single-rank model's GPU (clip_cuda_host_copy.cpp). Tensor and pipeline parallel always
// copy one contiguous host buffer, pageable.
enum class HostCopy { kAuto, kStaged, kPageable };

struct ClipCudaOptions {
  int device = 0;
  // Tensor parallel over these GPUs (rank r on tp_devices[r]; `device` is then unused). Empty: no group. One entry
  // is a group of one: the collective path on one GPU (NCCL's all-reduce over one rank adds nothing), which the
  // tests use where there is no second GPU. The heads of both towers must divide by the group size.
  std::vector<int> tp_devices;
  TpCollectiveKind tp_collective = TpCollectiveKind::kNccl;
  // Pipeline parallel over two GPUs (stage s on pipeline_devices[s]; the two may be the same GPU). Exclusive with
  // tp_devices. `buckets`' largest entry is then the largest batch per call; graphs are captured per micro-batch.
  std::vector<int> pipeline_devices;
  int64_t vision_micro_batch = 8;
  int64_t text_micro_batch = 4;
  bool pipeline_overlap = true;
  DType dtype = DType::kBF16;                               // f32, f16 or bf16
  std::vector<int64_t> buckets = {1, 2, 4, 8, 16, 32, 64};  // batch sizes with a graph; the largest is the max batch
  bool use_graphs = true;  // false (or env MMSERVE_CUDA_GRAPHS=0): every call runs the kernels eagerly
  // kAuto: at load, time the pinned ring and pageable copies over one batch and keep the faster.
  HostCopy host_copy = HostCopy::kAuto;
  // The ring's three page-locked slots have this many bytes each (tests make it small so that slots end inside
  // images).
  size_t staging_slot_bytes = size_t{4} << 20;
  // A LoRA adapter merged into the weights at load (models/clip/clip_lora.h): this model is the adapter's copy.
  std::shared_ptr<const ClipLora> merge_lora;
};

// What the model holds on the GPU, for the load log and the memory metrics.
// Figures are summed over the ranks of a tensor-parallel group.
struct ClipCudaMemory {
  size_t weight_bytes = 0;      // weights in the compute dtype (+ f32 norms and residual-side biases)
  size_t activation_bytes = 0;  // the planned activations of the largest bucket
  size_t workspace_bytes = 0;   // cuBLASLt workspace
  size_t graph_bytes = 0;       // device memory the instantiated graphs took (cudaMemGetInfo before/after)
  size_t pinned_bytes = 0;      // page-locked host staging
  std::map<int64_t, size_t> vision_bucket_bytes;  // activations one vision bucket uses
  std::map<int64_t, size_t> text_bucket_bytes;
};

class ClipCudaModel {
 public:
  // Loads an HF CLIPModel directory (as ClipModel::load), uploads its weights, plans the activations,
  // and captures the graphs. Errors: the model's own (bad config, missing tensors), no such device,
  // out of GPU memory (kResourceExhausted), a dtype or shape the kernels do not take (kUnimplemented).
  static StatusOr<std::unique_ptr<ClipCudaModel>> load(const std::string& model_dir, const ClipCudaOptions& options);
  ~ClipCudaModel();

  const ClipConfig& config() const { return config_; }
  float logit_scale() const { return logit_scale_; }
  int64_t max_batch() const { return max_batch_; }
  int pipeline_stages() const { return pipelined() ? static_cast<int>(ranks_.size()) : 1; }
  const ClipCudaMemory& memory() const { return memory_; }
  DType dtype() const { return options_.dtype; }
  int tp_world_size() const { return group_ ? static_cast<int>(ranks_.size()) : 1; }
  // "nccl" / "staged" under tensor parallel, "" without.
  std::string tp_collective() const;
  // How host pixels travel, with the rates measured at load: "pinned ring, 14.2 GB/s (pageable 12.0 GB/s)".
  std::string host_copy_description() const;
  // OK while every rank and the collective are healthy; kInternal (sticky) once the group is out of service.
  Status health();
  // Puts a tensor-parallel group out of service with `why` (aborting its collective: ranks waiting in it return).
  // For the runtime's fault handling and the fault tests; no-op without a group.
  void abort_tp_group(const Status& why);

  // pixels: n images [3, image_size, image_size] f32 in host memory, n <= max_batch(). Writes n rows of
  // projection_dim floats to `embeds` (host), L2-normalised when `normalize`.
  Status encode_images(const float* pixels, int64_t n, float* embeds, bool normalize = true);
  // The same over the concatenation of `pieces` (host memory, each a whole number of images; a batch's requests
  // need not be contiguous): n = the images of all pieces. kInvalidArgument for a piece that is not whole images.
  Status encode_images(std::span<const std::span<const float>> pieces, float* embeds, bool normalize = true);
  // The same from 8-bit levels, [3, image_size, image_size] bytes per image (frontends/image/preprocess.h:
  // to_pixel_levels), and the table [3, 256] mapping them to pixel values (pixel_value_table): a quarter of the
  // bytes through the engine thread's host copy and PCIe, expanded on the GPU by kernels/pixel_levels (the values
  // are the float path's bit for bit). Tensor / pipeline parallel models expand on the host and take the float path.
  Status encode_image_levels(std::span<const std::span<const uint8_t>> pieces, std::span<const float> table,
                             float* embeds, bool normalize = true);
  // The same with the n images' levels written on the GPU by `fill(device_levels, stream)`: it queues, on the
  // model's input stream, whatever writes [n, 3, image_size, image_size] bytes at device_levels (the engine's batch
  // image decoder: PNGs decoded on the GPU). Single-rank models; n in [1, max_batch()].
  Status encode_image_levels_with(int64_t n, std::span<const float> table,
                                  const std::function<Status(uint8_t* device_levels, cudaStream_t stream)>& fill,
                                  float* embeds, bool normalize = true);
  // Whether encode_image_levels_with is available (single rank, no pipeline).
  bool takes_device_levels() const;
  // The same with the pixels already on this GPU (benchmarks: the input copy is not timed, as HF's).
  Status encode_images_on_device(const float* device_pixels, int64_t n, float* embeds, bool normalize = true);
  // Token ids (BOS ... EOS) per text, n <= max_batch(), each at most max_position_embeddings long.
  Status encode_texts(const std::vector<std::vector<int32_t>>& ids, float* embeds, bool normalize = true);

 private:
  using BlockWeights = EncoderBlockCudaWeights;
  struct Weights;
  struct Activations;
  struct Rank;
  // One tower's shapes on one rank: `heads` and `mlp` are the rank's share under tensor parallel.
  struct TowerShape {
    int64_t hidden = 0, heads = 0, head_dim = 0, mlp = 0;
    int64_t inner() const { return heads * head_dim; }  // the rank's width of q, k, v and the attention context
  };
  enum class Tower { kVision, kText };
  // Slots of the pixel staging ring: one being filled while the others' copies run (the DMA outpaces a host copy).
  static constexpr size_t kPixelStagingSlots = 3;

  ClipCudaModel() = default;
  Status make_ranks();
  bool pipelined() const { return !options_.pipeline_devices.empty(); }
  // Pipeline parallel: which blocks of each tower stage `rank` holds (all of them otherwise).
  void assign_layers();
  Status upload_weights(Rank& rank, const ClipModel& host);
  Status plan_activations(Rank& rank);
  Status capture_graphs();
  int64_t bucket_for(int64_t n) const;
  TowerShape vision_shape(int rank) const;
  TowerShape text_shape(int rank) const;
  // body(rank) on every rank at once (TpGroup::run's error rules); without a group, on the calling thread.
  Status run_ranks(const std::function<Status(Rank&)>& body);

  // The forward passes of one rank over a whole bucket, reading the inputs already in its activation buffers.
  Status vision_forward(Rank& rank, int64_t batch);
  Status text_forward(Rank& rank, int64_t batch);
  Status encoder_block(Rank& rank, const BlockWeights& w, int64_t rows, int64_t seq, int64_t batch,
                       const TowerShape& shape, float eps, kernels::Activation act, bool causal,
                       const int32_t* kv_lengths);
  // The residual stream after a row-parallel GEMM: the sum over ranks (nothing without tensor parallel).
  Status reduce_residual(Rank& rank, int64_t rows, int64_t hidden);
  // Single-rank models (clip_cuda_host_copy.cpp): copies host `pieces` into rank 0's pixel buffer, enqueued on its
  // stream, through the pinned ring (`staged`; the host returns once the last piece is in a slot) or pageable.
  Status copy_host_pixels(std::span<const std::span<const float>> pieces, bool staged);
  // The same for any bytes to any device buffer of rank 0 (the float pixels and the 8-bit levels both go this way).
  Status copy_host_bytes(std::span<const std::span<const char>> pieces, char* device, bool staged);
  Status stage_bytes(std::span<const std::span<const char>> pieces, char* device);
  // HostCopy::kAuto: times both ways over one batch of image-sized pieces (best of three) and sets the choice.
  Status choose_host_copy();
  // Both encode_images entry points: validates n, copies the pixels into the activation buffer, runs.
  Status copy_and_encode_images(const float* pixels, cudaMemcpyKind kind, int64_t n, float* embeds, bool normalize);
  // Runs `tower` at `bucket` on one rank: the graph if captured, else the kernels; rank 0 then normalises and
  // copies out (into its pinned staging; the caller copies to `embeds`).
  Status run(Rank& rank, Tower tower, int64_t bucket, int64_t n, bool normalize);
  // Enqueues one stage's forward of `tower` at `bucket` on its stream (graph or kernels), nothing else.
  Status launch(Rank& rank, Tower tower, int64_t bucket);
  // Pipeline parallel: n items as micro-batches through both stages. `stage_input(i, first, count)` enqueues
  // micro-batch i's inputs (items [first, first + count)) on the stage streams.
  Status run_pipeline(Tower tower, int64_t n, float* embeds, bool normalize,
                      const std::function<Status(int64_t, int64_t, int64_t)>& stage_input);

  ClipConfig config_;
  ClipCudaOptions options_;
  std::vector<int64_t> buckets_;  // graphed batch sizes (the micro-batch sizes under pipeline parallel)
  int64_t max_batch_ = 0;         // the largest batch per call
  float logit_scale_ = 0.0f;
  std::vector<std::unique_ptr<Rank>> ranks_;  // rank 0 first; one without tensor parallel
  std::unique_ptr<TpGroup> group_;            // null without tensor parallel
  ClipCudaMemory memory_;
  bool staged_host_copy_ = true;                        // host pixels through the ring (else pageable per piece)
  double staged_gb_per_s_ = 0, pageable_gb_per_s_ = 0;  // measured by choose_host_copy (0: not measured)
};

}  // namespace mmserve::models
