// LLaVA's image side on an NVIDIA GPU (issue 15): the CLIP vision tower up to the deepest feature layer, the
// feature selection (layers side by side, CLS dropped under "default") and the projector, the same forward as
// LlavaModel::encode_images (llava.h) over the CUDA kernels. The decoder is a LlamaCudaModel loaded from the same
// checkpoint (LlamaCudaModel::load_decoder with the layout's names), which takes the features as the placeholder
// rows' embeddings (DecoderStep.embed_rows).
//
// Precision as ClipCudaModel: weights and GEMM inputs in `dtype`, the tower's residual stream f32
// (models/common/encoder_block_cuda.h), the projector's output f32 (what the decoder's f32 residual stream takes).
// Blocks past the deepest feature layer are never uploaded. Runs eagerly on its own stream, up to `max_images`
// images per call (more are run in chunks).
//
// LoRA on the projector (issue 16): encode with an adapter adds PEFT's unmerged lora.Linear deltas, as
// LlavaModel::encode_images does on the host: per adapted linear two cuBLASLt GEMMs, t = x A^T [rows, r] and
// y += scale * t B^T, linear_1's before the activation. The rank values and B take the dtype of the output they join:
// linear_1's in `dtype` (its output is), linear_2's in f32 (it adds to the f32 features); A is in `dtype` (the GEMM's
// other input is the linear's `dtype` input). A and B go to the device on an adapter load's first image and stay in a
// cache of kProjectorLoraEntries loads keyed by LoraAdapter::id (see ProjectorLora).
// Tests: tests/conformance/llava_cuda_test.cpp (HF's image features and logits under the 2x rule; the adapted
// projector against LlavaModel's); bench: bench/llava_gpu_bench.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/gemm/gemm_cuda.h"
#include "models/common/encoder_block_cuda.h"
#include "models/llava/llava.h"

namespace mmserve::models {

struct LlavaCudaVisionOptions {
  int device = 0;
  DType dtype = DType::kBF16;
  int64_t max_images = 8;  // per forward (the activations are sized for it)
};

class LlavaCudaVision {
 public:
  // The tower and projector of an HF LLaVA directory (the decoder's tensors are not read here).
  static StatusOr<std::unique_ptr<LlavaCudaVision>> load(const std::string& model_dir,
                                                         const LlavaCudaVisionOptions& options);
  // Random weights of `config`'s shapes (benchmarks of shapes with no checkpoint).
  static StatusOr<std::unique_ptr<LlavaCudaVision>> random(const LlavaConfig& config,
                                                           const LlavaCudaVisionOptions& options, uint64_t seed);
  ~LlavaCudaVision();
  const LlavaConfig& config() const { return config_; }
  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.used()); }
  cudaStream_t stream() const { return stream_.get(); }

  // LLaVA-NeXT's image_newline row (f32, host; empty for LLaVA): the executor packs the tiles' rows with it.
  const std::vector<float>& image_newline() const { return image_newline_; }

  // pixels: n images (LLaVA-NeXT: tiles) [3, S, S] f32 in host memory -> features: n * tokens_per_image rows of text
  // hidden f32 (host). Not thread-safe (one caller at a time: the buffers are the object's).
  Status encode(const float* pixels, int64_t n, float* features);
  // The same with `adapter`'s deltas on the projector (LoraAdapter::projector, f32 host matrices; a module of rank 0
  // is unadapted; null or an adapter that leaves the projector alone: the plain forward). The first call with a load
  // uploads its matrices. kInvalidArgument for modules of other shapes than this projector's (an adapter loaded for
  // another model), kFailedPrecondition for one without its f32 matrices.
  Status encode(const float* pixels, int64_t n, float* features, const std::shared_ptr<const LoraAdapter>& adapter);
  // Adapter loads whose projector matrices are on the device now (at most kProjectorLoraEntries).
  int64_t projector_lora_entries() const { return static_cast<int64_t>(projector_loras_.size()); }
  static constexpr size_t kProjectorLoraEntries = 4;
  // The same with pixels already on the device and the features left on it (device_features()), for benchmarks.
  Status encode_on_device(const float* device_pixels, int64_t n);
  const float* device_features() const { return features_; }

 private:
  // One adapter load's projector deltas on the device: per linear (0: linear_1, 1: linear_2) A [r, in] and B [out, r]
  // (r 0: unadapted), and the rank values' scratch for max_images. The cache is an LRU keyed by LoraAdapter::id
  // (unique per load, so a reload under the same name is another entry) holding a weak_ptr, not the adapter: an
  // entry whose adapter is gone (unloaded from the registry and held by no request) is freed at the next encode, and
  // a model serving many adapters keeps at most kProjectorLoraEntries loads' matrices (the least recently used one
  // goes for a new one). Cheap to rebuild: a few small host-to-device copies.
  struct ProjectorLora {
    uint64_t id = 0;
    std::weak_ptr<const LoraAdapter> adapter;
    uint64_t used = 0;  // projector_lora_clock_ at its last encode
    std::array<int64_t, 2> rank{};
    std::array<float, 2> scale{};
    std::array<const void*, 2> a{}, b{};
    void* scratch = nullptr;  // [max_images * tokens_per_image, max rank], f32 or `dtype`
    std::unique_ptr<DeviceArena> memory;
  };
  LlavaCudaVision() = default;
  Status init(const LlavaConfig& config, const LlavaCudaVisionOptions& options);
  // `adapter`'s entry (uploaded now if it has none), after freeing the entries of adapters that are gone.
  StatusOr<const ProjectorLora*> projector_lora(const std::shared_ptr<const LoraAdapter>& adapter);
  void drop_expired_projector_loras();
  Status forward(int64_t n, const ProjectorLora* lora = nullptr);  // pixels_ -> features_
  // y [rows, out] (`y_dtype`, ld out) += scale * (x [rows, in] A^T) B^T for linear `k` of `lora`; x in `dtype`.
  Status add_projector_delta(const ProjectorLora& lora, int k, const void* x, int64_t rows, void* y, DType y_dtype);

  LlavaConfig config_;
  LlavaCudaVisionOptions options_;
  int64_t layers_ = 0;  // blocks run: the deepest feature layer
  CudaStream stream_;
  DeviceArena weights_, buffers_;
  void* gemm_workspace_ = nullptr;
  std::unique_ptr<kernels::CublasLtGemm> gemm_;
  std::vector<EncoderBlockCudaWeights> blocks_;
  const void *class_embedding_ = nullptr, *patch_weight_ = nullptr, *positions_ = nullptr;
  const float *pre_ln_w_ = nullptr, *pre_ln_b_ = nullptr;
  const void *linear1_w_ = nullptr, *linear1_b_ = nullptr, *linear2_w_ = nullptr;
  const float* linear2_b_ = nullptr;
  // Buffers for max_images.
  float *pixels_ = nullptr, *patch_out_ = nullptr, *features_ = nullptr;
  void *patches_ = nullptr, *selected_ = nullptr, *mid_ = nullptr;
  EncoderBlockCudaBuffers block_;
  std::vector<float> image_newline_;
  std::vector<ProjectorLora> projector_loras_;
  uint64_t projector_lora_clock_ = 0;
};

}  // namespace mmserve::models
