// SamExecutor (see sam_executor.h). Tests: tests/unit/engine/sam_executor_test.cpp.
#include "engine/sam_executor.h"

#include <algorithm>
#include <chrono>
#include <list>
#include <map>
#include <unordered_map>

#include "engine/families.h"
#include "kernels/mask_resize/mask_resize.h"
#if MMSERVE_HAS_CUDA
#include "core/cuda/device_memory.h"
#endif

namespace mmserve::engine {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string mib(int64_t bytes) {
  return std::to_string((bytes + (1 << 19)) >> 20) + " MiB";
}

}  // namespace

// The embedding cache on the GPU: `slots` embeddings of `bytes` each in one DeviceArena (at most the byte budget),
// an LRU over the slots by image id. Used by the engine thread only.
class SamExecutor::DeviceCache {
 public:
#if MMSERVE_HAS_CUDA
  Status init(int64_t capacity_bytes, int64_t bytes) {
    bytes_ = bytes;
    capacity_ = capacity_bytes;
    const int64_t slots = bytes > 0 ? capacity_bytes / bytes : 0;
    if (slots == 0) return ok_status();
    RETURN_IF_ERROR(arena_.init(static_cast<size_t>(slots) * DeviceArena::aligned(static_cast<size_t>(bytes))));
    for (int64_t i = 0; i < slots; ++i) {
      ASSIGN_OR_RETURN(void* p, arena_.allocate(static_cast<size_t>(bytes)));
      free_.push_back(static_cast<float*>(p));
    }
    slots_ = slots;
    return ok_status();
  }
  // The slot of `key` (now the most recent), or null (a miss).
  const float* find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  // Copies the embedding at `src` (device) into a slot on `stream`, evicting the least recently used if full.
  Status insert(const std::string& key, const float* src, cudaStream_t stream) {
    if (slots_ == 0 || index_.count(key)) return ok_status();
    if (free_.empty()) {
      free_.push_back(lru_.back().second);
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    float* slot = free_.back();
    free_.pop_back();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot, src, static_cast<size_t>(bytes_), cudaMemcpyDeviceToDevice, stream));
    lru_.emplace_front(key, slot);
    index_[key] = lru_.begin();
    return ok_status();
  }
#endif
  CacheStats stats() const {
    CacheStats s;
    s.name = "image_embedding";
    s.hits = hits_, s.misses = misses_, s.entries = static_cast<int64_t>(lru_.size());
    s.bytes = s.entries * bytes_, s.capacity_bytes = capacity_;
    return s;
  }
  int64_t slots() const { return slots_; }
  int64_t allocated_bytes() const { return static_cast<int64_t>(arena_.capacity()); }

 private:
#if MMSERVE_HAS_CUDA
  DeviceArena arena_;
#else
  struct {
    size_t capacity() const { return 0; }
  } arena_;
#endif
  int64_t bytes_ = 0, capacity_ = 0, slots_ = 0, hits_ = 0, misses_ = 0;
  std::vector<float*> free_;
  std::list<std::pair<std::string, float*>> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<std::pair<std::string, float*>>::iterator> index_;
};

SamExecutor::SamExecutor(ExecutorOptions options, SamOptions sam)
    : options_(std::move(options)), sam_(sam), cache_("image_embedding", sam.embedding_cache_bytes) {}

