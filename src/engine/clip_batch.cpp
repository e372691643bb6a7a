// ClipExecutor::run (see clip_executor.h): one dynamic batch of CLIP requests. Every text of every request goes
// through embed_texts as one batch and every image through embed_images as another (CLIP's towers are
// independent, so each is batched on its own), then the rows are handed back to their requests in input order,
// with logits_per_image for requests that have both kinds.
//
// Preemption by time: when the hooks set chunk_budget_ms, each tower runs in chunks of about that much device
// time (the chunk size follows the tower's measured chunk times, fixed cost and per row apart: chunk_cost.h;
// rounded down to a power of two so a CUDA graph bucket fits it), and between_chunks runs between them and between the towers: an urgent request waits
// about one chunk, not a whole batch (a batch of 64 texts on one CPU core is ~tens of ms). Text-only requests
// finish right after the text tower (no head-of-line blocking behind images).
// The pixels are never consumed (a batch that fails with a device fault is retried on another replica) nor
// joined: each request's pixels go to embed_images as one piece (on cuda straight into the pinned staging ring).
// Text ids are joined (they are small).
// Tests: tests/unit/engine/clip_batch_test.cpp, tests/unit/serving/inference_server_test.cpp.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <span>

#include "engine/clip_executor.h"
#include "kernels/pixel_levels/pixel_levels.h"

namespace mmserve::engine {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Rows [0, n) of one tower through `embed(begin, count)`, in chunks of about hooks.chunk_budget_ms when the hooks
// set a preemption point (sized by `cost`, the tower's measured chunk times, which this updates; a power of two
// rows, the CUDA graphs' buckets), calling
// hooks.between_chunks between chunks; the time spent in the hook is added to `preempted_ms`.
template <typename Embed>
StatusOr<std::vector<float>> run_tower(int64_t n, int64_t dim, const BatchHooks& hooks, ChunkCost& cost,
                                       double& preempted_ms, Embed&& embed) {
  const int64_t chunk = hooks.between_chunks ? cost.rows_for(hooks.chunk_budget_ms, n, true) : n;
  std::vector<float> all;
  all.reserve(static_cast<size_t>(n * dim));
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    const auto chunk_start = std::chrono::steady_clock::now();
    StatusOr<std::vector<float>> part = embed(begin, count);
    if (!part.ok()) return part.status();
    cost.observe(count, ms_since(chunk_start));
    all.insert(all.end(), part->begin(), part->end());
    if (begin + count < n && hooks.between_chunks) {
      const auto paused = std::chrono::steady_clock::now();
      hooks.between_chunks();
      preempted_ms += ms_since(paused);
    }
  }
  return all;
}

}  // namespace

BatchStats ClipExecutor::run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  // The requests by adapter, the base model's first (almost every batch is one group: it runs as it came). With
  // the batch decoder, requests carrying pixel_values floats form groups of their own: a group's images are then
  // all levels (decoded here or by the preparer) or all floats.
  std::map<std::pair<std::string, bool>, std::vector<size_t>> groups;
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto* input = dynamic_cast<const ClipInput*>(batch[i].input);
    const bool floats = decodes_images_in_batch() && input != nullptr && !input->pixels.empty();
    groups[{input != nullptr ? input->adapter : std::string(), floats}].push_back(i);
  }
  if (groups.size() == 1 && groups.begin()->first.first.empty()) return run_on(batch, hooks);
  BatchStats stats;
  for (const auto& group : groups) {
    const std::string& name = group.first.first;
    const std::vector<size_t>& indices = group.second;  // a plain reference: lambdas below capture it
    if (stats.device_fault) {  // the device broke in an earlier group: these fail as it did (and are retried)
      for (size_t i : indices) hooks.finish(i, *stats.device_fault, 0);
      continue;
    }
    std::shared_ptr<AdapterModel> adapter;
    if (!name.empty()) {
      StatusOr<std::shared_ptr<AdapterModel>> found = adapter_model(name);
      if (!found.ok()) {
        for (size_t i : indices) hooks.finish(i, found.status(), 0);
        continue;
      }
      adapter = std::move(*found);
    }
    std::vector<BatchItem> items;
    for (size_t i : indices) items.push_back(batch[i]);
    BatchHooks group_hooks = hooks;
    group_hooks.finish = [&](size_t index, StatusOr<std::shared_ptr<const ModelOutput>> out, double ms) {
      hooks.finish(indices[index], std::move(out), ms);
    };
    // This group's passes run on the adapter's copy (`adapter` keeps it alive if it is unloaded meanwhile).
    cpu_ = adapter ? adapter->model.get() : model_.get();
#if MMSERVE_HAS_CUDA
    cuda_ = adapter ? adapter->cuda_model.get() : cuda_model_.get();
#endif
    const BatchStats part = run_on(items, group_hooks);
    cpu_ = model_.get();
#if MMSERVE_HAS_CUDA
    cuda_ = cuda_model_.get();
#endif
    if (adapter) adapter->requests += static_cast<int64_t>(indices.size());
    for (int s = 0; s < kBatchSlots; ++s) stats.slot_items[s] += part.slot_items[s];
    stats.compute_ms += part.compute_ms;
    if (part.device_fault) stats.device_fault = part.device_fault;
  }
  return stats;
}

