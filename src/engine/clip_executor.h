// ClipExecutor: one instance of a CLIP model on one device, running batches.
//
// It owns the model's weights, the activation arena (sized for the largest batch once, then reused: no
// allocation per request on the hot path) and the device choice. Batches larger than `batch_size_max` are
// split. One executor is driven by one thread at a time (the server gives each instance its own engine
// thread); it holds no locks. The CUDA path (graphs per batch bucket) lands behind the same interface.
// Tests: tests/unit/engine/clip_executor_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/clip/clip.h"

namespace mmserve::engine {

struct ExecutorOptions {
  Device device = Device::cpu();
  int threads = 0;              // CPU threads for kernels; 0 = library default (all cores)
  int64_t batch_size_max = 64;  // larger requests are run in chunks of this size
};

class ClipExecutor {
 public:
  static StatusOr<std::unique_ptr<ClipExecutor>> create(const std::string& model_dir, const ExecutorOptions& options);

  const models::ClipModel& model() const { return *model_; }
  int64_t embedding_dim() const { return model_->config().projection_dim; }
  int64_t image_size() const { return model_->config().vision.image_size; }

  // pixels: n images of [3, image_size, image_size] f32, concatenated. Returns n normalised embeddings.
  StatusOr<std::vector<float>> embed_images(const std::vector<float>& pixels, int64_t n);
  // The same over n * 3 * image_size^2 floats at `pixels` (a slice of a larger batch).
  StatusOr<std::vector<float>> embed_images(const float* pixels, int64_t n);
  // One token-id sequence per text (BOS ... EOS). Returns normalised embeddings, one row per text.
  StatusOr<std::vector<float>> embed_texts(const std::vector<std::vector<int32_t>>& ids);
  // exp(logit_scale) * image_embeds @ text_embeds^T: [images, texts].
  std::vector<float> logits_per_image(const std::vector<float>& image_embeds, int64_t images,
                                      const std::vector<float>& text_embeds, int64_t texts) const;

 private:
  ClipExecutor() = default;
  std::unique_ptr<models::ClipModel> model_;
  ExecutorOptions options_;
  Arena arena_;
};

}  // namespace mmserve::engine
