// ClipExecutor (see clip_executor.h).
#include "engine/clip_executor.h"

#include <algorithm>

#include "kernels/gemm/gemm.h"

namespace mmserve::engine {

StatusOr<std::unique_ptr<ClipExecutor>> ClipExecutor::create(const std::string& model_dir,
                                                             const ExecutorOptions& options) {
  if (!options.device.is_cpu()) {
    return unimplemented("device " + options.device.to_string() +
                         ": this build runs CLIP on the CPU only (the CUDA backend is a separate issue)");
  }
  if (options.batch_size_max <= 0) return invalid_argument("batch_size_max must be positive");
  if (options.threads > 0) kernels::set_cpu_threads(options.threads);
  auto executor = std::unique_ptr<ClipExecutor>(new ClipExecutor());
  executor->options_ = options;
  ASSIGN_OR_RETURN(executor->model_, models::ClipModel::load(model_dir));
  // Size the arena once for the largest image batch; text batches are smaller for every real CLIP.
  executor->arena_.reserve(
      std::max(executor->model_->image_workspace_bytes(options.batch_size_max),
               executor->model_->text_workspace_bytes(options.batch_size_max,
                                                      executor->model_->config().text.max_position_embeddings)));
  return executor;
}

StatusOr<std::vector<float>> ClipExecutor::embed_images(const std::vector<float>& pixels, int64_t n) {
  const int64_t size = image_size(), channels = model_->config().vision.num_channels;
  if (n < 0 || static_cast<int64_t>(pixels.size()) != n * channels * size * size) {
    return invalid_argument("expected " + std::to_string(n) + " images of [" + std::to_string(channels) + ", " +
                            std::to_string(size) + ", " + std::to_string(size) + "] pixel values");
  }
  return embed_images(pixels.data(), n);
}

StatusOr<std::vector<float>> ClipExecutor::embed_images(const float* pixels, int64_t n) {
  const int64_t size = image_size(), channels = model_->config().vision.num_channels;
  const int64_t per_image = channels * size * size, dim = embedding_dim();
  if (n < 0) return invalid_argument("negative image count");
  std::vector<float> embeds(static_cast<size_t>(n * dim));
  for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
    const int64_t count = std::min(options_.batch_size_max, n - begin);
    Tensor in(const_cast<float*>(pixels) + begin * per_image, DType::kF32, {count, channels, size, size});
    Tensor out(embeds.data() + begin * dim, DType::kF32, {count, dim});
    RETURN_IF_ERROR(model_->encode_images(in, out, arena_));
  }
  return embeds;
}

StatusOr<std::vector<float>> ClipExecutor::embed_texts(const std::vector<std::vector<int32_t>>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), dim = embedding_dim();
  std::vector<float> embeds(static_cast<size_t>(n * dim));
  for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
    const int64_t count = std::min(options_.batch_size_max, n - begin);
    std::vector<std::vector<int32_t>> chunk(ids.begin() + begin, ids.begin() + begin + count);
    Tensor out(embeds.data() + begin * dim, DType::kF32, {count, dim});
    RETURN_IF_ERROR(model_->encode_texts(chunk, out, arena_));
  }
  return embeds;
}

std::vector<float> ClipExecutor::logits_per_image(const std::vector<float>& image_embeds, int64_t images,
                                                  const std::vector<float>& text_embeds, int64_t texts) const {
  std::vector<float> logits(static_cast<size_t>(images * texts));
  const int64_t dim = embedding_dim();
  Tensor img(const_cast<float*>(image_embeds.data()), DType::kF32, {images, dim});
  Tensor txt(const_cast<float*>(text_embeds.data()), DType::kF32, {texts, dim});
  Tensor out(logits.data(), DType::kF32, {images, texts});
  model_->logits_per_image(img, txt, out);
  return logits;
}

}  // namespace mmserve::engine
