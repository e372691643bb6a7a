// SamExecutor (see sam_executor.h). Tests: tests/unit/engine/sam_executor_test.cpp.
#include "engine/sam_executor.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "engine/families.h"

namespace mmserve::engine {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string mib(int64_t bytes) {
  return std::to_string((bytes + (1 << 19)) >> 20) + " MiB";
}

}  // namespace

StatusOr<std::unique_ptr<Executor>> SamExecutor::create_for_server(const std::string& model_dir,
                                                                   const ExecutorOptions& options,
                                                                   const nlohmann::json& family_config) {
  RETURN_IF_ERROR(check_known_keys(family_config, {"embedding_cache_mb"}, "SAM"));
  SamOptions sam;
  if (family_config.is_object() && family_config.contains("embedding_cache_mb")) {
    const nlohmann::json& mb = family_config["embedding_cache_mb"];
    if (!mb.is_number() || mb.get<double>() < 0 || mb.get<double>() > (1 << 24)) {
      return invalid_argument("mmserve.yaml: options.embedding_cache_mb must be a number of MiB in 0..16777216");
    }
    sam.embedding_cache_bytes = static_cast<int64_t>(mb.get<double>() * (1 << 20));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SamExecutor> executor, create(model_dir, options, sam));
  return std::unique_ptr<Executor>(std::move(executor));
}

StatusOr<std::unique_ptr<SamExecutor>> SamExecutor::create(const std::string& model_dir, const ExecutorOptions& options,
                                                           const SamOptions& sam) {
  if (!options.device.is_cpu()) {
    return unimplemented("device " + options.device.to_string() +
                         ": SAM runs on the CPU in this build (its CUDA path is not written yet); set device: cpu");
  }
  if (options.dtype && *options.dtype != DType::kF32) {
    return unimplemented(std::string("the CPU path computes in f32 (dtype ") + dtype_name(*options.dtype) +
                         " needs device cuda)");
  }
  if (!options.tp_devices.empty() || !options.pipeline_devices.empty()) {
    return unimplemented("tensor_parallel / pipeline_parallel are not implemented for SAM");
  }
  auto executor = std::unique_ptr<SamExecutor>(new SamExecutor(options, sam));
  ASSIGN_OR_RETURN(executor->model_, models::SamModel::load(model_dir, options.threads));
  const models::SamConfig& c = executor->model_->config();
  const int64_t g = c.vision.grid();
  FamilyInfo& info = executor->info_;
  info.platform = "mmserve_sam";
  info.slot_names = {"image", "prompt"};
  info.inputs = {{"image", "BYTES", {1}},
                 {"point_coords", "FP32", {-1, 2}},
                 {"point_labels", "INT32", {-1}},
                 {"boxes", "FP32", {-1, 4}},
                 {"mask_input", "FP32", {1, 4 * g, 4 * g}}};
  info.outputs = {{"iou_scores", "FP32", {-1}}, {"masks", "BYTES", {-1}}, {"image_id", "BYTES", {1}}};
  info.embedding_dim = c.vision.output_channels;
  info.image_size = c.vision.image_size;
  return executor;
}

int64_t SamExecutor::memory_bytes() const {
  return model_->memory_bytes() + sam_.embedding_cache_bytes;
}

std::string SamExecutor::describe() const {
  const models::SamConfig& c = model_->config();
  return options_.device.to_string() + " f32: sam ViT hidden " + std::to_string(c.vision.hidden_size) + " x " +
         std::to_string(c.vision.num_hidden_layers) + " layers, " + std::to_string(c.vision.image_size) +
         " px, weights + workspaces " + mib(model_->memory_bytes()) + ", embedding cache " +
         mib(sam_.embedding_cache_bytes);
}

Status SamExecutor::warm() {
  // One zero image and one centre click: touches every weight and sizes the workspaces (nothing is cached).
  const models::SamConfig& c = model_->config();
  const int64_t s = c.vision.image_size;
  std::vector<float> pixels(static_cast<size_t>(c.vision.num_channels * s * s), 0.0f);
  std::vector<float> embedding(static_cast<size_t>(model_->embedding_floats()));
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(model_->encode_images(pixels.data(), 1, embedding.data()).with_context("warm-up image"));
  image_ms_ = ms_since(start);
  models::SamPrompt prompt;
  prompt.points = {{static_cast<float>(s) / 2, static_cast<float>(s) / 2}};
  prompt.labels = {1};
  auto masks = model_->decode(embedding.data(), prompt, true);
  return masks.ok() ? ok_status() : masks.status().with_context("warm-up prompt");
}

StatusOr<std::shared_ptr<SamOutput>> SamExecutor::decode(const SamInput& input, const std::vector<float>& embedding) {
  models::SamPrompt prompt;
  prompt.points = input.points;
  prompt.labels = input.labels;
  prompt.boxes = input.boxes;
  if (!input.mask_input.empty()) {
    prompt.mask_input = input.mask_input.data();
    prompt.mask_height = input.mask_height;
    prompt.mask_width = input.mask_width;
  }
  ASSIGN_OR_RETURN(models::SamMasks masks, model_->decode(embedding.data(), prompt, input.multimask_output));
  auto out = std::make_shared<SamOutput>();
  out->image_id = input.image_id;
  out->count = masks.count;
  out->height = input.geometry.original_height;
  out->width = input.geometry.original_width;
  out->iou_scores = std::move(masks.iou_scores);
  out->masks =
      image::postprocess_sam_masks(masks.low_res_logits.data(), static_cast<int>(masks.count),
                                   static_cast<int>(masks.height), static_cast<int>(masks.width), input.geometry);
  return out;
}

