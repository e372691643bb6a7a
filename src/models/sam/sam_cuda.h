// SAM on an NVIDIA GPU: the same model as sam.h (HF's SamModel), its forward written out for the CUDA kernels, the
// image encoder captured into one CUDA graph per batch bucket and the prompt decoder into one graph per token bucket.
//
// Precision: the image encoder's weights and GEMM inputs are in `dtype` (bf16 by default; f16; f32 the precise path),
// its residual stream in f32 (as CLIP's: out_proj and fc2 are GEMMs with an f32 output and beta = 1), layer norms
// read f32 and write the next GEMM's input type; the relative position tables and their projections are f32 in every
// dtype. The prompt encoder and the mask decoder run in f32 in every dtype: they are ~1 GFLOP per prompt, bound by
// launches, so f32 costs nothing measurable and keeps the masks and IoU scores at f32 accuracy (the embedding is the
// only 16-bit-rounded input they see). Sparse prompt tokens are computed on the host by the CPU model's own code
// (sam_sparse_embeddings: the same float arithmetic as HF's) and uploaded; the dense mask path runs on the GPU.
//
// Image embeddings on the device are channels-last f32 rows [grid * grid, output_channels] (what the decoder reads);
// encode_images() also returns HF's layout [output_channels, grid, grid] on the host.
//
// Graphs: at load every encoder bucket runs once eagerly (cuBLASLt picks and caches its algorithms) and is captured;
// n images replay the smallest bucket >= n (padding images are zeros, their outputs never read). The decoder pads the
// prompt's tokens to a power-of-two bucket (>= 8) and hides the padding tokens as keys (attention kv_lengths, read
// on the device), which is exactly the unpadded computation: HF's "not a point" label -1 is NOT such a pad (a -1
// point is a real token, not_a_point_embed, that every other token attends to, and changes the masks), so it is
// never used for padding. A decoder graph per (token bucket, dense mask or not) is captured on first use.
// One SamCudaModel is driven by one thread at a time (its executor's engine thread).
// Code: sam_cuda.cpp (load, upload, activation plan, graphs, entry points), sam_cuda_forward.cpp (the encoder and
// decoder forwards), sam_cuda_kernels.{h,cu} (SAM's layout kernels), sam_cuda_internal.h (the device structures).
// Tests: tests/conformance/sam_cuda_test.cpp (HF goldens in f32/f16/bf16, graphs vs eager, buckets, prompt errors).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "models/sam/sam.h"

namespace mmserve::models {

struct SamCudaOptions {
  int device = 0;
  DType dtype = DType::kBF16;              // of the image encoder: f32, f16 or bf16
  std::vector<int64_t> buckets = {1, 2, 4, 8};  // encoder batch sizes with a graph; the largest is the max batch
  bool use_graphs = true;                  // false (or env MMSERVE_CUDA_GRAPHS=0): every call runs eagerly
};

// What the model holds on the GPU, for the load log, describe() and the memory metrics.
struct SamCudaMemory {
  size_t weight_bytes = 0;      // encoder weights in the dtype (+ f32 norms, biases, tables), decoder weights f32
  size_t activation_bytes = 0;  // the encoder's activations at the largest bucket + the decoder's at the largest prompt
  size_t workspace_bytes = 0;   // cuBLASLt
  size_t graph_bytes = 0;       // device memory the instantiated graphs took (cudaMemGetInfo before/after)
  size_t pinned_bytes = 0;      // page-locked host staging
  size_t total() const { return weight_bytes + activation_bytes + workspace_bytes + graph_bytes; }
};

class SamCudaModel {
 public:
  // Loads an HF SamModel directory (the CPU model parses and checks it: the same errors), uploads the weights, plans
  // the activations and captures the encoder graphs. Errors: the model's own, no such device, out of GPU memory
  // (kResourceExhausted), a dtype or shape the kernels do not take (kUnimplemented).
  static StatusOr<std::unique_ptr<SamCudaModel>> load(const std::string& model_dir, const SamCudaOptions& options);
  ~SamCudaModel();

  const SamConfig& config() const { return config_; }
  DType dtype() const { return options_.dtype; }
  int64_t max_batch() const { return buckets_.back(); }
  bool graphs() const { return options_.use_graphs; }
  const SamCudaMemory& memory() const { return memory_; }
  // output_channels * grid * grid: the floats of one image embedding.
  int64_t embedding_floats() const;
  int device() const { return options_.device; }

  // pixels [n, channels, S, S] f32 on the host -> embeddings [n, output_channels, grid, grid] (HF's layout) on the
  // host. Any n (chunks of max_batch()).
  Status encode_images(const float* pixels, int64_t n, float* embeddings);
  // The same with the pixels on the host or on this GPU (cudaMemcpyDefault), n <= max_batch(): the n embeddings
  // stay on the GPU as channels-last rows, n * embedding_floats() floats at the returned pointer, valid until the
  // next encode call.
  StatusOr<const float*> encode_images_on_device(const float* pixels, int64_t n);

  // One prompt against one embedding (SamModel::decode's contract and errors). `embedding`: HF's layout
  // [output_channels, grid, grid] on the host.
  StatusOr<SamMasks> decode(const float* embedding, const SamPrompt& prompt, bool multimask_output);
  // The same against channels-last rows on this GPU (encode_images_on_device's output, or a copy of it). With
  // `post`, the masks are also post-processed on the GPU (kernels/mask_resize_cuda.h, bit-equal to the CPU twin)
  // and come back as SamMasks::masks instead of the low-res logits.
  StatusOr<SamMasks> decode_on_device(const float* device_rows, const SamPrompt& prompt, bool multimask_output,
                                      const SamMaskGeometry* post = nullptr);

  // The stream every call runs on (callers copying embeddings order their copies on it).
  cudaStream_t stream() const;

 private:
  struct Weights;
  struct Activations;
  struct Device;
  SamCudaModel() = default;

  Status upload_weights(const SamModel& host);
  Status plan_activations();
  Status capture_encoder_graphs();
  int64_t bucket_for(int64_t n) const;
  // The forwards over buffers already filled (sam_cuda_forward.cpp).
  Status vision_forward(int64_t batch);
  Status decoder_forward(int64_t tokens, bool dense_mask);
  Status run_encoder(int64_t bucket);
  // Prompt -> the decoder's inputs in the pinned staging (tokens padded to their bucket); returns the bucket.
  StatusOr<int64_t> stage_prompt(const SamPrompt& prompt, int64_t* real_tokens);
  // The decoder over the embedding already in the image buffer and the staged prompt.
  StatusOr<SamMasks> run_decoder(const SamPrompt& prompt, bool multimask_output, const SamMaskGeometry* post = nullptr);

  SamConfig config_;
  SamCudaOptions options_;
  std::vector<int64_t> buckets_;
  int64_t token_bucket_max_ = 0;
  std::unique_ptr<Device> dev_;
  SamCudaMemory memory_;
};

}  // namespace mmserve::models
