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
// Tests: tests/gpu/llava_cuda_test.cpp (HF's image features and logits under the 2x rule); bench:
// bench/llava_gpu_bench.cpp.
#pragma once

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
  // hidden f32 (host).
  Status encode(const float* pixels, int64_t n, float* features);
  // The same with pixels already on the device and the features left on it (device_features()), for benchmarks.
  Status encode_on_device(const float* device_pixels, int64_t n);
  const float* device_features() const { return features_; }

 private:
  LlavaCudaVision() = default;
  Status init(const LlavaConfig& config, const LlavaCudaVisionOptions& options);
  Status forward(int64_t n);  // pixels_ -> features_

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
};

}  // namespace mmserve::models