SamExecutor::~SamExecutor() = default;

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
  if (!options.tp_devices.empty() || !options.pipeline_devices.empty()) {
    return unimplemented("tensor_parallel / pipeline_parallel are not implemented for SAM");
  }
  auto executor = std::unique_ptr<SamExecutor>(new SamExecutor(options, sam));
  if (options.device.is_cpu()) {
    if (options.dtype && *options.dtype != DType::kF32) {
      return unimplemented(std::string("the CPU path computes in f32 (dtype ") + dtype_name(*options.dtype) +
                           " needs device cuda)");
    }
    ASSIGN_OR_RETURN(executor->model_, models::SamModel::load(model_dir, options.threads));
    executor->config_ = executor->model_->config();
  } else {
#if MMSERVE_HAS_CUDA
    models::SamCudaOptions cuda;
    cuda.device = options.device.index;
    cuda.dtype = options.dtype.value_or(DType::kBF16);
    cuda.use_graphs = options.cuda_graphs;
    // 8 images of 4096 tokens fill an H200; larger batches run in chunks of the largest bucket.
    const int64_t max_batch = std::clamp<int64_t>(options.batch_size_max, 1, 8);
    cuda.buckets.clear();
    if (options.batch_buckets.empty()) {
      for (int64_t b = 1; b < max_batch; b *= 2) cuda.buckets.push_back(b);
    } else {
      for (int64_t b : options.batch_buckets) {
        if (b > 0 && b < max_batch) cuda.buckets.push_back(b);
      }
    }
    cuda.buckets.push_back(max_batch);
    ASSIGN_OR_RETURN(executor->cuda_model_, models::SamCudaModel::load(model_dir, cuda));
    executor->config_ = executor->cuda_model_->config();
    executor->dtype_ = cuda.dtype;
    executor->device_cache_ = std::make_unique<DeviceCache>();
    RETURN_IF_ERROR(executor->device_cache_->init(sam.embedding_cache_bytes,
                                                  static_cast<int64_t>(sizeof(float)) *
                                                      executor->cuda_model_->embedding_floats()));
#else
    return unimplemented("device " + options.device.to_string() +
                         ": this build has no CUDA backend (build with nvcc present, -DMMSERVE_CUDA=ON)");
#endif
  }
  const models::SamConfig& c = executor->config_;
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
#if MMSERVE_HAS_CUDA
  if (cuda_model_) return static_cast<int64_t>(cuda_model_->memory().total()) + device_cache_->allocated_bytes();
#endif
  return model_->memory_bytes() + sam_.embedding_cache_bytes;
}

std::string SamExecutor::describe() const {
  const models::SamConfig& c = config_;
  const std::string model = "sam ViT hidden " + std::to_string(c.vision.hidden_size) + " x " +
                            std::to_string(c.vision.num_hidden_layers) + " layers, " +
                            std::to_string(c.vision.image_size) + " px";
#if MMSERVE_HAS_CUDA
  if (cuda_model_) {
    const models::SamCudaMemory& m = cuda_model_->memory();
    return options_.device.to_string() + " " + dtype_name(dtype_) + ": " + model + " (decoder f32), weights " +
           mib(static_cast<int64_t>(m.weight_bytes)) + ", activations " +
           mib(static_cast<int64_t>(m.activation_bytes + m.workspace_bytes)) + " (encoder batch <= " +
           std::to_string(cuda_model_->max_batch()) + "), " +
           (cuda_model_->graphs() ? "CUDA graphs " + mib(static_cast<int64_t>(m.graph_bytes)) : "no CUDA graphs") +
           ", embedding cache " + mib(device_cache_->allocated_bytes()) + " on the GPU (" +
           std::to_string(device_cache_->slots()) + " images)";
  }
#endif
  return options_.device.to_string() + " f32: " + model + ", weights + workspaces " + mib(model_->memory_bytes()) +
         ", embedding cache " + mib(sam_.embedding_cache_bytes);
}

std::vector<CacheStats> SamExecutor::caches() const {
  return {device_cache_ ? device_cache_->stats() : cache_.stats()};
}

Status SamExecutor::warm() {
  // One zero image and one centre click: touches every weight and sizes the workspaces (nothing is cached).
  const models::SamConfig& c = config_;
  const int64_t s = c.vision.image_size;
  std::vector<float> pixels(static_cast<size_t>(c.vision.num_channels * s * s), 0.0f);
  models::SamPrompt prompt;
  prompt.points = {{static_cast<float>(s) / 2, static_cast<float>(s) / 2}};
  prompt.labels = {1};
#if MMSERVE_HAS_CUDA
  if (cuda_model_) {  // the graphs were captured at load; this measures an image
    const auto start = std::chrono::steady_clock::now();
    auto rows = cuda_model_->encode_images_on_device(pixels.data(), 1);
    if (!rows.ok()) return rows.status().with_context("warm-up image");
    image_cost_.observe(1, ms_since(start));
    auto masks = cuda_model_->decode_on_device(*rows, prompt, true);
    return masks.ok() ? ok_status() : masks.status().with_context("warm-up prompt");
  }
#endif
  std::vector<float> embedding(static_cast<size_t>(model_->embedding_floats()));
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(model_->encode_images(pixels.data(), 1, embedding.data()).with_context("warm-up image"));
  image_cost_.observe(1, ms_since(start));
  auto masks = model_->decode(embedding.data(), prompt, true);
  return masks.ok() ? ok_status() : masks.status().with_context("warm-up prompt");
}

