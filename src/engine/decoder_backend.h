// What the decoder engine (LlamaExecutor, and the LLaVA / Mixtral executors of issue 15) needs of a model on a
// device: run one scheduled step over the paged KV pool, then pick the next token of the rows that want one.
// Both sample with kernels/sampling: the CPU backend with its twin on host logits, the CUDA backend
// (llama_cuda_backend) on the GPU, copying back only the ids (and asked-for logprobs); the two make the same integer
// decisions with the same Philox draws, so a seed gives the same text on either device.
// Tests: through tests/unit/engine/llama_executor_test.cpp (CPU) and tests/gpu/llama_cuda_test.cpp (CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/token_sampler.h"
#include "kernels/sampling/sampling.h"
#include "models/common/decoder_step.h"
#include "models/llama/llama.h"
#include "models/lora/gate_head.h"
#include "models/lora/lora_adapter.h"

namespace mmserve::engine {

// One row to sample: the logits of step.logit_rows[i] for the i-th row.
struct SampleRow {
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;                      // the sequence's seed, and how many tokens it drew so far (Philox)
  uint64_t step = 0;
  std::span<const int32_t> prompt;        // for the penalties
  std::span<const int32_t> generated;
  std::span<const int32_t> banned;        // ids never sampled (EOS before min_tokens)
  int64_t logprobs = -1;                  // -1 none, else top-N of the raw log-softmax
};

// The host side of kernels::sample_tokens(_cuda) for a step's rows, shared by the backends: each row's parameters,
// the tokens each row has seen (CSR, prompt first) when some row has a penalty, and what logprobs are asked.
struct SamplingInputs {
  std::vector<kernels::SamplingRowParams> params;
  std::vector<int32_t> seen_offsets, seen_ids, prompt_lens;  // empty without penalties
  bool penalties = false, logprobs = false;
  int64_t top_n = 0;  // the most any row asks for
};
SamplingInputs sampling_inputs(std::span<const SampleRow> rows);

struct SampledToken {
  int32_t id = 0;
  std::optional<TokenLogprob> logprob;
};

class DecoderBackend {
 public:
  virtual ~DecoderBackend() = default;
  virtual std::string describe() const = 0;
  // K/V slots of the pool, and its bytes.
  virtual int64_t num_blocks() const = 0;
  virtual int64_t block_size() const = 0;
  virtual int64_t pool_bytes() const = 0;
  virtual int64_t memory_bytes() const = 0;  // weights + pool + workspaces
  // Runs the step (K/V written, logits of its logit_rows kept for sample()).
  virtual Status forward(const models::DecoderStep& step) = 0;
  // One token per row of the last forward's logit rows (rows.size() == step.logit_rows.size()).
  virtual Status sample(std::span<const SampleRow> rows, std::vector<SampledToken>& out) = 0;
  // A mixture-of-experts model's routing of the last forward ([layers, step tokens, k]), or null.
  virtual const models::MoeRoutingTrace* routing() const { return nullptr; }
  // LoRA on a device with adapter slots. adapter_packer: how load_lora_adapter keeps an adapter's matrices for this
  // backend, on the loader's thread: null (f32 copies, the CPU forward's), or the GPU's slot image packed from the
  // file's bytes in pinned memory, which makes it quick to make resident and keeps no f32 copy. adapter_ready (the
  // engine thread, between steps): whether the next step may use it without waiting for its copy; when not, the
  // copy starts and the engine admits its sequences at a later step, so a load never stalls running batches.
  virtual models::LoraImagePacker adapter_packer() const { return nullptr; }
  virtual StatusOr<bool> adapter_ready(const models::LoraAdapter& adapter) { return true; }
  // Blocks until the adapter copies adapter_ready started are done (nothing else can run meanwhile).
  virtual Status wait_for_adapters() { return ok_status(); }
  // The gate router's input (models/lora/gate_head.h): the mean of the prompt's decoder input rows, each token's
  // embed_tokens row or, at embed_rows (ascending), the rows of `embeds` (LLaVA's image features). Engine thread,
  // between steps.
  virtual StatusOr<std::vector<float>> mean_input_embedding(const std::vector<int32_t>& tokens,
                                                            const std::vector<int32_t>& embed_rows,
                                                            const float* embeds) = 0;
  // The router's first layer (W1 e + b1 before the ReLU) computed where the embedding table is, for a text-only
  // prompt, and e itself when `e` is non-null: the GPU's path (the rows and W1 never cross the bus).
  // kUnimplemented where the backend has none (the CPU: GateHead::route on e is the same work).
  virtual StatusOr<std::vector<float>> gate_first_layer(const std::vector<int32_t>& tokens,
                                                        const std::shared_ptr<const models::GateHead>& gate,
                                                        std::vector<float>* e) {
    return Status(StatusCode::kUnimplemented, "no device-side gate on this backend");
  }
};

}  // namespace mmserve::engine
