// The Llama family (models/llama: Llama, Mistral, Qwen2, Qwen3, Mixtral; and LLaVA, models/llava, a vision tower in
// front of one of them) behind the family interface: LlamaInputs turns a prompt (text, token ids or chat messages
// through the model's chat template, with images for a LLaVA) into a LlamaInput; LlamaExecutor generates for a batch
// of them.
//
// Images (LLaVA): each image in the request is decoded and preprocessed PIL-exactly by the directory's
// preprocessor_config.json; the prompt's image placeholders are expanded as HF's LlavaProcessor does (each
// "<image>" in a text prompt or a rendered chat becomes tokens_per_image copies before tokenising; prompt ids may
// carry one placeholder id per image, expanded the same way, or the expanded run). The placeholder count must
// match the images. At admission the executor encodes the images (the vision tower and projector; an LRU encoder
// cache keyed by the pixels' content hash skips repeated images) and the prefill chunks feed the features in place
// of the placeholders (DecoderStep.embed_rows). The prefix cache is salted with the images' hashes from the first
// placeholder's block on (DecoderSequence.extra_from), so two requests with different images never share a block
// that covers an image, and the text before the first image is shared.
//
// The decoder engine: the executor keeps a paged KV pool (DecoderBackend: CPU f32 or CUDA), its block manager
// (prefix caching) and a continuous-batching scheduler (decoder_scheduler.h) for as long as it lives. run() takes
// a batch, then every step: admits requests queued meanwhile (BatchHooks::admit, up to max_num_seqs), schedules
// decode tokens first and prefill chunks under the token budget, runs one forward over all of them, samples,
// streams text through LlamaParams::on_delta as it is detokenised (IncrementalDetokenizer, never a broken UTF-8
// sequence), and finishes each request as soon as it stops (EOS, a stop string, max_tokens, max_model_len). A
// request whose client left is dropped at the next step and its blocks freed. It returns when no sequence is left.
// Tests: tests/unit/engine/llama_executor_test.cpp; tests/e2e/server_test.cpp (the OpenAI completions routes).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/token_sampler.h"
#include "frontends/text/chat_template/chat_template.h"
#include "frontends/text/hf_tokenizer.h"
#include "frontends/image/preprocess.h"
#include "models/llama/llama.h"
#include "models/llava/llava.h"
#include "models/lora/gate_distill.h"
#include "models/lora/gate_head.h"
#include "models/lora/lora_adapter.h"