BatchStats ClipExecutor::run_on(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  BatchStats stats;
  std::vector<const ClipInput*> inputs(batch.size());
  std::vector<bool> done(batch.size(), false);
  auto finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out, double ms) {
    done[i] = true;
    hooks.finish(i, std::move(out), ms);
  };
  std::vector<std::vector<int32_t>> ids;
  // Each request's pixels stay where its preparation put them: the image tower reads them piece by piece, as
  // 8-bit levels when every request has them under one table (decoded images), else as floats.
  std::vector<std::span<const float>> pixels;
  std::vector<std::span<const uint8_t>> levels;
  const std::vector<float>* level_table = nullptr;
  bool all_levels = true, kept_pngs = false;
  int64_t images = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    inputs[i] = dynamic_cast<const ClipInput*>(batch[i].input);
    if (inputs[i] == nullptr) {
      finish(i, internal_error("a CLIP executor was given another family's input"), 0);
      continue;
    }
    ids.insert(ids.end(), inputs[i]->text_ids.begin(), inputs[i]->text_ids.end());
    if (!inputs[i]->pixels.empty()) all_levels = false;
    if (!inputs[i]->kept_pngs.empty()) kept_pngs = true;
    if (!inputs[i]->levels.empty() || !inputs[i]->kept_pngs.empty()) {
      if (level_table == nullptr) level_table = inputs[i]->level_table.get();
      const std::vector<float>* table = inputs[i]->level_table.get();
      if (table == nullptr || (table != level_table && *table != *level_table)) all_levels = false;
    }
    images += inputs[i]->images;
  }
  // A batch mixing the two forms (pixel_values tensors beside decoded images, rare) expands the levels here.
  std::vector<std::vector<float>> expanded;
  expanded.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    if (inputs[i] == nullptr) continue;
    const ClipInput& r = *inputs[i];
    if (all_levels) {
      if (!r.levels.empty()) levels.emplace_back(r.levels);
      continue;
    }
    if (!r.pixels.empty()) pixels.emplace_back(r.pixels);
    if (r.levels.empty() || r.level_table == nullptr) continue;
    const int64_t plane = image_size() * image_size(), per_image = 3 * plane;
    std::vector<float>& values = expanded.emplace_back(r.levels.size());
    kernels::expand_pixel_levels(r.levels.data(), static_cast<int64_t>(r.levels.size()) / per_image, 3, plane,
                                 r.level_table->data(), values.data());
    pixels.emplace_back(values);
  }
  // Kept PNGs (ClipOptions::image_decode kBatch; run() keeps floats out of such groups): every image of the batch
  // in order, a PNG for the decoder or a block of the preparer's levels, and whose it is.
  const int64_t per_image = 3 * image_size() * image_size();
  std::vector<BatchImage> batch_images;
  std::vector<size_t> image_request;
  std::vector<const CompressedPng*> image_png;
  // kStage: the images the stage refused, decoded here on the host (their levels, or the request's error).
  std::deque<std::vector<uint8_t>> stage_fallback;
  std::vector<std::optional<Status>> stage_error(batch.size());
  if (kept_pngs && all_levels && decodes_images_in_batch()) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (inputs[i] == nullptr) continue;
      const ClipInput& r = *inputs[i];
      size_t next_png = 0, next_block = 0;
      for (int64_t k = 0; k < r.images; ++k) {
        BatchImage im;
        const CompressedPng* png = nullptr;
        if (next_png < r.kept_pngs.size() && r.kept_pngs[next_png].image == k) {
          const ClipInput::KeptPng& kept = r.kept_pngs[next_png++];
          if (decoder_ != nullptr) {
            png = kept.png.get();
            im.png = &png->stream;
          } else if (kept.staged != nullptr && kept.staged->wait() == 0) {
            im.staged = kept.staged.get();  // decoded while the request waited for its batch
          } else {
            StatusOr<std::vector<uint8_t>> host = decode_png_levels_on_host(*kept.png, preprocess_);
            if (!host.ok() && !stage_error[i]) stage_error[i] = host.status();
            // A failed image still takes its place in the batch (zeros); its request gets the error.
            im.levels = stage_fallback.emplace_back(host.ok() ? std::move(*host)
                                                              : std::vector<uint8_t>(static_cast<size_t>(per_image)));
          }
        } else {
          im.levels = std::span<const uint8_t>(r.levels).subspan(next_block++ * per_image, per_image);
        }
        batch_images.push_back(im);
        image_request.push_back(i);
        image_png.push_back(png);
      }
    }
  } else if (kept_pngs) {  // cannot happen (the preparer keeps PNGs only for such executors): say so, don't guess
    for (size_t i = 0; i < batch.size(); ++i) {
      if (inputs[i] != nullptr && !inputs[i]->kept_pngs.empty()) {
        finish(i, internal_error("a CLIP request kept PNGs for a batch decoder this executor does not have"), 0);
      }
    }
  }
  std::vector<int32_t> decode_status;  // per image of batch_images, from the decoder's runs
  const int64_t texts = static_cast<int64_t>(ids.size()), dim = embedding_dim();
  stats.slot_items[kClipTextSlot] = texts;
  stats.slot_items[kClipImageSlot] = images;

  // Request i's rows start at these offsets of the towers' outputs.
  std::vector<int64_t> text_offset(batch.size()), image_offset(batch.size());
  for (size_t i = 0, t = 0, m = 0; i < batch.size(); ++i) {
    text_offset[i] = static_cast<int64_t>(t);
    image_offset[i] = static_cast<int64_t>(m);
    if (inputs[i] == nullptr) continue;
    t += inputs[i]->text_ids.size();
    m += static_cast<size_t>(inputs[i]->images);
  }
  auto build = [&](size_t i, const std::vector<float>& text_embeds, const std::vector<float>& image_embeds) {
    const ClipInput& r = *inputs[i];
    auto out = std::make_shared<ClipOutput>();
    out->dim = dim;
    out->texts = static_cast<int64_t>(r.text_ids.size());
    out->images = r.images;
    out->batch_size = std::max(out->texts > 0 ? texts : 0, out->images > 0 ? images : 0);
    std::vector<float> own_text, own_image;  // this request's rows, for its logits
    int64_t text_row = text_offset[i], image_row = image_offset[i];
    for (bool is_image : r.input_is_image) {
      const std::vector<float>& source = is_image ? image_embeds : text_embeds;
      const int64_t row = is_image ? image_row++ : text_row++;
      std::vector<float> embedding(source.begin() + row * dim, source.begin() + (row + 1) * dim);
      std::vector<float>& own = is_image ? own_image : own_text;
      own.insert(own.end(), embedding.begin(), embedding.end());
      out->embeddings.push_back(std::move(embedding));
    }
    if (out->images > 0 && out->texts > 0) {
      out->logits_per_image = logits_per_image(own_image, out->images, own_text, out->texts);
    }
    return std::shared_ptr<const ModelOutput>(std::move(out));
  };

  const auto start = std::chrono::steady_clock::now();
  double preempted_ms = 0;  // time spent serving other requests between chunks: not this batch's compute
  StatusOr<std::vector<float>> text_embeds = std::vector<float>();
  StatusOr<std::vector<float>> image_embeds = std::vector<float>();
  if (texts > 0) {
    text_embeds = run_tower(texts, dim, hooks, text_cost_, preempted_ms, [&](int64_t begin, int64_t count) {
      if (count == texts) return embed_texts(ids);
      return embed_texts(std::vector<std::vector<int32_t>>(ids.begin() + begin, ids.begin() + begin + count));
    });
  }
  const double text_ms = ms_since(start) - preempted_ms;
  if (text_embeds.ok() && images > 0) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (done[i] || inputs[i]->images != 0) continue;
      finish(i, build(i, *text_embeds, {}), text_ms);
    }
    // Between the towers is a preemption point too.
    if (texts > 0 && hooks.between_chunks) {
      const auto paused = std::chrono::steady_clock::now();
      hooks.between_chunks();
      preempted_ms += ms_since(paused);
    }
  }
  if (images > 0 && text_embeds.ok()) {
    image_embeds = run_tower(images, dim, hooks, image_cost_, preempted_ms, [&](int64_t begin, int64_t count) {
      if (!batch_images.empty()) {
        std::vector<int32_t> status;
        StatusOr<std::vector<float>> part = embed_batch_images(batch_images, *level_table, begin, count, status);
        decode_status.insert(decode_status.end(), status.begin(), status.end());
        return part;
      }
      if (all_levels) return embed_image_levels(levels, *level_table, begin, count);
      return embed_images(pixels, begin, count);
    });
  }
  // The images the batch decoder refused: decoded on the host as the preparer would have, then their rows
  // recomputed; the requests whose image the host cannot decode either fail with the error the CPU path gives.
  std::vector<std::optional<Status>> request_error = std::move(stage_error);
  if (image_embeds.ok() && !batch_images.empty()) {
    std::vector<size_t> redo;
    std::vector<std::vector<uint8_t>> redo_levels;
    for (size_t k = 0; k < decode_status.size(); ++k) {
      if (decode_status[k] == 0 || image_png[k] == nullptr) continue;
      StatusOr<std::vector<uint8_t>> host = decode_png_levels_on_host(*image_png[k], preprocess_);
      if (!host.ok()) {
        if (!request_error[image_request[k]]) request_error[image_request[k]] = host.status();
        continue;
      }
      redo.push_back(k);
      redo_levels.push_back(std::move(*host));
    }
    if (!redo.empty()) {
      std::vector<std::span<const uint8_t>> pieces(redo_levels.begin(), redo_levels.end());
      StatusOr<std::vector<float>> rows =
          embed_image_levels(pieces, *level_table, 0, static_cast<int64_t>(redo.size()));
      if (!rows.ok()) {
        image_embeds = rows.status();
      } else {
        for (size_t j = 0; j < redo.size(); ++j) {
          std::copy(rows->begin() + j * dim, rows->begin() + (j + 1) * dim, image_embeds->begin() + redo[j] * dim);
        }
      }
    }
  }
  stats.compute_ms = ms_since(start) - preempted_ms;

  const Status failed = !text_embeds.ok() ? text_embeds.status() : image_embeds.status();
  if (!failed.ok() && failed.code() == StatusCode::kInternal) stats.device_fault = failed;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (done[i]) continue;
    if (!text_embeds.ok() || !image_embeds.ok()) {
      finish(i, failed.with_context("model forward"), stats.compute_ms);
    } else if (request_error[i]) {
      finish(i, *request_error[i], stats.compute_ms);
    } else {
      finish(i, build(i, *text_embeds, *image_embeds), stats.compute_ms);
    }
  }
  return stats;
}

}  // namespace mmserve::engine
