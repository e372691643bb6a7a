// ClipExecutor: one instance of a CLIP model on one device, running batches (the CLIP family's engine::Executor;
// its input preparation is engine/clip_inputs.h).
//
// It owns the model's weights, the activation arena (sized for the largest batch once, then reused: no
// allocation per request on the hot path) and the device choice. On `cpu` it runs models/clip/clip.h in
// f32; on `cuda:N` it runs models/clip/clip_cuda.h (bf16 by default) with one CUDA graph per
// (tower, batch bucket), a batch of n replaying the smallest bucket >= n. Batches larger than
// `batch_size_max` are split. A batch's images are read from each request's own pixels (no concatenated copy:
// on cuda they go through the model's pinned staging ring, on cpu through one reused buffer). One executor is
// driven by one thread at a time (the server gives each instance its own engine thread); it holds no locks.
// Tests: tests/conformance/clip_model_test.cpp, clip_cuda_test.cpp, tests/unit/engine/clip_batch_test.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/status.h"
#include "core/tensor.h"
#include "engine/batch_image_decode.h"
#include "engine/png_decode_stage.h"
#include "engine/chunk_cost.h"
#include "engine/executor.h"
#include "engine/png_decode_stage.h"
#include "models/clip/clip.h"
#include "models/clip/clip_lora.h"
#if MMSERVE_HAS_CUDA
#include "models/clip/clip_cuda.h"
#endif

namespace mmserve::engine {

// CLIP's own options (mmserve.yaml: vision_micro_batch, text_micro_batch under pipeline_parallel).
struct ClipOptions {
  // CUDA pipeline (ExecutorOptions::pipeline_devices): batches run as micro-batches of these sizes; overlap false
  // runs each micro-batch through both stages before the next (the bench baseline).
  int64_t vision_micro_batch = 8, text_micro_batch = 4;
  bool pipeline_overlap = true;
  // Where encoded images are decoded (mmserve.yaml `image_decode`): kPreprocess, the preprocessing pool on the
  // host (decode, resize, crop: levels); kBatch, the executor itself, batch by batch, with the kernels of
  // engine/batch_image_decode.h on the model's device (on cuda the GPU's inflate and resize; the preparer only splits
  // the PNG). PNGs only: other formats and PNGs the GPU decoder does not take are decoded by the pool as before.
  // kStage: the same kernels ahead of the batcher (engine/png_decode_stage.h, owned by the preparer): each PNG is
  // decoded as it arrives, on the stage's own streams, and the executor only copies its levels in.
  enum class ImageDecode { kPreprocess, kBatch, kStage };
  ImageDecode image_decode = ImageDecode::kPreprocess;
  // kStage's lanes, slots and host share (mmserve.yaml `decode_stage: {lanes, lane_images, slots, queue_images}`).
  PngDecodeStage::Options stage;
};

// A CLIP request's options: the LoRA adapter it runs under (issue 16: a name loaded on the model, "" = none).
struct ClipParams : virtual RequestParams {
  std::string adapter;
};

// One CLIP request, prepared (engine/clip_inputs.h): its texts' token ids and its images' pixels.
struct ClipInput : ModelInput {
  std::string adapter;                         // ClipParams::adapter: both towers run under it
  std::vector<bool> input_is_image;            // per input, in input order
  std::vector<std::vector<int32_t>> text_ids;  // one per text input, in order
  // The images, one [3, S, S] block per image input, in order, in one of two forms: 8-bit levels with the table
  // that maps them to pixel values (decoded images: a quarter of the bytes to move, expanded where the model runs,
  // kernels/pixel_levels), or float pixel values (a request with pixel_values tensors: all its images are floats).
  std::vector<uint8_t> levels;
  std::shared_ptr<const std::vector<float>> level_table;  // [3 * 256], shared by the model's requests
  std::vector<float> pixels;
  // ClipOptions::image_decode kBatch: the PNGs the executor decodes, each with its position among the request's
  // images; `levels` then holds the other images' blocks, in order. Never beside `pixels`.
  struct KeptPng {
    int64_t image = 0;
    std::shared_ptr<const CompressedPng> png;  // shared: a ClipInput may be copied (tests, retries)
    std::shared_ptr<StagedImage> staged;       // kStage: its decode in flight or done (png_decode_stage.h)
  };
  std::vector<KeptPng> kept_pngs;
  int64_t images = 0;
  int64_t tokens = 0;  // sum of text_ids' lengths (OpenAI usage)
};

// One CLIP response: an embedding per input, in input order, plus logits when the request has both kinds.
struct ClipOutput : ModelOutput {
  int64_t dim = 0;
  std::vector<std::vector<float>> embeddings;  // L2-normalised
  std::vector<float> logits_per_image;         // [images x texts] in input order of each kind
  int64_t images = 0, texts = 0;  // the request's inputs of each kind (its token count is ResponseData::tokens)
};

// Slots of CLIP's batching budget.
inline constexpr int kClipTextSlot = 0, kClipImageSlot = 1;

class ClipExecutor final : public Executor {
 public:
  static StatusOr<std::unique_ptr<ClipExecutor>> create(const std::string& model_dir, const ExecutorOptions& options,
                                                        const ClipOptions& clip = {});
  // engine/families.h: the family config's keys are vision_micro_batch and text_micro_batch.
  static StatusOr<std::unique_ptr<Executor>> create_for_server(const std::string& model_dir,
                                                               const ExecutorOptions& options,
                                                               const nlohmann::json& family_config);