namespace mmserve::engine {

// What a streaming request receives as generation goes on (engine thread): the text that became final since the
// last delta (never a broken UTF-8 sequence, never text a stop string may still claim), the ids generated since
// the last delta, and their log-probabilities when the request asked for them (one per id).
struct TextDelta {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<TokenLogprob> logprobs;
  const text::HfTokenizer* tokenizer = nullptr;  // the model's (token strings), valid during the callback
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
  // A mixture-of-experts model: return each generated token's routing (LlamaOutput::routing_*); SPEC 4.4's trace.
  bool trace_routing = false;
  // A LoRA adapter loaded on the executor, by name (issue 16); empty: the base model.
  std::string adapter;
};

struct LlamaInput : ModelInput {
  std::vector<int32_t> prompt;
  // LLaVA: the images in placeholder order, preprocessed (f32 [tiles, 3, S, S] each: one tile for LLaVA, the base
  // and the grid's for LLaVA-NeXT), their sizes ({height, width} as decoded), placeholder counts and content hashes.
  std::vector<std::vector<float>> images;
  std::vector<std::array<int64_t, 2>> image_sizes;
  std::vector<int64_t> image_tokens;
  std::vector<std::string> image_hashes;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int64_t logprobs = -1;
  std::function<bool(const TextDelta& delta)> on_delta;
  bool trace_routing = false;
  std::shared_ptr<const models::LoraAdapter> adapter;  // held until the sequence ends (an unload waits for it)
  bool adapter_auto = false;  // adapter "auto": the executor's gate head picks the adapters at admission
};

struct LlamaOutput : ModelOutput {
  std::vector<int32_t> prompt_ids, ids;
  std::vector<TokenLogprob> logprobs;  // one per id when the request asked for them
  std::string text;
  std::shared_ptr<const text::HfTokenizer> tokenizer;  // the model's: token strings for logprobs
  std::string finish_reason;  // "stop" | "length"
  // Gate routing (adapter "auto"): the adapters the gate head chose and their weights (the usage extension).
  std::vector<std::string> routed_adapters;
  std::vector<float> routed_weights;
  std::string adapter;                 // the adapter the request named (empty: none, or routed)
  double first_ms = -1, last_ms = -1;  // from the request's admission to the engine to its first / last token
  // trace_routing on a mixture-of-experts model: per generated token and layer, the chosen experts (descending
  // weight) and their renormalised weights, [ids.size(), routing_layers, routing_k] (the routing of the position
  // whose logits chose the token: the prompt's last for the first token, then each token before it).
  int64_t routing_layers = 0, routing_k = 0;
  std::vector<int32_t> routing_experts;
  std::vector<float> routing_weights;
  int64_t generated_tokens() const override { return static_cast<int64_t>(ids.size()); }
  double first_token_ms() const override { return first_ms; }
  double last_token_ms() const override { return last_ms; }
  std::vector<std::string> adapters() const override {
    return adapter.empty() ? routed_adapters : std::vector<std::string>{adapter};
  }
};

// The engine's settings (mmserve.yaml `options:` of a Llama-family model, vLLM's names).
struct LlamaOptions {
  int64_t block_size = 16;               // tokens per KV block
  int64_t kv_cache_bytes = 0;            // the pool's bytes; 0: memory_fraction of the GPU, or 1 GiB on the CPU
  // The pool's elements (vLLM's --kv-cache-dtype): auto (the compute dtype), fp8 / fp8_e4m3, fp8_e5m2 (CUDA only:
  // twice the blocks in the same bytes; models::LlamaCudaOptions::kv_cache_dtype).
  std::string kv_cache_dtype = "auto";
  // CUDA: the token embedding table in host memory (llama.cpp's placement; models::LlamaCudaOptions::
  // embeddings_on_host): saves vocab x hidden x 2 bytes of GPU memory. Nothing changes on the CPU.
  bool embeddings_on_host = false;
  double gpu_memory_utilization = 0.85;  // CUDA: the share of the GPU's memory weights, workspaces and pool may use
  int64_t max_num_seqs = 256;            // sequences running at once
  int64_t max_num_batched_tokens = 2048;  // tokens per step
  int64_t max_model_len = 0;             // longest sequence (prompt + output); 0: the model's own length
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  // false: static batching, for comparison (the serving benchmark): a batch runs to its end before the next
  // requests join (no BatchHooks::admit).
  bool enable_continuous_batching = true;
  int64_t encoder_cache_bytes = 256LL << 20;  // LLaVA: image features kept for repeated images (0: none)
  // LoRA adapters loaded at creation: (name, PEFT directory) pairs (--lora-modules; requests name them).
  std::vector<std::pair<std::string, std::string>> adapters;
  // The GPU's adapter slots (0: 4 when `adapters` is set, else none: a GPU model then refuses adapters) and the
  // largest rank a slot takes. The CPU path has no slots (every loaded adapter is usable).
  int64_t max_loras = 0;
  int64_t max_lora_rank = 16;
  // The host tier (vLLM's max_cpu_loras): loaded adapters kept in host memory (each its f32 copy and, on a GPU, its
  // pinned slot image) at most; a load beyond it is refused (kResourceExhausted: unload one first). 0: no limit.
  int64_t max_cpu_loras = 0;
  // A gate head (models/lora/gate_head.h: gate.safetensors with gate.json beside it): requests whose adapter is
  // "auto" are routed by it to its top-2 adapters (which must be loaded), applied together (CPU and GPU).
  std::string gate;
  bool route_by_gate = false;  // adapter_routing: gate: requests naming no adapter are routed as "auto"
  // Online distillation of the gate (models/lora/gate_distill.h; needs `gate`; CPU or GPU): requests naming an
  // adapter move its prototype, every request is a sample, "auto" requests are routed by the distilled head; its
  // state (head and prototypes) lives in gate_distill_dir (required) and is restored from there at start.
  bool gate_distill = false;
  double gate_distill_lr = 1e-3;  // at most models::kGateDistillLrMax
  std::string gate_distill_dir;
  int64_t gate_distill_interval_ms = 60000;  // the trainer wakes this often, or after min_samples new samples
  int64_t gate_distill_min_samples = 64;
};

class DecoderBackend;
class DecoderScheduler;
class EmbeddingCache;
class KvBlockManager;

class LlamaExecutor final : public Executor {
 public:
  static StatusOr<std::unique_ptr<LlamaExecutor>> create(const std::string& model_dir, const ExecutorOptions& options,
                                                         const LlamaOptions& llama = {});
  ~LlamaExecutor() override;
  // engine/families.h: the LlamaOptions keys of mmserve.yaml, each checked.
  static StatusOr<std::unique_ptr<Executor>> create_for_server(const std::string& model_dir,
                                                               const ExecutorOptions& options,
                                                               const nlohmann::json& family_config);
  Device device() const override { return options_.device; }
  DType dtype() const override { return dtype_; }
  int64_t memory_bytes() const override;
  std::string describe() const override;
  const FamilyInfo& info() const override { return info_; }
  Status warm() override;
  BatchStats run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) override;
  std::vector<CacheStats> caches() const override;
  std::optional<SequenceStats> sequences() const override;
  std::optional<ExpertLoadStats> expert_load() const override;
  std::optional<RouterStats> router() const override;

