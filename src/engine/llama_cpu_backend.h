// The Llama family on the CPU behind DecoderBackend (see decoder_backend.h): LlamaModel's f32 forward over a host
// KV pool, logits on the host, kernels/sampling's twin of the GPU's sampler (the same Philox draws).
#pragma once

#include <memory>

#include "engine/decoder_backend.h"
#include "models/llama/llama.h"

namespace mmserve::engine {

// `model` may be a LLaVA's decoder (shared with the LlavaModel that owns it).
std::unique_ptr<DecoderBackend> make_llama_cpu_backend(std::shared_ptr<const models::LlamaModel> model,
                                                       models::LlamaKvPool pool);

}  // namespace mmserve::engine