  const models::ClipConfig& config() const { return config_; }
  int64_t embedding_dim() const { return config_.projection_dim; }
  int64_t image_size() const { return config_.vision.image_size; }
  // ClipOptions::image_decode kBatch or kStage: the preparer keeps PNGs compressed (null / unset otherwise).
  bool decodes_images_in_batch() const { return decoder_ != nullptr || stage_geometry_.has_value(); }
  // kStage: a new stage on this executor's device for the preparer (null otherwise).
  StatusOr<std::unique_ptr<PngDecodeStage>> make_decode_stage() const;
  const image::ClipPreprocessConfig& preprocess_config() const { return preprocess_; }

  // Executor.
  Device device() const override { return options_.device; }
  DType dtype() const override { return dtype_; }
  int64_t memory_bytes() const override;
  std::string describe() const override;
  const FamilyInfo& info() const override { return info_; }
  Status warm() override;
  // Every text of the batch through the text tower, then every image through the image tower, each in chunks
  // bounded by hooks.chunk_budget_ms with hooks.between_chunks between them (and between the towers); text-only
  // requests finish right after the text tower. Inputs are ClipInput; pixels are never consumed. A batch whose
  // requests name LoRA adapters runs as one such pass per adapter (the base's requests first), each on its model.
  BatchStats run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) override;

  // LoRA adapters (issue 16; models/clip/clip_lora.h): loading reads the PEFT directory and builds the adapter's
  // merged copy of the model on this executor's device (on the caller's thread, while batches run: the engine thread
  // only takes the lock to look the copy up). An unload returns at once; a batch already running under the adapter
  // finishes on its copy, which is freed with it. Requests naming an unloaded adapter fail with kNotFound.
  Status load_adapter(const std::string& name, const std::string& dir) override;
  Status unload_adapter(const std::string& name, bool fail_running = false) override;
  std::vector<AdapterInfo> adapter_list() const override;
  bool adapters_per_instance() const override { return true; }

