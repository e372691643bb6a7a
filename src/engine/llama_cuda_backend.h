// The Llama family on the GPU behind DecoderBackend (see decoder_backend.h): models/llama/llama_cuda's forward over
// a device KV pool sized from gpu_memory_utilization (or kv_cache_bytes), decode steps replayed as CUDA graphs per
// batch bucket, sampling on the GPU (kernels/sampling). Built only with MMSERVE_CUDA.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/decoder_backend.h"
#include "engine/executor.h"
#include "models/llama/llama.h"
#include "models/llava/llava.h"

namespace mmserve::engine {

struct LlamaOptions;

// The image side of a LLaVA on the GPU (models/llava/llava_cuda.h), type-erased for the executor.
struct CudaImageEncoder {
  std::function<Status(const float* pixels, int64_t n, float* features)> encode;  // n tiles
  // The same under an adapter's projector deltas (LlavaCudaVision's device cache of their matrices per load).
  std::function<Status(const float* pixels, int64_t n, float* features,
                       const std::shared_ptr<const models::LoraAdapter>& adapter)>
      encode_lora;
  std::vector<float> image_newline;  // LLaVA-NeXT
  std::shared_ptr<void> owner;
};

// Loads the model onto options.device in options.dtype (bf16 by default); fills `config`, `max_model_len`
// (llama.max_model_len or the model's) and `dtype`. A LLaVA directory (`llava` non-null): the decoder from its
// language model, and `vision` the tower and projector on the same GPU.
StatusOr<std::unique_ptr<DecoderBackend>> make_llama_cuda_backend(const std::string& model_dir,
                                                                  const ExecutorOptions& options,
                                                                  const LlamaOptions& llama,
                                                                  models::LlamaConfig& config, int64_t& max_model_len,
                                                                  DType& dtype,
                                                                  const models::LlavaConfig* llava = nullptr,
                                                                  CudaImageEncoder* vision = nullptr);

}  // namespace mmserve::engine