BatchStats SamExecutor::run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  BatchStats stats;
  const auto start = std::chrono::steady_clock::now();
  double preempted_ms = 0;
  std::vector<const SamInput*> inputs(batch.size(), nullptr);
  std::vector<bool> done(batch.size(), false);
  auto finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out) {
    done[i] = true;
    hooks.finish(i, std::move(out), ms_since(start) - preempted_ms);
  };
  // The embeddings this batch needs: cached ones now, the others after the encoder. One encode per distinct image.
  std::map<std::string, std::shared_ptr<const std::vector<float>>> embeddings;
  std::vector<std::string> to_encode;
  std::map<std::string, const float*> pixels_of;
  std::vector<bool> cached(batch.size(), false);
  for (size_t i = 0; i < batch.size(); ++i) {
    inputs[i] = dynamic_cast<const SamInput*>(batch[i].input);
    if (inputs[i] == nullptr) {
      finish(i, internal_error("a SAM executor was given another family's input"));
      continue;
    }
    const std::string& id = inputs[i]->image_id;
    if (embeddings.count(id) || pixels_of.count(id)) continue;
    if (auto hit = cache_.find(id)) {
      embeddings[id] = std::move(hit);
      cached[i] = true;
    } else if (!inputs[i]->pixels.empty()) {
      pixels_of[id] = inputs[i]->pixels.data();
      to_encode.push_back(id);
    }
  }
  stats.slot_items[kSamImageSlot] = static_cast<int64_t>(to_encode.size());
  stats.slot_items[kSamPromptSlot] = static_cast<int64_t>(batch.size());

  // The encoder, in chunks of about the time budget (one image is the smallest chunk).
  const models::SamConfig& c = model_->config();
  const int64_t per_image = c.vision.num_channels * c.vision.image_size * c.vision.image_size;
  const int64_t floats = model_->embedding_floats();
  int64_t chunk = static_cast<int64_t>(to_encode.size());
  if (hooks.between_chunks && hooks.chunk_budget_ms > 0 && image_ms_ > 0) {
    chunk = std::max<int64_t>(1, static_cast<int64_t>(hooks.chunk_budget_ms / image_ms_));
  }
  Status encode_status;
  for (size_t begin = 0; begin < to_encode.size() && encode_status.ok(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(to_encode.size(), begin + static_cast<size_t>(chunk));
    std::vector<float> pixels(static_cast<size_t>(per_image) * (end - begin));
    for (size_t k = begin; k < end; ++k) {
      std::copy_n(pixels_of[to_encode[k]], per_image, pixels.begin() + static_cast<int64_t>(k - begin) * per_image);
    }
    std::vector<float> out(static_cast<size_t>(floats) * (end - begin));
    const auto chunk_start = std::chrono::steady_clock::now();
    encode_status = model_->encode_images(pixels.data(), static_cast<int64_t>(end - begin), out.data());
    if (!encode_status.ok()) break;
    const double per = ms_since(chunk_start) / static_cast<double>(end - begin);
    image_ms_ = image_ms_ > 0 ? 0.8 * image_ms_ + 0.2 * per : per;
    for (size_t k = begin; k < end; ++k) {
      auto embedding =
          std::make_shared<const std::vector<float>>(out.begin() + static_cast<int64_t>(k - begin) * floats,
                                                     out.begin() + static_cast<int64_t>(k - begin + 1) * floats);
      cache_.insert(to_encode[k], embedding);
      embeddings[to_encode[k]] = std::move(embedding);
    }
    if (end < to_encode.size() && hooks.between_chunks) {
      const auto paused = std::chrono::steady_clock::now();
      hooks.between_chunks();
      preempted_ms += ms_since(paused);
    }
  }
  if (!encode_status.ok() && encode_status.code() == StatusCode::kInternal) stats.device_fault = encode_status;

  for (size_t i = 0; i < batch.size(); ++i) {
    if (done[i]) continue;
    const SamInput& input = *inputs[i];
    auto found = embeddings.find(input.image_id);
    if (found == embeddings.end()) {
      if (!input.pixels.empty()) {
        finish(i, encode_status.with_context("image encoder"));
      } else {
        finish(i, invalid_argument("image_id " + input.image_id +
                                   " is no longer in the embedding cache (evicted, or held by another replica): "
                                   "send the image again"));
      }
      continue;
    }
    StatusOr<std::shared_ptr<SamOutput>> out = decode(input, *found->second);
    if (!out.ok()) {
      finish(i, out.status());
      continue;
    }
    (*out)->embedding_cached = cached[i] || input.pixels.empty();
    (*out)->batch_size = static_cast<int64_t>(batch.size());
    finish(i, std::shared_ptr<const ModelOutput>(std::move(*out)));
  }
  stats.compute_ms = ms_since(start) - preempted_ms;
  return stats;
}

}  // namespace mmserve::engine
