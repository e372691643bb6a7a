// run_clip_batch and bucket_for (see clip_batch.h). Tests: tests/unit/serving/inference_server_test.cpp.
#include "serving/clip_batch.h"

#include <algorithm>

namespace mmserve::serving {

int64_t bucket_for(int64_t n, const std::vector<int>& buckets) {
  if (n <= 0) return n;
  for (int b : buckets) {
    if (b >= n) return b;
  }
  return n;
}

BatchRun run_clip_batch(engine::ClipExecutor& executor, const std::vector<PendingRequestPtr>& batch) {
  BatchRun run;
  std::vector<std::vector<int32_t>> ids;
  std::vector<float> pixels;
  for (const PendingRequestPtr& r : batch) {
    ids.insert(ids.end(), r->text_ids.begin(), r->text_ids.end());
    pixels.insert(pixels.end(), r->pixels.begin(), r->pixels.end());
    std::vector<float>().swap(r->pixels);
    run.images += r->images;
  }
  run.texts = static_cast<int64_t>(ids.size());

  const Clock::time_point start = Clock::now();
  StatusOr<std::vector<float>> text_embeds = std::vector<float>();
  StatusOr<std::vector<float>> image_embeds = std::vector<float>();
  if (run.texts > 0) text_embeds = executor.embed_texts(ids);
  if (run.images > 0 && text_embeds.ok()) image_embeds = executor.embed_images(pixels, run.images);
  run.compute_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  const Status failed = !text_embeds.ok() ? text_embeds.status() : image_embeds.status();
  if (!text_embeds.ok() || !image_embeds.ok()) {
    for (size_t i = 0; i < batch.size(); ++i) run.responses.emplace_back(failed.with_context("model forward"));
    return run;
  }

  const int64_t dim = executor.embedding_dim();
  int64_t text_row = 0, image_row = 0;
  for (const PendingRequestPtr& r : batch) {
    ResponseData out;
    out.dim = dim;
    out.texts = static_cast<int64_t>(r->text_ids.size());
    out.images = r->images;
    out.tokens = r->tokens;
    out.batch_size = static_cast<int>(std::max(out.texts > 0 ? run.texts : 0, out.images > 0 ? run.images : 0));
    std::vector<float> own_text, own_image;  // this request's rows, for its logits
    for (bool is_image : r->input_is_image) {
      const std::vector<float>& source = is_image ? *image_embeds : *text_embeds;
      const int64_t row = is_image ? image_row++ : text_row++;
      std::vector<float> embedding(source.begin() + row * dim, source.begin() + (row + 1) * dim);
      std::vector<float>& own = is_image ? own_image : own_text;
      own.insert(own.end(), embedding.begin(), embedding.end());
      out.embeddings.push_back(std::move(embedding));
    }
    if (out.images > 0 && out.texts > 0) {
      out.logits_per_image = executor.logits_per_image(own_image, out.images, own_text, out.texts);
    }
    run.responses.emplace_back(std::move(out));
  }
  return run;
}

}  // namespace mmserve::serving