  const models::LlamaConfig& config() const { return config_; }
  int64_t max_model_len() const { return max_model_len_; }
  const LlamaOptions& llama_options() const { return llama_; }
  const text::HfTokenizer& tokenizer() const { return *tokenizer_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // The LLaVA around the decoder (nullptr for a text-only model).
  const models::LlavaConfig* llava() const { return llava_config_ ? &*llava_config_ : nullptr; }

  // LoRA adapters (issue 16), safe from any thread. load: kAlreadyExists for a name in use, the adapter's own
  // errors (peft_config.h, lora_adapter.h), kUnimplemented on a GPU (not written yet). unload: kNotFound for an
  // unknown name; sequences already running under it finish with it (they hold it), or with `fail_running` end
  // with kNotFound at their next step on every replica (adapter_revoked). adapter: kNotFound naming the loaded ones.
  Status load_adapter(const std::string& name, const std::string& dir) override;
  Status unload_adapter(const std::string& name, bool fail_running = false) override;
  // Whether an unload with fail_running revoked this load of an adapter (by LoraAdapter::id, unique per load in the
  // process, so every executor of every replica sees it). revocations(): how many ever were (0: nothing to check).
  static bool adapter_revoked(uint64_t id);
  static uint64_t adapter_revocations();
  std::vector<AdapterInfo> adapter_list() const override;
  StatusOr<std::shared_ptr<const models::LoraAdapter>> adapter(const std::string& name) const;
  bool has_gate() const { return gate_.has_value(); }
  const models::GateDistiller* distiller() const { return distiller_.get(); }
  bool routes_by_gate() const { return gate_.has_value() && llama_.route_by_gate; }

 private:
  LlamaExecutor() = default;
  // LLaVA: the image features of `input` [placeholders, hidden] (from the encoder cache or the vision tower).
  StatusOr<std::vector<float>> image_features(const LlamaInput& input);
  models::LlamaConfig config_;
  DType dtype_ = DType::kF32;
  LlamaOptions llama_;
  int64_t max_model_len_ = 0;
  std::unique_ptr<DecoderBackend> backend_;
  std::unique_ptr<KvBlockManager> blocks_;
  std::unique_ptr<DecoderScheduler> scheduler_;
  std::atomic<int64_t> running_{0}, waiting_{0}, preemptions_{0}, used_blocks_{0}, cached_blocks_{0};
  std::atomic<int64_t> prefix_queries_{0}, prefix_hits_{0};
  std::shared_ptr<const text::HfTokenizer> tokenizer_;  // shared with the outputs (their token strings)
  // LLaVA: its config, and the image side on the executor's device (LlavaModel on the CPU, LlavaCudaVision on a
  // GPU): pixels of n tiles [n, 3, S, S] -> features [n * tokens_per_image, hidden], owned by vision_owner_;
  // LLaVA-NeXT's image_newline row (packing: models/llava/llava_next.h).
  std::optional<models::LlavaConfig> llava_config_;
  std::function<Status(const float* pixels, int64_t n, float* features)> encode_images_;
  // The same under an adapter's projector deltas (LlavaModel's on the CPU, LlavaCudaVision's on a GPU; unset where a
  // path does not apply them, which then refuses such adapters at load).
  std::function<Status(const float* pixels, int64_t n, float* features,
                       const std::shared_ptr<const models::LoraAdapter>& adapter)>
      encode_images_lora_;
  std::vector<float> image_newline_;
  std::shared_ptr<void> vision_owner_;
  std::unique_ptr<EmbeddingCache> encoder_cache_;
  std::atomic<int64_t> encoder_hits_{0}, encoder_misses_{0}, encoder_bytes_{0}, encoder_entries_{0};
  std::vector<std::atomic<int64_t>> expert_tokens_;  // Mixtral: [layers, experts] routing decisions
  std::vector<int32_t> eos_ids_;
  ExecutorOptions options_;
  FamilyInfo info_;
  mutable std::mutex adapters_mutex_;
  std::map<std::string, std::shared_ptr<const models::LoraAdapter>> adapters_;
  mutable std::map<std::string, int64_t> adapter_requests_;  // by name, counted where requests resolve them
  int64_t lora_slots_ = 0;  // the GPU backend's (0 on the CPU: no limit)
  std::optional<models::GateHead> gate_;
  std::unique_ptr<models::GateDistiller> distiller_;     // gate_distill: its head replaces gate_ for routing
};

class LlamaInputs final : public InputPreparer {
 public:
  static StatusOr<std::unique_ptr<InputPreparer>> create_for_server(const std::string& model_dir, const Executor& first,
                                                                    const PreparerOptions& options);
  StatusOr<Prepared> prepare(std::vector<InputItem>& inputs, const RequestParams* params) const override;

