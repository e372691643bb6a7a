// ClipExecutor (see clip_executor.h).
#include "engine/clip_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/families.h"
#include "kernels/gemm/gemm.h"
#include "kernels/pixel_levels/pixel_levels.h"

namespace mmserve::engine {

namespace {
std::string mib(int64_t bytes) {
  return std::to_string((bytes + (1 << 19)) >> 20) + " MiB";
}

// The images [first, first + n) of the concatenation of `pieces` (each already checked to be whole images of
// `per_image` floats, together at least first + n images), as sub-spans.
template <typename T>
std::vector<std::span<const T>> slice_images(std::span<const std::span<const T>> pieces, int64_t per_image,
                                             int64_t first, int64_t n) {
  std::vector<std::span<const T>> out;
  size_t skip = static_cast<size_t>(first * per_image), want = static_cast<size_t>(n * per_image);
  for (const std::span<const T>& piece : pieces) {
    if (want == 0) break;
    if (skip >= piece.size()) {
      skip -= piece.size();
      continue;
    }
    const size_t take = std::min(piece.size() - skip, want);
    out.push_back(piece.subspan(skip, take));
    skip = 0;
    want -= take;
  }
  return out;
}
}  // namespace

StatusOr<std::unique_ptr<Executor>> ClipExecutor::create_for_server(const std::string& model_dir,
                                                                    const ExecutorOptions& options,
                                                                    const nlohmann::json& family_config) {
  RETURN_IF_ERROR(
      check_known_keys(family_config, {"vision_micro_batch", "text_micro_batch", "image_decode", "decode_stage"},
                       "CLIP"));
  ClipOptions clip;
  if (family_config.is_object()) {
    clip.vision_micro_batch = family_config.value("vision_micro_batch", clip.vision_micro_batch);
    clip.text_micro_batch = family_config.value("text_micro_batch", clip.text_micro_batch);
    if (family_config.contains("image_decode")) {
      const nlohmann::json& mode = family_config["image_decode"];
      if (mode == "batch") {
        clip.image_decode = ClipOptions::ImageDecode::kBatch;
      } else if (mode == "stage") {
        clip.image_decode = ClipOptions::ImageDecode::kStage;
      } else if (mode != "preprocess") {
        return invalid_argument("image_decode: " + mode.dump() +
                                " (preprocess: the preprocessing pool decodes images; batch: the model's device "
                                "decodes PNGs batch by batch; stage: the model's device decodes PNGs as they "
                                "arrive, ahead of the batcher)");
      }
    }
    if (family_config.contains("decode_stage")) {
      const nlohmann::json& stage = family_config["decode_stage"];
      if (!stage.is_object()) return invalid_argument("decode_stage: expected a mapping, got " + stage.dump());
      RETURN_IF_ERROR(check_known_keys(stage, {"lanes", "lane_images", "slots", "queue_images"}, "decode_stage"));
      for (const auto& [key, field] : {std::pair{"lanes", &clip.stage.lanes}, {"lane_images", &clip.stage.lane_images},
                                       {"slots", &clip.stage.slots}, {"queue_images", &clip.stage.queue_images}}) {
        if (!stage.contains(key)) continue;
        const nlohmann::json& v = stage[key];
        const int64_t lowest = std::string(key) == "queue_images" ? 0 : 1;
        if (!v.is_number_integer() || v.get<int64_t>() < lowest || v.get<int64_t>() > 65536) {
          return invalid_argument(std::string("decode_stage.") + key + ": expected an integer in " +
                                  std::to_string(lowest) + "..65536, got " + v.dump());
        }
        *field = v.get<int>();
      }
      if (clip.image_decode != ClipOptions::ImageDecode::kStage) {
        return invalid_argument("decode_stage is for image_decode: stage");
      }
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ClipExecutor> executor, create(model_dir, options, clip));
  return std::unique_ptr<Executor>(std::move(executor));
}

StatusOr<std::unique_ptr<ClipExecutor>> ClipExecutor::create(const std::string& model_dir,
                                                             const ExecutorOptions& options, const ClipOptions& clip) {
  if (options.batch_size_max <= 0) return invalid_argument("batch_size_max must be positive");
  auto executor = std::unique_ptr<ClipExecutor>(new ClipExecutor());
  executor->model_dir_ = model_dir;
  executor->options_ = options;
  executor->clip_ = clip;
  if (!options.device.is_cpu() || !options.tp_devices.empty() || !options.pipeline_devices.empty()) {
    if (!options.tp_devices.empty() && !options.pipeline_devices.empty()) {
      return unimplemented("tensor and pipeline parallel cannot be combined yet");
    }
  }
  if (options.device.is_cpu() && (!options.tp_devices.empty() || !options.pipeline_devices.empty())) {
    return invalid_argument("tensor_parallel / pipeline_parallel run on GPUs (device cuda), not on the CPU");
  }
  if (options.device.is_cpu()) {
    if (options.dtype && *options.dtype != DType::kF32) {
      return unimplemented(std::string("the CPU path computes in f32 (dtype ") + dtype_name(*options.dtype) +
                           " needs device cuda)");
    }
    if (options.threads > 0) kernels::set_cpu_threads(options.threads);
    ASSIGN_OR_RETURN(executor->model_, models::ClipModel::load(model_dir));
    executor->cpu_ = executor->model_.get();
    const models::ClipModel& model = *executor->model_;
    executor->config_ = model.config();
    executor->logit_scale_ = model.logit_scale();
    // Size the arena once for the largest image batch; text batches are smaller for every real CLIP.
    executor->arena_.reserve(
        std::max(model.image_workspace_bytes(options.batch_size_max),
                 model.text_workspace_bytes(options.batch_size_max, model.config().text.max_position_embeddings)));
    executor->fill_info();
    RETURN_IF_ERROR(executor->make_batch_decoder());
    return executor;
  }
#if MMSERVE_HAS_CUDA
  models::ClipCudaOptions cuda;
  cuda.device = options.device.index;
  cuda.dtype = options.dtype.value_or(DType::kBF16);
  cuda.use_graphs = options.cuda_graphs;
  cuda.tp_devices = options.tp_devices;
  ASSIGN_OR_RETURN(cuda.tp_collective, parse_tp_collective(options.tp_collective));
  cuda.pipeline_devices = options.pipeline_devices;
  cuda.vision_micro_batch = clip.vision_micro_batch;
  cuda.text_micro_batch = clip.text_micro_batch;
  cuda.pipeline_overlap = clip.pipeline_overlap;
  cuda.buckets.clear();
  if (options.batch_buckets.empty()) {
    for (int64_t b = 1; b < options.batch_size_max; b *= 2) cuda.buckets.push_back(b);
  } else {
    for (int64_t b : options.batch_buckets) {
      if (b > 0 && b < options.batch_size_max) cuda.buckets.push_back(b);
    }
  }
  cuda.buckets.push_back(options.batch_size_max);
  ASSIGN_OR_RETURN(executor->cuda_model_, models::ClipCudaModel::load(model_dir, cuda));
  executor->cuda_ = executor->cuda_model_.get();
  executor->cuda_options_ = cuda;
  executor->config_ = executor->cuda_model_->config();
  executor->logit_scale_ = executor->cuda_model_->logit_scale();
  executor->dtype_ = cuda.dtype;
  executor->fill_info();
  RETURN_IF_ERROR(executor->make_batch_decoder());
  return executor;
#else
  return unimplemented("device " + options.device.to_string() +
                       ": this build has no CUDA backend (build with nvcc present, -DMMSERVE_CUDA=ON)");
#endif
}

Status ClipExecutor::make_batch_decoder() {
  if (clip_.image_decode == ClipOptions::ImageDecode::kPreprocess) return ok_status();
  const std::string mode = clip_.image_decode == ClipOptions::ImageDecode::kBatch ? "batch" : "stage";
#if MMSERVE_HAS_CUDA
  if (cuda_model_ && !cuda_model_->takes_device_levels()) {
    return unimplemented("image_decode: " + mode +
                         " needs a single-GPU CLIP model (not tensor or pipeline parallel)");
  }
#endif
  ASSIGN_OR_RETURN(preprocess_, image::load_clip_preprocess_config(model_dir_));
  std::optional<ImageDecodeGeometry> geometry = clip_decode_geometry(preprocess_);
  if (!geometry || geometry->out_width != image_size() || geometry->out_height != image_size()) {
    return invalid_argument("image_decode: " + mode + " needs preprocessor_config.json to centre-crop to the model's " +
                            std::to_string(image_size()) + "x" + std::to_string(image_size()) + " input");
  }
  if (clip_.image_decode == ClipOptions::ImageDecode::kStage) {
    stage_geometry_ = std::move(*geometry);
    return ok_status();
  }
  ASSIGN_OR_RETURN(decoder_, BatchImageDecoder::create(options_.device, std::move(*geometry)));
  return ok_status();
}

StatusOr<std::unique_ptr<PngDecodeStage>> ClipExecutor::make_decode_stage() const {
  if (!stage_geometry_) return std::unique_ptr<PngDecodeStage>();
  return PngDecodeStage::create(options_.device, *stage_geometry_, clip_.stage);
}

int64_t ClipExecutor::memory_bytes() const {
#if MMSERVE_HAS_CUDA
  auto on_device = [](const models::ClipCudaModel& model) {
    const models::ClipCudaMemory& m = model.memory();
    return static_cast<int64_t>(m.weight_bytes + m.activation_bytes + m.workspace_bytes + m.graph_bytes);
  };
#endif
  int64_t adapters = 0;  // each adapter's merged copy
  {
    std::lock_guard<std::mutex> lock(adapters_mutex_);
    for (const auto& [name, a] : adapters_) {
      if (a->model) adapters += static_cast<int64_t>(a->model->weight_bytes());
#if MMSERVE_HAS_CUDA
      if (a->cuda_model) adapters += on_device(*a->cuda_model);
#endif
    }
  }
#if MMSERVE_HAS_CUDA
  if (cuda_model_) return on_device(*cuda_model_) + adapters + (decoder_ ? decoder_->device_bytes() : 0);
#endif
  return static_cast<int64_t>(model_->weight_bytes() + arena_.capacity()) + adapters;
}

std::string ClipExecutor::describe() const {
  std::string text = options_.device.to_string() + " " + dtype_name(dtype_);
#if MMSERVE_HAS_CUDA
  if (cuda_model_) {
    const models::ClipCudaMemory& m = cuda_model_->memory();
    if (cuda_model_->pipeline_stages() > 1) {
      text += ", pipeline over 2 stages (micro-batches " + std::to_string(clip_.vision_micro_batch) + " images / " +
              std::to_string(clip_.text_micro_batch) + " texts; memory summed over the stages)";
    }
    if (cuda_model_->tp_world_size() > 1) {
      text += ", tensor parallel over " + std::to_string(cuda_model_->tp_world_size()) + " GPUs (" +
              cuda_model_->tp_collective() + "; memory summed over the ranks)";
    }
    text += ": weights " + mib(m.weight_bytes) + ", activations " + mib(m.activation_bytes) + " (max batch " +
            std::to_string(cuda_model_->max_batch()) + "), cuBLASLt workspace " + mib(m.workspace_bytes) + ", graphs " +
            mib(m.graph_bytes) + ", pinned host " + mib(m.pinned_bytes) +
            "; host pixels: " + cuda_model_->host_copy_description();
    if (decoder_) text += "; PNGs decoded on the GPU in the batch (image_decode: batch)";
    if (stage_geometry_) text += "; PNGs decoded on the GPU as they arrive (image_decode: stage)";
    return text;
  }
#endif
  text += ": weights " + mib(model_->weight_bytes()) + ", activations " + mib(arena_.capacity());
  if (decoder_) text += "; PNGs decoded in the batch (image_decode: batch, the GPU kernels' CPU twins)";
  if (stage_geometry_) text += "; PNGs decoded as they arrive (image_decode: stage, the GPU kernels' CPU twins)";
  return text;
}

void ClipExecutor::fill_info() {
  const int64_t s = image_size(), dim = embedding_dim();
  info_.platform = "mmserve_clip";
  info_.slot_names = {"text", "image"};
  info_.inputs = {{"text", "BYTES", {-1}}, {"image", "BYTES", {-1}}, {"pixel_values", "FP32", {-1, 3, s, s}}};
  info_.outputs = {
      {"text_embeds", "FP32", {-1, dim}}, {"image_embeds", "FP32", {-1, dim}}, {"logits_per_image", "FP32", {-1, -1}}};
  info_.embedding_dim = dim;
  info_.image_size = s;
  info_.max_text_tokens = config_.text.max_position_embeddings;
  info_.takes_adapters = true;  // merged copies (clip_adapters.cpp)
}

Status ClipExecutor::warm() {
  // One text batch and one image batch: touches every weight and arena (and, on cuda, checks the graphs).
  // Ids inside any vocabulary, ending with the EOS the text tower pools at.
  const int32_t eos = static_cast<int32_t>(std::min(config_.text.eos_token_id, config_.text.vocab_size - 1));
  Clock::time_point start = Clock::now();
  auto texts = embed_texts({{0, 1, eos}});
  if (!texts.ok()) return texts.status().with_context("warm-up text batch");
  text_cost_.observe(1, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  start = Clock::now();
  auto images = embed_images(std::vector<float>(static_cast<size_t>(3 * image_size() * image_size()), 0.0f), 1);
  if (!images.ok()) return images.status().with_context("warm-up image batch");
  image_cost_.observe(1, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  return ok_status();
}

StatusOr<std::vector<float>> ClipExecutor::embed_images(const std::vector<float>& pixels, int64_t n) {
  const int64_t size = image_size(), channels = config_.vision.num_channels;
  if (n < 0 || static_cast<int64_t>(pixels.size()) != n * channels * size * size) {
    return invalid_argument("expected " + std::to_string(n) + " images of [" + std::to_string(channels) + ", " +
                            std::to_string(size) + ", " + std::to_string(size) + "] pixel values");
  }
  return embed_images(pixels.data(), n);
}

StatusOr<std::vector<float>> ClipExecutor::embed_images(const float* pixels, int64_t n) {
  if (n < 0) return invalid_argument("negative image count");
  const int64_t per_image = config_.vision.num_channels * image_size() * image_size();
  const std::span<const float> one(pixels, static_cast<size_t>(n * per_image));
  return embed_images(std::span<const std::span<const float>>(&one, 1), 0, n);
}

// The images in `pieces` (each a whole number of `per_image` values), or kInvalidArgument; also checks the range.
template <typename T>
StatusOr<int64_t> ClipExecutor::count_images(std::span<const std::span<const T>> pieces, int64_t first,
                                             int64_t n) const {
  const int64_t size = image_size(), channels = config_.vision.num_channels, per_image = channels * size * size;
  if (first < 0 || n < 0) return invalid_argument("negative image range");
  int64_t images = 0;
  for (const std::span<const T>& piece : pieces) {
    if (piece.size() % static_cast<size_t>(per_image) != 0) {
      return invalid_argument("expected whole images of [" + std::to_string(channels) + ", " + std::to_string(size) +
                              ", " + std::to_string(size) + "] pixel " + (sizeof(T) == 1 ? "levels" : "values") +
                              ", got " + std::to_string(piece.size()));
    }
    images += static_cast<int64_t>(piece.size()) / per_image;
  }
  if (first + n > images) {
    return invalid_argument("images [" + std::to_string(first) + ", " + std::to_string(first + n) + ") of " +
                            std::to_string(images));
  }
  return images;
}

StatusOr<std::vector<float>> ClipExecutor::embed_images(std::span<const std::span<const float>> pieces, int64_t first,
                                                        int64_t n) {
  const int64_t size = image_size(), channels = config_.vision.num_channels;
  const int64_t per_image = channels * size * size, dim = embedding_dim();
  RETURN_IF_ERROR(count_images(pieces, first, n).status());
  std::vector<float> embeds(static_cast<size_t>(n * dim));
  for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
    const int64_t count = std::min(options_.batch_size_max, n - begin);
    const std::vector<std::span<const float>> parts = slice_images(pieces, per_image, first + begin, count);
#if MMSERVE_HAS_CUDA
    if (cuda_) {
      RETURN_IF_ERROR(cuda_->encode_images(parts, embeds.data() + begin * dim));
      continue;
    }
#endif
    const float* joined = parts.front().data();
    if (parts.size() > 1) {
      cpu_pixels_.resize(static_cast<size_t>(count * per_image));
      float* to = cpu_pixels_.data();
      for (const std::span<const float>& part : parts) to = std::copy(part.begin(), part.end(), to);
      joined = cpu_pixels_.data();
    }
    Tensor in(const_cast<float*>(joined), DType::kF32, {count, channels, size, size});
    Tensor out(embeds.data() + begin * dim, DType::kF32, {count, dim});
    RETURN_IF_ERROR(cpu_->encode_images(in, out, arena_));
  }
  return embeds;
}

StatusOr<std::vector<float>> ClipExecutor::embed_image_levels(std::span<const std::span<const uint8_t>> pieces,
                                                              std::span<const float> table, int64_t first, int64_t n) {
  const int64_t size = image_size(), channels = config_.vision.num_channels;
  const int64_t per_image = channels * size * size, dim = embedding_dim();
  if (static_cast<int64_t>(table.size()) != channels * 256) {
    return invalid_argument("a level table of " + std::to_string(table.size()) + " values (expected " +
                            std::to_string(channels * 256) + ")");
  }
  RETURN_IF_ERROR(count_images(pieces, first, n).status());
  std::vector<float> embeds(static_cast<size_t>(n * dim));
  for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
    const int64_t count = std::min(options_.batch_size_max, n - begin);
    const std::vector<std::span<const uint8_t>> parts = slice_images(pieces, per_image, first + begin, count);
#if MMSERVE_HAS_CUDA
    if (cuda_) {
      RETURN_IF_ERROR(cuda_->encode_image_levels(parts, table, embeds.data() + begin * dim));
      continue;
    }
#endif
    // The CPU model reads floats: the chunk's levels expanded into one buffer (reused across batches).
    cpu_pixels_.resize(static_cast<size_t>(count * per_image));
    float* to = cpu_pixels_.data();
    for (const std::span<const uint8_t>& part : parts) {
      kernels::expand_pixel_levels(part.data(), static_cast<int64_t>(part.size()) / per_image, channels, size * size,
                                   table.data(), to);
      to += part.size();
    }
    Tensor in(cpu_pixels_.data(), DType::kF32, {count, channels, size, size});
    Tensor out(embeds.data() + begin * dim, DType::kF32, {count, dim});
    RETURN_IF_ERROR(cpu_->encode_images(in, out, arena_));
  }
  return embeds;
}

StatusOr<std::vector<float>> ClipExecutor::embed_batch_images(std::span<const BatchImage> images,
                                                              std::span<const float> table, int64_t first, int64_t n,
                                                              std::vector<int32_t>& status) {
  if (decoder_ == nullptr && !stage_geometry_) return internal_error("embed_batch_images without a batch decoder");
  const size_t image_bytes = static_cast<size_t>(3 * image_size() * image_size());
  // The batch decoder decodes the chunk's PNGs; with the stage they are decoded already and only gathered.
  auto fill = [&](std::span<const BatchImage> chunk, uint8_t* out, void* stream) {
    if (decoder_) return decoder_->run(chunk, out, stream);
    return PngDecodeStage::gather(chunk, image_bytes, out, options_.device, stream);
  };
  auto statuses = [&] { return decoder_ ? decoder_->statuses() : std::span<const int32_t>(); };  // staged: all 0
  if (first < 0 || n < 0 || first + n > static_cast<int64_t>(images.size())) {
    return invalid_argument("images [" + std::to_string(first) + ", " + std::to_string(first + n) + ") of " +
                            std::to_string(images.size()));
  }
  const int64_t per_image = config_.vision.num_channels * image_size() * image_size(), dim = embedding_dim();
  std::vector<float> embeds(static_cast<size_t>(n * dim));
  status.assign(static_cast<size_t>(n), 0);
  for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
    const int64_t count = std::min(options_.batch_size_max, n - begin);
    const std::span<const BatchImage> chunk = images.subspan(static_cast<size_t>(first + begin), count);
#if MMSERVE_HAS_CUDA
    if (cuda_) {
      RETURN_IF_ERROR(cuda_->encode_image_levels_with(
          count, table,
          [&](uint8_t* device_levels, cudaStream_t stream) { return fill(chunk, device_levels, stream); },
          embeds.data() + begin * dim));
      const std::span<const int32_t> st = statuses();
      std::copy(st.begin(), st.end(), status.begin() + begin);
      continue;
    }
#endif
    decoded_levels_.resize(static_cast<size_t>(count * per_image));
    RETURN_IF_ERROR(fill(chunk, decoded_levels_.data(), nullptr));
    const std::span<const int32_t> st = statuses();
    std::copy(st.begin(), st.end(), status.begin() + begin);
    const std::span<const uint8_t> piece(decoded_levels_);
    ASSIGN_OR_RETURN(std::vector<float> part,
                     embed_image_levels(std::span<const std::span<const uint8_t>>(&piece, 1), table, 0, count));
    std::copy(part.begin(), part.end(), embeds.begin() + begin * dim);
  }
  return embeds;
}

StatusOr<std::vector<float>> ClipExecutor::embed_images_on_device(const float* device_pixels, int64_t n) {
#if MMSERVE_HAS_CUDA
  if (cuda_) {
    const int64_t per_image = config_.vision.num_channels * image_size() * image_size(), dim = embedding_dim();
    if (n < 0) return invalid_argument("negative image count");
    std::vector<float> embeds(static_cast<size_t>(n * dim));
    for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
      const int64_t count = std::min(options_.batch_size_max, n - begin);
      RETURN_IF_ERROR(
          cuda_->encode_images_on_device(device_pixels + begin * per_image, count, embeds.data() + begin * dim));
    }
    return embeds;
  }
#endif
  return failed_precondition("embed_images_on_device needs a cuda executor");
}

