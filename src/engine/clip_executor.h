// ClipExecutor: one instance of a CLIP model on one device, running batches.
//
// It owns the model's weights, the activation arena (sized for the largest batch once, then reused: no
// allocation per request on the hot path) and the device choice. On `cpu` it runs models/clip/clip.h in
// f32; on `cuda:N` it runs models/clip/clip_cuda.h (bf16 by default) with one CUDA graph per
// (tower, batch bucket), a batch of n replaying the smallest bucket >= n. Batches larger than
// `batch_size_max` are split. One executor is driven by one thread at a time (the server gives each
// instance its own engine thread); it holds no locks.
// Tests: tests/unit/engine/clip_executor_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/clip/clip.h"
#if MMSERVE_HAS_CUDA
#include "models/clip/clip_cuda.h"
#endif

namespace mmserve::engine {

struct ExecutorOptions {
  Device device = Device::cpu();
  int threads = 0;              // CPU threads for kernels; 0 = library default (all cores)
  int64_t batch_size_max = 64;  // larger requests are run in chunks of this size
  // Compute dtype: nullopt = the device's default (f32 on cpu, bf16 on cuda). The CPU path takes f32 only.
  std::optional<DType> dtype;
  // CUDA: the batch sizes that get a graph (those above batch_size_max are dropped; batch_size_max itself
  // is always one). Empty = 1, 2, 4, ... up to batch_size_max.
  std::vector<int64_t> batch_buckets;
  bool cuda_graphs = true;  // CUDA: false runs the kernels eagerly (debugging, compute-sanitizer)
  // Whisper on CUDA: how the cross-attention K/V are stored: "same" (the compute dtype), "fp8_e4m3" or "int8"
  // (per row-and-head scales; half the bytes of f16). The CPU path takes "same" only.
  std::string whisper_cross_kv = "same";
  // Whisper: the most decoder rows in flight at once (every beam and best_of sample of the batch's requests); more
  // wait for rows to free up. 0 = the device's: max(batch_size_max, 5) on cuda (allocated at load), unbounded on
  // cpu. Otherwise at least 5 (the default best_of, so a default request always fits).
  int64_t whisper_decoder_rows = 0;
  // CUDA (CLIP and Whisper): tensor parallel over these GPUs (NCCL; `device` is then the first). Empty: one GPU.
  std::vector<int> tp_devices;
  // "nccl", or "staged": sums through host memory, ranks may share a GPU (checks on one GPU; core/cuda/collective.h).
  std::string tp_collective = "nccl";
  // CLIP on CUDA: pipeline parallel over two GPUs (stage s on pipeline_devices[s]), batches run as micro-batches
  // of these sizes; overlap false runs each micro-batch through both stages before the next (the bench baseline).
  std::vector<int> pipeline_devices;
  int64_t vision_micro_batch = 8, text_micro_batch = 4;
  bool pipeline_overlap = true;
};

class ClipExecutor {
 public:
  static StatusOr<std::unique_ptr<ClipExecutor>> create(const std::string& model_dir, const ExecutorOptions& options);

  const models::ClipConfig& config() const { return config_; }
  int64_t embedding_dim() const { return config_.projection_dim; }
  int64_t image_size() const { return config_.vision.image_size; }
  Device device() const { return options_.device; }
  DType dtype() const { return dtype_; }
  // Device memory (cuda) or host memory (cpu) the executor holds: weights + planned activations (+ graphs).
  int64_t memory_bytes() const;
  // One line for the load log: device, dtype, memory breakdown.
  std::string describe() const;

  // pixels: n images of [3, image_size, image_size] f32 in host memory, concatenated. Returns n normalised
  // embeddings.
  StatusOr<std::vector<float>> embed_images(const std::vector<float>& pixels, int64_t n);
  // The same over n * 3 * image_size^2 floats at `pixels` (a slice of a larger batch).
  StatusOr<std::vector<float>> embed_images(const float* pixels, int64_t n);
  // cuda only: the pixels already on this executor's GPU (benchmarks; the server passes host pixels).
  StatusOr<std::vector<float>> embed_images_on_device(const float* device_pixels, int64_t n);
  // One token-id sequence per text (BOS ... EOS). Returns normalised embeddings, one row per text.
  StatusOr<std::vector<float>> embed_texts(const std::vector<std::vector<int32_t>>& ids);
  // exp(logit_scale) * image_embeds @ text_embeds^T: [images, texts].
  std::vector<float> logits_per_image(const std::vector<float>& image_embeds, int64_t images,
                                      const std::vector<float>& text_embeds, int64_t texts) const;

 private:
  ClipExecutor() = default;
  models::ClipConfig config_;
  float logit_scale_ = 0.0f;
  ExecutorOptions options_;
  DType dtype_ = DType::kF32;
  // Exactly one of these is set, by the device.
  std::unique_ptr<models::ClipModel> model_;
  Arena arena_;
#if MMSERVE_HAS_CUDA
  std::unique_ptr<models::ClipCudaModel> cuda_model_;
#endif
};

}  // namespace mmserve::engine
