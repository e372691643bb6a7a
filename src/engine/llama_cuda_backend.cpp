// LlamaCudaBackend (see llama_cuda_backend.h).
#include "engine/llama_cuda_backend.h"

#include "engine/llama_executor.h"

namespace mmserve::engine {

StatusOr<std::unique_ptr<DecoderBackend>> make_llama_cuda_backend(const std::string&, const ExecutorOptions& options,
                                                                  const LlamaOptions&, models::LlamaConfig&, int64_t&,
                                                                  DType&) {
  return unimplemented("the Llama family's CUDA path is being written (device " + options.device.to_string() + ")");
}

}  // namespace mmserve::engine