models::SamPrompt SamExecutor::prompt_of(const SamInput& input) {
  models::SamPrompt prompt;
  prompt.points = input.points;
  prompt.labels = input.labels;
  prompt.boxes = input.boxes;
  if (!input.mask_input.empty()) {
    prompt.mask_input = input.mask_input.data();
    prompt.mask_height = input.mask_height;
    prompt.mask_width = input.mask_width;
  }
  return prompt;
}

std::shared_ptr<SamOutput> SamExecutor::output_of(const SamInput& input, models::SamMasks masks) {
  auto out = std::make_shared<SamOutput>();
  out->image_id = input.image_id;
  out->count = masks.count;
  out->height = input.geometry.original_height;
  out->width = input.geometry.original_width;
  out->iou_scores = std::move(masks.iou_scores);
  if (!masks.masks.empty()) {  // post-processed on the GPU
    out->masks = std::move(masks.masks);
    return out;
  }
  const models::SamMaskGeometry g = mask_geometry(input);
  const kernels::MaskResizeShape shape{static_cast<int>(masks.count), static_cast<int>(masks.height),
                                       static_cast<int>(masks.width), g.pad_height, g.pad_width, g.crop_height,
                                       g.crop_width, g.out_height, g.out_width};
  out->masks.resize(static_cast<size_t>(masks.count) * g.out_height * g.out_width);
  kernels::mask_resize_threshold(masks.low_res_logits.data(), shape, g.threshold, out->masks.data());
  return out;
}

models::SamMaskGeometry SamExecutor::mask_geometry(const SamInput& input) {
  // SamProcessor.post_process_masks: upscale to pad_size, crop to the resized image, resize to the original.
  const image::SamImageInput& geom = input.geometry;
  models::SamMaskGeometry g;
  g.pad_height = geom.pad_height;
  g.pad_width = geom.pad_width;
  g.crop_height = geom.reshaped_height;
  g.crop_width = geom.reshaped_width;
  g.out_height = geom.original_height;
  g.out_width = geom.original_width;
  return g;
}

StatusOr<std::shared_ptr<SamOutput>> SamExecutor::decode(const SamInput& input, const std::vector<float>& embedding) {
  ASSIGN_OR_RETURN(models::SamMasks masks, model_->decode(embedding.data(), prompt_of(input), input.multimask_output));
  return output_of(input, std::move(masks));
}

BatchStats SamExecutor::run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  if (!model_) return run_cuda(batch, hooks);
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
  const models::SamConfig& c = config_;
  const int64_t per_image = c.vision.num_channels * c.vision.image_size * c.vision.image_size;
  const int64_t floats = model_->embedding_floats();
  int64_t chunk = static_cast<int64_t>(to_encode.size());
  if (hooks.between_chunks) chunk = image_cost_.rows_for(hooks.chunk_budget_ms, chunk, false);
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
    image_cost_.observe(static_cast<int64_t>(end - begin), ms_since(chunk_start));
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