  // pixels: n images of [3, image_size, image_size] f32 in host memory, concatenated. Returns n normalised
  // embeddings.
  StatusOr<std::vector<float>> embed_images(const std::vector<float>& pixels, int64_t n);
  // The same over n * 3 * image_size^2 floats at `pixels` (a slice of a larger batch).
  StatusOr<std::vector<float>> embed_images(const float* pixels, int64_t n);
  // The images [first, first + n) of the concatenation of `pieces` (host memory, each a whole number of images:
  // a batch passes one piece per request). kInvalidArgument when a piece is not whole images or the range is
  // past the end.
  StatusOr<std::vector<float>> embed_images(std::span<const std::span<const float>> pieces, int64_t first, int64_t n);
  // The same from 8-bit levels ([3, S, S] bytes per image) and their table [3 * 256] (ClipInput's levels form).
  StatusOr<std::vector<float>> embed_image_levels(std::span<const std::span<const uint8_t>> pieces,
                                                  std::span<const float> table, int64_t first, int64_t n);
  // cuda only: the pixels already on this executor's GPU (benchmarks; the server passes host pixels).
  StatusOr<std::vector<float>> embed_images_on_device(const float* device_pixels, int64_t n);
  // One token-id sequence per text (BOS ... EOS). Returns normalised embeddings, one row per text.
  StatusOr<std::vector<float>> embed_texts(const std::vector<std::vector<int32_t>>& ids);
  // exp(logit_scale) * image_embeds @ text_embeds^T: [images, texts].
  std::vector<float> logits_per_image(const std::vector<float>& image_embeds, int64_t images,
                                      const std::vector<float>& text_embeds, int64_t texts) const;

 private:
  using Clock = std::chrono::steady_clock;
  ClipExecutor() = default;
  void fill_info();
  template <typename T>
  StatusOr<int64_t> count_images(std::span<const std::span<const T>> pieces, int64_t first, int64_t n) const;
  models::ClipConfig config_;
  float logit_scale_ = 0.0f;
  ExecutorOptions options_;
  ClipOptions clip_;
  FamilyInfo info_;
  ChunkCost image_cost_;  // measured chunk times of the image tower: size its chunks to chunk_budget_ms
  ChunkCost text_cost_;   // the same for the text tower
  DType dtype_ = DType::kF32;
  // One loaded adapter: its merged copy of the model on this executor's device.
  struct AdapterModel {
    std::shared_ptr<const models::ClipLora> lora;
    std::shared_ptr<models::ClipModel> model;
#if MMSERVE_HAS_CUDA
    std::shared_ptr<models::ClipCudaModel> cuda_model;
#endif
    std::atomic<int64_t> requests{0};
  };
  // The batch of requests under one adapter (or none: `adapter` null) on its model; run() calls it per adapter.
  BatchStats run_on(const std::vector<BatchItem>& batch, const BatchHooks& hooks);
  StatusOr<std::shared_ptr<AdapterModel>> adapter_model(const std::string& name) const;
  // ClipOptions::image_decode kBatch: reads the preprocessor config and makes the decoder for this device.
  Status make_batch_decoder();

  // The image tower over a batch with kept PNGs: their decode on the device, in the tower's chunks, then the host
  // fallback for the images the decoder refused (clip_batch.cpp).
  // Images [first, first + n) of `images` through the decoder and the image tower; `status` gets the decoder's
  // status per image of the range (nonzero: that image's row is to be recomputed from the host fallback).
  StatusOr<std::vector<float>> embed_batch_images(std::span<const BatchImage> images, std::span<const float> table,
                                                  int64_t first, int64_t n, std::vector<int32_t>& status);

  std::string model_dir_;
  std::unique_ptr<BatchImageDecoder> decoder_;
  std::optional<ImageDecodeGeometry> stage_geometry_;  // kStage: what the preparer's stage places
  image::ClipPreprocessConfig preprocess_;
  std::vector<uint8_t> decoded_levels_;  // cpu with kBatch: the decoder's output (reused)
  mutable std::mutex adapters_mutex_;
  std::map<std::string, std::shared_ptr<AdapterModel>> adapters_;
  // Exactly one of these is set, by the device: the base model. `cpu_` / `cuda_` are the model embed_*() run, the
  // base's but during an adapter's pass of run().
  std::shared_ptr<models::ClipModel> model_;
  models::ClipModel* cpu_ = nullptr;
  Arena arena_;
  std::vector<float> cpu_pixels_;  // cpu: a chunk's images joined when they come in several pieces (reused)
#if MMSERVE_HAS_CUDA
  std::shared_ptr<models::ClipCudaModel> cuda_model_;
  models::ClipCudaModel* cuda_ = nullptr;
  models::ClipCudaOptions cuda_options_;  // the base's, for adapters' copies
#endif
};

}  // namespace mmserve::engine
