// The Llama family on the CPU (see llama_cpu_backend.h); moved out of llama_executor.cpp as it was.
#include "engine/llama_cpu_backend.h"

#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling/sampling.h"

namespace mmserve::engine {
namespace {

// The CPU backend: LlamaModel's f32 forward over a host pool, logits on the host, kernels/sampling's twin. The
// model may be a LLaVA's decoder (shared with the LlavaModel that owns it).
class LlamaCpuBackend final : public DecoderBackend {
 public:
  LlamaCpuBackend(std::shared_ptr<const models::LlamaModel> model, models::LlamaKvPool pool)
      : model_(std::move(model)), pool_(std::move(pool)) {}
  std::string describe() const override { return "cpu f32"; }
  int64_t num_blocks() const override { return pool_.num_blocks; }
  int64_t block_size() const override { return pool_.block_size; }
  int64_t pool_bytes() const override { return pool_.bytes(); }
  int64_t memory_bytes() const override { return static_cast<int64_t>(model_->weight_bytes()) + pool_.bytes(); }
  Status forward(const models::DecoderStep& step) override {
    rows_ = static_cast<int64_t>(step.logit_rows.size());
    logits_.resize(static_cast<size_t>(rows_ * model_->config().vocab_size));
    const bool moe = model_->config().num_experts > 0;
    return model_->forward_step(step, pool_, logits_.data(), moe ? &routing_ : nullptr);
  }
  const models::MoeRoutingTrace* routing() const override {
    return model_->config().num_experts > 0 ? &routing_ : nullptr;
  }
  StatusOr<std::vector<float>> mean_input_embedding(const std::vector<int32_t>& tokens,
                                                    const std::vector<int32_t>& embed_rows,
                                                    const float* embeds) override {
    return model_->mean_input_embedding(tokens, embed_rows, embeds);
  }
  Status sample(std::span<const SampleRow> rows, std::vector<SampledToken>& out) override {
    const int64_t vocab = model_->config().vocab_size, n = static_cast<int64_t>(rows.size());
    if (n != rows_) return internal_error("sample() rows differ from the step's");
    // EOS before min_tokens: those logits to -inf first (the raw logprobs see the ban too, as on the GPU).
    for (int64_t r = 0; r < n; ++r) {
      for (int32_t id : rows[r].banned) {
        if (id >= 0 && id < vocab) logits_[r * vocab + id] = -std::numeric_limits<float>::infinity();
      }
    }
    const SamplingInputs in = sampling_inputs(rows);
    std::vector<int32_t> ids(static_cast<size_t>(n)), top_ids(static_cast<size_t>(n * in.top_n));
    std::vector<float> logprobs(static_cast<size_t>(n)), top_logprobs(top_ids.size());
    kernels::SamplingArgs a;
    a.logits = logits_.data(), a.rows = n, a.vocab = vocab, a.vocab_ld = vocab, a.params = in.params.data();
    a.ids = ids.data();
    if (in.penalties) {
      a.seen_offsets = in.seen_offsets.data(), a.seen_ids = in.seen_ids.data(), a.prompt_lens = in.prompt_lens.data();
    }
    if (in.logprobs) {
      a.logprobs = logprobs.data(), a.top_n = in.top_n;
      if (in.top_n > 0) a.top_ids = top_ids.data(), a.top_logprobs = top_logprobs.data();
    }
    RETURN_IF_ERROR(kernels::sample_tokens(a));
    out.assign(static_cast<size_t>(n), SampledToken());
    for (int64_t r = 0; r < n; ++r) {
      out[r].id = ids[r];
      if (rows[r].logprobs < 0) continue;
      TokenLogprob t;
      t.id = ids[r];
      t.logprob = logprobs[r];
      for (int64_t i = 0; i < rows[r].logprobs; ++i) {
        t.top.emplace_back(top_ids[r * in.top_n + i], top_logprobs[r * in.top_n + i]);
      }
      out[r].logprob = std::move(t);
    }
    return ok_status();
  }

 private:
  std::shared_ptr<const models::LlamaModel> model_;
  models::LlamaKvPool pool_;
  std::vector<float> logits_;  // [rows_, vocab] of the last forward
  int64_t rows_ = 0;
  models::MoeRoutingTrace routing_;  // Mixtral: the last forward's
};

}  // namespace

std::unique_ptr<DecoderBackend> make_llama_cpu_backend(std::shared_ptr<const models::LlamaModel> model,
                                                       models::LlamaKvPool pool) {
  return std::make_unique<LlamaCpuBackend>(std::move(model), std::move(pool));
}

}  // namespace mmserve::engine
