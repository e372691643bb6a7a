// What the decoder engine (LlamaExecutor, and the LLaVA / Mixtral executors of issue 15) needs of a model on a
// device: run one scheduled step over the paged KV pool, then pick the next token of the rows that want one.
// The CPU backend keeps the logits on the host and samples with TokenSampler; the CUDA backend (llama_cuda_backend)
// keeps them on the GPU, samples there and copies back only the ids (and asked-for logprobs).
// Tests: through tests/unit/engine/llama_executor_test.cpp (CPU) and tests/gpu/llama_cuda_test.cpp (CUDA).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/token_sampler.h"
#include "models/common/decoder_step.h"

namespace mmserve::engine {

// One row to sample: the logits of step.logit_rows[i] for the i-th row.
struct SampleRow {
  const SamplingParams* params = nullptr;
  TokenSampler* sampler = nullptr;        // the sequence's random stream (CPU)
  uint64_t seed = 0;                      // the sequence's seed, and how many tokens it drew so far (GPU: Philox)
  uint64_t step = 0;
  std::span<const int32_t> prompt;        // for the penalties
  std::span<const int32_t> generated;
  std::span<const int32_t> banned;        // ids never sampled (EOS before min_tokens)
  int64_t logprobs = -1;                  // -1 none, else top-N of the raw log-softmax
};

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
};

}  // namespace mmserve::engine
