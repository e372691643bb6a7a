// SamExecutor: one instance of a SAM model (HF `SamModel`) on one device, the SAM family's engine::Executor; its
// input preparation is engine/sam_inputs.h.
//
// A request is one image (or the image_id of one encoded before) and one prompt: points with labels, at most one
// box and optionally a dense mask, in the original image's pixels as HF's SamProcessor takes them. A batch
// encodes the images it does not find in the embedding cache together (in chunks of about hooks.chunk_budget_ms,
// with the preemption hook between them), caches their embeddings (LRU under `embedding_cache_mb`), then
// decodes every prompt against its embedding and post-processes the masks exactly as SamProcessor's
// post_process_masks does (upscaled to the padded size, cropped to the resized size, resized to the original
// size, binarised at 0). Three masks (HF's multimask order) unless multimask_output is false.
// On `cpu` it runs models/sam/sam.h in f32. On `cuda:N` it runs models/sam/sam_cuda.h (encoder in bf16 by default,
// f16 or f32; CUDA graphs for the encoder per batch bucket and the decoder per token bucket), the encoder's batch at
// most min(batch_size_max, 8) images (4096 tokens each at 1024 px: 8 fill the GPU), and the embedding cache lives in
// GPU memory: slots of one embedding each (channels-last f32) carved from one allocation of at most
// embedding_cache_mb, LRU as on the CPU; cached prompts are decoded first, then each encoded chunk's prompts straight
// from the encoder's output (so an eviction can never pull an embedding from under a prompt of the same batch).
// Tests: tests/unit/engine/sam_executor_test.cpp (HF's goldens through the executor, the cache), tests/e2e,
// tests/conformance/sam_cuda_test.cpp (the executor on cuda:0).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/chunk_cost.h"
#include "engine/embedding_cache.h"
#include "engine/executor.h"
#include "frontends/image/sam_preprocess.h"
#include "models/sam/sam.h"
#if MMSERVE_HAS_CUDA
#include "models/sam/sam_cuda.h"
#endif

namespace mmserve::engine {

struct SamOptions {
  int64_t embedding_cache_bytes = int64_t{256} << 20;  // mmserve.yaml options.embedding_cache_mb (0: no cache)
};

// A request's options (engine::RequestParams of the SAM family).
struct SamParams : virtual RequestParams {
  bool multimask_output = true;
  std::string image_id;  // set instead of an image input: the image of an earlier request (its embedding cached)
};

// One prepared SAM request.
struct SamInput : ModelInput {
  std::string image_id;                      // content hash of the encoded image
  std::vector<float> pixels;                 // [3, S, S]; empty when the request named a cached image
  image::SamImageInput geometry;             // sizes for post-processing (its pixels moved into `pixels`)
  std::vector<std::array<float, 2>> points;  // in the model's input frame (the processor's normalised coords)
  std::vector<int32_t> labels;
  std::vector<std::array<float, 4>> boxes;  // 0 or 1
  std::vector<float> mask_input;            // [4g, 4g] low-res logits, or empty
  int64_t mask_height = 0, mask_width = 0;
  bool multimask_output = true;
};

struct SamOutput : ModelOutput {
  std::string image_id;
  int64_t count = 0, height = 0, width = 0;  // masks: count x height x width, the original image's size
  std::vector<uint8_t> masks;                // 1 = inside, row-major per mask
  std::vector<float> iou_scores;             // [count]
  bool embedding_cached = false;             // the image encoder was skipped
};

inline constexpr int kSamImageSlot = 0, kSamPromptSlot = 1;

class SamExecutor final : public Executor {
 public:
  static StatusOr<std::unique_ptr<SamExecutor>> create(const std::string& model_dir, const ExecutorOptions& options,
                                                       const SamOptions& sam = {});
  // engine/families.h: the family config's key is embedding_cache_mb.
  static StatusOr<std::unique_ptr<Executor>> create_for_server(const std::string& model_dir,
                                                               const ExecutorOptions& options,
                                                               const nlohmann::json& family_config);

  const models::SamConfig& config() const { return config_; }

  Device device() const override { return options_.device; }
  DType dtype() const override { return dtype_; }
  int64_t memory_bytes() const override;
  std::string describe() const override;
  const FamilyInfo& info() const override { return info_; }
  Status warm() override;
  BatchStats run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) override;
  std::vector<CacheStats> caches() const override;
  ~SamExecutor() override;

 private:
  class DeviceCache;  // the GPU embedding cache (sam_executor.cpp)
  SamExecutor(ExecutorOptions options, SamOptions sam);
  StatusOr<std::shared_ptr<SamOutput>> decode(const SamInput& input, const std::vector<float>& embedding);
  // The prompt of `input` (pointing into it) and the post-processing of masks into the output, for both devices.
  static models::SamPrompt prompt_of(const SamInput& input);
  // The response's masks: the GPU's post-processed ones, else the CPU twin of kernels/mask_resize over the logits.
  static std::shared_ptr<SamOutput> output_of(const SamInput& input, models::SamMasks masks);
  static models::SamMaskGeometry mask_geometry(const SamInput& input);
  BatchStats run_cuda(const std::vector<BatchItem>& batch, const BatchHooks& hooks);

  ExecutorOptions options_;
  SamOptions sam_;
  FamilyInfo info_;
  models::SamConfig config_;
  DType dtype_ = DType::kF32;
  std::unique_ptr<models::SamModel> model_;  // cpu
#if MMSERVE_HAS_CUDA
  std::unique_ptr<models::SamCudaModel> cuda_model_;  // cuda
#endif
  std::unique_ptr<DeviceCache> device_cache_;  // cuda
  EmbeddingCache cache_;                       // cpu
  ChunkCost image_cost_;  // the encoder's measured chunk times: size the chunks
};

}  // namespace mmserve::engine