StatusOr<std::vector<float>> ClipExecutor::embed_texts(const std::vector<std::vector<int32_t>>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), dim = embedding_dim();
  std::vector<float> embeds(static_cast<size_t>(n * dim));
  for (int64_t begin = 0; begin < n; begin += options_.batch_size_max) {
    const int64_t count = std::min(options_.batch_size_max, n - begin);
    std::vector<std::vector<int32_t>> chunk(ids.begin() + begin, ids.begin() + begin + count);
#if MMSERVE_HAS_CUDA
    if (cuda_) {
      RETURN_IF_ERROR(cuda_->encode_texts(chunk, embeds.data() + begin * dim));
      continue;
    }
#endif
    Tensor out(embeds.data() + begin * dim, DType::kF32, {count, dim});
    RETURN_IF_ERROR(cpu_->encode_texts(chunk, out, arena_));
  }
  return embeds;
}

std::vector<float> ClipExecutor::logits_per_image(const std::vector<float>& image_embeds, int64_t images,
                                                  const std::vector<float>& text_embeds, int64_t texts) const {
  // On the host for both devices: [images, texts] is tiny next to the towers.
  std::vector<float> logits(static_cast<size_t>(images * texts));
  const int64_t dim = embedding_dim();
  if (images == 0 || texts == 0) return logits;
  kernels::gemm(false, true, images, texts, dim, std::exp(logit_scale_), image_embeds.data(), dim, text_embeds.data(),
                dim, 0.0f, logits.data(), texts);
  return logits;
}

}  // namespace mmserve::engine
