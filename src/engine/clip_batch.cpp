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

BatchRun run_clip_batch(engine::ClipExecutor& executor, const std::vector<PendingRequestPtr>& batch,
                        const EarlyFinish& early, const ImageChunking& chunking) {
  BatchRun run;
  run.finished_early.assign(batch.size(), false);
  std::vector<std::vector<int32_t>> ids;
  std::vector<float> pixels;
  for (const PendingRequestPtr& r : batch) {
    ids.insert(ids.end(), r->text_ids.begin(), r->text_ids.end());
    pixels.insert(pixels.end(), r->pixels.begin(), r->pixels.end());
    run.images += r->images;
  }
  run.texts = static_cast<int64_t>(ids.size());
  const int64_t dim = executor.embedding_dim();

  // Request i's rows start at these offsets of the towers' outputs.
  std::vector<int64_t> text_offset(batch.size()), image_offset(batch.size());
  for (size_t i = 0, t = 0, m = 0; i < batch.size(); ++i) {
    text_offset[i] = static_cast<int64_t>(t);
    image_offset[i] = static_cast<int64_t>(m);
    t += batch[i]->text_ids.size();
    m += static_cast<size_t>(batch[i]->images);
  }
  auto build = [&](size_t i, const std::vector<float>& text_embeds, const std::vector<float>& image_embeds) {
    const PendingRequestPtr& r = batch[i];
    ResponseData out;
    out.dim = dim;
    out.texts = static_cast<int64_t>(r->text_ids.size());
    out.images = r->images;
    out.tokens = r->tokens;
    out.batch_size = static_cast<int>(std::max(out.texts > 0 ? run.texts : 0, out.images > 0 ? run.images : 0));
    std::vector<float> own_text, own_image;  // this request's rows, for its logits
    int64_t text_row = text_offset[i], image_row = image_offset[i];
    for (bool is_image : r->input_is_image) {
      const std::vector<float>& source = is_image ? image_embeds : text_embeds;
      const int64_t row = is_image ? image_row++ : text_row++;
      std::vector<float> embedding(source.begin() + row * dim, source.begin() + (row + 1) * dim);
      std::vector<float>& own = is_image ? own_image : own_text;
      own.insert(own.end(), embedding.begin(), embedding.end());
      out.embeddings.push_back(std::move(embedding));
    }
    if (out.images > 0 && out.texts > 0) {
      out.logits_per_image = executor.logits_per_image(own_image, out.images, own_text, out.texts);
    }
    return out;
  };

  const Clock::time_point start = Clock::now();
  StatusOr<std::vector<float>> text_embeds = std::vector<float>();
  StatusOr<std::vector<float>> image_embeds = std::vector<float>();
  if (run.texts > 0) text_embeds = executor.embed_texts(ids);
  const double text_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (early && text_embeds.ok() && run.images > 0) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i]->images != 0) continue;
      early(i, build(i, *text_embeds, {}), text_ms);
      run.finished_early[i] = true;
    }
  }
  double preempted_ms = 0;  // time spent serving other requests between chunks: not this batch's compute
  if (run.images > 0 && text_embeds.ok()) {
    const int64_t chunk = chunking.images > 0 && chunking.between_chunks ? chunking.images : run.images;
    const int64_t per_image = static_cast<int64_t>(pixels.size()) / run.images;
    std::vector<float> all;
    for (int64_t begin = 0; begin < run.images && image_embeds.ok(); begin += chunk) {
      const int64_t count = std::min(chunk, run.images - begin);
      StatusOr<std::vector<float>> part = executor.embed_images(pixels.data() + begin * per_image, count);
      if (!part.ok()) {
        image_embeds = part.status();
        break;
      }
      all.insert(all.end(), part->begin(), part->end());
      if (begin + count < run.images) {
        const Clock::time_point paused = Clock::now();
        chunking.between_chunks();
        preempted_ms += std::chrono::duration<double, std::milli>(Clock::now() - paused).count();
      }
    }
    if (image_embeds.ok()) image_embeds = std::move(all);
  }
  run.compute_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() - preempted_ms;

  const Status failed = !text_embeds.ok() ? text_embeds.status() : image_embeds.status();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (run.finished_early[i]) {
      run.responses.emplace_back(Status(StatusCode::kInternal, "answered early"));
    } else if (!text_embeds.ok() || !image_embeds.ok()) {
      run.responses.emplace_back(failed.with_context("model forward"));
    } else {
      run.responses.emplace_back(build(i, *text_embeds, *image_embeds));
    }
  }
  return run;
}

}  // namespace mmserve::serving