BatchStats SamExecutor::run_cuda(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  BatchStats stats;
#if MMSERVE_HAS_CUDA
  const auto start = std::chrono::steady_clock::now();
  double preempted_ms = 0;
  std::vector<const SamInput*> inputs(batch.size(), nullptr);
  auto finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out) {
    hooks.finish(i, std::move(out), ms_since(start) - preempted_ms);
  };
  Status fault;  // the first kInternal (a CUDA error): the runtime takes the device out of rotation
  auto decode_from = [&](size_t i, const float* rows, bool cached) {
    const SamInput& input = *inputs[i];
    const models::SamMaskGeometry geometry = mask_geometry(input);
    StatusOr<models::SamMasks> masks =
        cuda_model_->decode_on_device(rows, prompt_of(input), input.multimask_output, &geometry);
    if (!masks.ok()) {
      if (masks.status().code() == StatusCode::kInternal && fault.ok()) fault = masks.status();
      finish(i, masks.status());
      return;
    }
    std::shared_ptr<SamOutput> out = output_of(input, std::move(*masks));
    out->embedding_cached = cached;
    out->batch_size = static_cast<int64_t>(batch.size());
    finish(i, std::shared_ptr<const ModelOutput>(std::move(out)));
  };
  // Prompts on cached images first (their slots cannot be evicted before they are decoded); the others grouped by
  // image, one encode per distinct image.
  std::vector<std::string> to_encode;
  std::map<std::string, std::vector<size_t>> waiting;
  std::map<std::string, const float*> pixels_of;
  for (size_t i = 0; i < batch.size(); ++i) {
    inputs[i] = dynamic_cast<const SamInput*>(batch[i].input);
    if (inputs[i] == nullptr) {
      finish(i, internal_error("a SAM executor was given another family's input"));
      continue;
    }
    const std::string& id = inputs[i]->image_id;
    if (auto it = waiting.find(id); it != waiting.end()) {  // its image is encoded in this batch
      it->second.push_back(i);
      continue;
    }
    if (const float* slot = device_cache_->find(id)) {
      decode_from(i, slot, true);
    } else if (!inputs[i]->pixels.empty()) {
      waiting[id].push_back(i);
      pixels_of[id] = inputs[i]->pixels.data();
      to_encode.push_back(id);
    } else {
      finish(i, invalid_argument("image_id " + id +
                                 " is no longer in the embedding cache (evicted, or held by another replica): "
                                 "send the image again"));
    }
  }
  stats.slot_items[kSamImageSlot] = static_cast<int64_t>(to_encode.size());
  stats.slot_items[kSamPromptSlot] = static_cast<int64_t>(batch.size());

  // The encoder in chunks of at most its largest bucket and about the time budget; each chunk's prompts are decoded
  // from the encoder's output rows before the next chunk overwrites them.
  const models::SamConfig& c = config_;
  const int64_t per_image = c.vision.num_channels * c.vision.image_size * c.vision.image_size;
  const int64_t floats = cuda_model_->embedding_floats();
  int64_t chunk = std::min<int64_t>(cuda_model_->max_batch(), static_cast<int64_t>(to_encode.size()));
  if (hooks.between_chunks) chunk = image_cost_.rows_for(hooks.chunk_budget_ms, chunk, false);
  std::vector<float> pixels;
  for (size_t begin = 0; begin < to_encode.size(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(to_encode.size(), begin + static_cast<size_t>(chunk));
    pixels.resize(static_cast<size_t>(per_image) * (end - begin));
    for (size_t k = begin; k < end; ++k) {
      std::copy_n(pixels_of[to_encode[k]], per_image, pixels.begin() + static_cast<int64_t>(k - begin) * per_image);
    }
    const auto chunk_start = std::chrono::steady_clock::now();
    StatusOr<const float*> rows = cuda_model_->encode_images_on_device(pixels.data(), static_cast<int64_t>(end - begin));
    if (rows.ok()) {
      image_cost_.observe(static_cast<int64_t>(end - begin), ms_since(chunk_start));
    }
    for (size_t k = begin; k < end; ++k) {
      const std::vector<size_t>& items = waiting[to_encode[k]];
      if (!rows.ok()) {
        if (rows.status().code() == StatusCode::kInternal && fault.ok()) fault = rows.status();
        for (size_t i : items) finish(i, rows.status().with_context("image encoder"));
        continue;
      }
      const float* embedding = *rows + static_cast<int64_t>(k - begin) * floats;
      Status cached = device_cache_->insert(to_encode[k], embedding, cuda_model_->stream());
      if (!cached.ok() && fault.ok()) fault = cached;
      for (size_t i : items) decode_from(i, embedding, inputs[i]->pixels.empty());
    }
    if (end < to_encode.size() && hooks.between_chunks) {
      const auto paused = std::chrono::steady_clock::now();
      hooks.between_chunks();
      preempted_ms += ms_since(paused);
    }
  }
  if (!fault.ok()) stats.device_fault = fault;
  stats.compute_ms = ms_since(start) - preempted_ms;
#else
  for (size_t i = 0; i < batch.size(); ++i) hooks.finish(i, internal_error("no CUDA backend in this build"), 0.0);
#endif
  return stats;
}

}  // namespace mmserve::engine
