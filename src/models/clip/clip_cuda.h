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
// for inputs and outputs. Nothing is allocated after load. Graphs: at load, every (tower, bucket) forward is
// run once eagerly (which also picks and caches every cuBLASLt algorithm) and then captured; a batch of n
// replays the smallest bucket >= n with the rows past n left as padding (their outputs are never read).
// The text tower always runs max_position_embeddings (77) tokens per text: shorter texts are padded and
// masked (causal + key lengths), so one graph per bucket serves every length.
// One ClipCudaModel is driven by one thread at a time (the server's engine thread of the instance).
// Tests: tests/conformance/clip_cuda_test.cpp (HF goldens in bf16/f16/f32, graphs vs eager, buckets).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/gemm/gemm_cuda.h"
#include "models/clip/clip.h"

namespace mmserve::models {

struct ClipCudaOptions {
  int device = 0;
  DType dtype = DType::kBF16;                               // f32, f16 or bf16
  std::vector<int64_t> buckets = {1, 2, 4, 8, 16, 32, 64};  // batch sizes with a graph; the largest is the max batch
  bool use_graphs = true;  // false (or env MMSERVE_CUDA_GRAPHS=0): every call runs the kernels eagerly
};

// What the model holds on the GPU, for the load log and the memory metrics.
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
  int64_t max_batch() const { return buckets_.back(); }
  const ClipCudaMemory& memory() const { return memory_; }
  DType dtype() const { return options_.dtype; }

  // pixels: n images [3, image_size, image_size] f32 in host memory, n <= max_batch(). Writes n rows of
  // projection_dim floats to `embeds` (host), L2-normalised when `normalize`.
  Status encode_images(const float* pixels, int64_t n, float* embeds, bool normalize = true);
  // The same with the pixels already on this GPU (benchmarks: the input copy is not timed, as HF's).
  Status encode_images_on_device(const float* device_pixels, int64_t n, float* embeds, bool normalize = true);
  // Token ids (BOS ... EOS) per text, n <= max_batch(), each at most max_position_embeddings long.
  Status encode_texts(const std::vector<std::vector<int32_t>>& ids, float* embeds, bool normalize = true);

 private:
  struct BlockWeights;
  struct Weights;
  struct Activations;
  enum class Tower { kVision, kText };

  ClipCudaModel() = default;
  Status upload_weights(const ClipModel& host);
  Status plan_activations();
  Status capture_graphs();
  int64_t bucket_for(int64_t n) const;

  // The forward passes over a whole bucket, reading the inputs already in the activation buffers.
  Status vision_forward(int64_t batch);
  Status text_forward(int64_t batch);
  Status encoder_block(const BlockWeights& w, int64_t rows, int64_t seq, int64_t batch, int64_t hidden, int64_t heads,
                       int64_t intermediate, float eps, kernels::Activation act, bool causal,
                       const int32_t* kv_lengths);
  // Both encode_images entry points: validates n, copies the pixels into the activation buffer, runs.
  Status copy_and_encode_images(const float* pixels, cudaMemcpyKind kind, int64_t n, float* embeds, bool normalize);
  // Runs `tower` at `bucket`: the graph if captured, else the kernels; then normalises and copies out.
  Status run(Tower tower, int64_t bucket, int64_t n, float* embeds, bool normalize);

  ClipConfig config_;
  ClipCudaOptions options_;
  std::vector<int64_t> buckets_;
  float logit_scale_ = 0.0f;
  CudaStream stream_;
  DeviceArena weight_arena_;
  DeviceArena activation_arena_;
  std::unique_ptr<Weights> weights_;
  std::unique_ptr<Activations> act_;
  std::unique_ptr<kernels::CublasLtGemm> gemm_;
  PinnedBuffer pinned_in_, pinned_out_;
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs_;  // (tower, bucket) -> graph
  ClipCudaMemory memory_;
};

}  // namespace mmserve::models