 private:
  // LLaVA: the request's images (InputItems of image kinds) preprocessed into `input`, and its placeholders
  // expanded in `prompt` (text before tokenising, or ids).
  Status add_images(std::vector<InputItem>& inputs, LlamaInput& input) const;
  StatusOr<std::string> expand_text(const std::string& text, const std::vector<int64_t>& counts) const;
  StatusOr<std::vector<int32_t>> expand_ids(const std::vector<int32_t>& ids, const std::vector<int64_t>& counts) const;

  const LlamaExecutor* executor_ = nullptr;  // the tokenizer and the model's length (read-only, thread-safe)
  std::optional<image::ClipPreprocessConfig> image_config_;  // LLaVA
  std::string image_token_;                                  // LLaVA: the placeholder's text ("<image>")
  std::optional<chat_template::LoadedChatTemplate> chat_;
  std::string chat_error_;  // why there is no chat template (for requests that need one)
  PreparerOptions options_;
};

// HF LlavaProcessor's (and LlavaNextProcessor's) placeholder expansion: the i-th occurrence of `token` in `text`
// becomes counts[i] copies of it (before tokenising; occurrences past counts stay single); `found` receives how many
// there were.
std::string expand_image_placeholders(const std::string& text, const std::string& token,
                                      const std::vector<int64_t>& counts, int64_t& found);

// The EOS ids of a model directory: config.json's, generation_config.json's (HF's generate uses them), the
// tokenizer's eos_token.
std::vector<int32_t> llama_eos_ids(const std::string& model_dir, const models::LlamaConfig& config,
                                   const text::HfTokenizer& tokenizer);

}  // namespace mmserve::engine
