// The Llama family (models/llama: Llama, Mistral, Qwen2, Qwen3) behind the family interface: LlamaInputs turns a
// prompt (text, token ids or chat messages through the model's chat template) into a LlamaInput; LlamaExecutor
// generates for a batch of them on the CPU.
//
// This is the first, one-shot form of the decoder engine: run() prefills every sequence of the batch, then steps
// the live ones one token at a time (round robin, each with its own contiguous KV cache) until each stops (EOS,
// a stop string, max_tokens, the model's length), finishing it at once; between steps it yields to the engine
// loop's preemption hook every chunk_budget_ms. A request's tokens are streamed through LlamaParams::on_delta as
// they are detokenised (IncrementalDetokenizer, never a broken UTF-8 sequence). What is not here yet (issue 14
// item 4): a paged KV cache shared by all sequences, sequences joining a running batch (continuous batching),
// prefix caching, the GPU path.
// Tests: tests/unit/engine/llama_executor_test.cpp; tests/e2e/server_test.cpp (the OpenAI completions routes).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/token_sampler.h"
#include "frontends/text/chat_template/chat_template.h"
#include "frontends/text/hf_tokenizer.h"
#include "models/llama/llama.h"

namespace mmserve::engine {

// What a streaming request receives as generation goes on (engine thread): the text that became final since the
// last delta (never a broken UTF-8 sequence, never text a stop string may still claim), the ids generated since
// the last delta, and their log-probabilities when the request asked for them (one per id).
struct TextDelta {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<TokenLogprob> logprobs;
};

// Per request (the OpenAI codecs fill it). Exactly one prompt form: prompt ids, chat messages, or the request's
// text input (tokenised as HF's tokenizer(text)).
struct LlamaParams : virtual RequestParams {
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // vLLM's: before this many tokens EOS is never sampled and stop strings do not stop
  std::vector<std::string> stop;  // matched on the detokenised text; the text ends before the first found
  bool ignore_eos = false;
  std::optional<std::vector<int32_t>> prompt_ids;
  std::optional<nlohmann::ordered_json> messages;  // chat: rendered with the model's template + generation prompt
  // -1: none; N in [0, 20]: each generated token's log-probability and the N most likely (TokenLogprob).
  int64_t logprobs = -1;
  // Engine thread, as text completes; returning false cancels the request (the client left).
  std::function<bool(const TextDelta& delta)> on_delta;
};

struct LlamaInput : ModelInput {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int64_t logprobs = -1;
  std::function<bool(const TextDelta& delta)> on_delta;
};

struct LlamaOutput : ModelOutput {
  std::vector<int32_t> prompt_ids, ids;
  std::vector<TokenLogprob> logprobs;  // one per id when the request asked for them
  std::string text;
  std::shared_ptr<const text::HfTokenizer> tokenizer;  // the model's: token strings for logprobs
  std::string finish_reason;  // "stop" | "length"
  double first_ms = -1, last_ms = -1;  // from the batch's start to the first / last generated token
  int64_t generated_tokens() const override { return static_cast<int64_t>(ids.size()); }
  double first_token_ms() const override { return first_ms; }
  double last_token_ms() const override { return last_ms; }
};

class LlamaExecutor final : public Executor {
 public:
  static StatusOr<std::unique_ptr<LlamaExecutor>> create(const std::string& model_dir, const ExecutorOptions& options);
  // engine/families.h. No family options yet (any key is refused by name).
  static StatusOr<std::unique_ptr<Executor>> create_for_server(const std::string& model_dir,
                                                               const ExecutorOptions& options,
                                                               const nlohmann::json& family_config);
  Device device() const override { return Device::cpu(); }
  DType dtype() const override { return DType::kF32; }
  int64_t memory_bytes() const override { return static_cast<int64_t>(model_->weight_bytes()); }
  std::string describe() const override;
  const FamilyInfo& info() const override { return info_; }
  Status warm() override;
  BatchStats run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) override;

  const models::LlamaModel& model() const { return *model_; }
  const text::HfTokenizer& tokenizer() const { return *tokenizer_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  LlamaExecutor() = default;
  std::unique_ptr<models::LlamaModel> model_;
  std::shared_ptr<const text::HfTokenizer> tokenizer_;  // shared with the outputs (their token strings)
  std::vector<int32_t> eos_ids_;
  ExecutorOptions options_;
  FamilyInfo info_;
};

class LlamaInputs final : public InputPreparer {
 public:
  static StatusOr<std::unique_ptr<InputPreparer>> create_for_server(const std::string& model_dir, const Executor& first,
                                                                    const PreparerOptions& options);
  StatusOr<Prepared> prepare(std::vector<InputItem>& inputs, const RequestParams* params) const override;

 private:
  const LlamaExecutor* executor_ = nullptr;  // the tokenizer and the model's length (read-only, thread-safe)
  std::optional<chat_template::LoadedChatTemplate> chat_;
  std::string chat_error_;  // why there is no chat template (for requests that need one)
  PreparerOptions options_;
};

// The EOS ids of a model directory: config.json's, generation_config.json's (HF's generate uses them), the
// tokenizer's eos_token.
std::vector<int32_t> llama_eos_ids(const std::string& model_dir, const models::LlamaConfig& config,
                                   const text::HfTokenizer& tokenizer);

}  // namespace mmserve::engine
