// LlamaExecutor (see llama_executor.h); LlamaInputs is llama_inputs.cpp.
#include "engine/llama_executor.h"

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>

#include "core/json_config.h"
#include "engine/decoder_backend.h"
#include "engine/decoder_scheduler.h"
#include "engine/embedding_cache.h"
#include "engine/families.h"
#include "engine/kv_block_manager.h"
#include "engine/llama_cpu_backend.h"
#include "kernels/sampling/sampling.h"
#include "models/llava/llava_next.h"
#if MMSERVE_HAS_CUDA
#include "engine/llama_cuda_backend.h"
#endif

namespace mmserve::engine {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}


// One request in the engine: what the scheduler knows of it (its base: the plan's entries point here), and the rest.
struct Live : DecoderSequence {
  size_t index = 0;  // in run()'s items
  const LlamaInput* input = nullptr;
  int64_t prompt_len = 0;
  int64_t budget = 0;  // tokens it may generate in all
  uint64_t seed = 0;
  std::unique_ptr<text::IncrementalDetokenizer> stream;
  std::vector<TokenLogprob> logprobs;
  TextDelta pending;  // ids (and logprobs) not yet handed to on_delta
  std::string text;
  size_t streamed = 0;  // bytes of `text` handed to on_delta (a possible stop string's start waits)
  double compute_ms = 0;
  std::chrono::steady_clock::time_point admitted;  // first_ms / last_ms count from here (its queue time ends here)
  std::vector<int32_t> routing_experts;  // trace_routing: [generated tokens, layers, k]
  std::vector<float> routing_weights;
  std::vector<float> features;      // LLaVA: [placeholders, hidden], the images' features in prompt order
  std::vector<int32_t> feature_row;  // LLaVA: per prompt position, its row of `features` or -1
  std::shared_ptr<const models::LoraAdapter> lora;  // LoRA: held while the sequence lives (its id: `adapter`)
  std::shared_ptr<const models::LoraAdapter> lora2;  // gate routing: the second adapter
  float lora_weights[2] = {1.0f, 0.0f};
  std::vector<std::string> routed;  // gate routing: the adapters' names, for the output
  double first_ms = -1, last_ms = -1;
  bool done = false;
  std::span<const int32_t> generated() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(prompt_len));
  }
};

}  // namespace

std::vector<int32_t> llama_eos_ids(const std::string& model_dir, const models::LlamaConfig& config,
                                   const text::HfTokenizer& tokenizer) {
  std::vector<int32_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  auto generation = read_json_file(model_dir + "/generation_config.json");
  if (generation.ok() && generation->is_object() && generation->contains("eos_token_id")) {
    const nlohmann::json& e = (*generation)["eos_token_id"];
    if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
    if (e.is_array()) {
      for (const nlohmann::json& x : e) {
        if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
      }
    }
  }
  if (tokenizer.eos_id()) ids.push_back(*tokenizer.eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

LlamaExecutor::~LlamaExecutor() = default;

StatusOr<std::unique_ptr<LlamaExecutor>> LlamaExecutor::create(const std::string& model_dir,
                                                               const ExecutorOptions& options,
                                                               const LlamaOptions& llama) {
  if (!options.tp_devices.empty() || !options.pipeline_devices.empty()) {
    return unimplemented("tensor and pipeline parallel are not written for the Llama family");
  }
  if (llama.block_size <= 0 || llama.block_size > 1024 || llama.max_num_seqs <= 0 ||
      llama.max_num_batched_tokens <= 0 || llama.max_model_len < 0 || llama.kv_cache_bytes < 0 ||
      llama.encoder_cache_bytes < 0 || llama.max_loras < 0 || llama.max_loras > 256 || llama.max_lora_rank < 1 ||
      llama.max_lora_rank > 256 || llama.max_cpu_loras < 0 ||
      !(llama.gpu_memory_utilization > 0 && llama.gpu_memory_utilization <= 1)) {
    return invalid_argument("Llama-family options: block_size 1..1024, max_num_seqs and max_num_batched_tokens "
                            "positive, max_model_len and kv_cache_bytes >= 0, gpu_memory_utilization in (0, 1], "
                            "max_loras 0..256, max_lora_rank 1..256, max_cpu_loras >= 0");
  }
  std::unique_ptr<LlamaExecutor> e(new LlamaExecutor());
  e->options_ = options;
  e->llama_ = llama;
  ASSIGN_OR_RETURN(std::unique_ptr<text::HfTokenizer> tokenizer, text::HfTokenizer::from_model_dir(model_dir));
  e->tokenizer_ = std::move(tokenizer);
  ASSIGN_OR_RETURN(nlohmann::json config_json, read_json_file(model_dir + "/config.json"));
  const std::string model_type = config_json.is_object() ? config_json.value("model_type", "") : "";
  const bool llava = model_type == "llava" || model_type == "llava_next";
  if (llava) {
    ASSIGN_OR_RETURN(e->llava_config_, models::parse_llava_config(config_json, model_dir + "/config.json"));
    e->encoder_cache_ = std::make_unique<EmbeddingCache>("llava_encoder", llama.encoder_cache_bytes);
  }
  if (options.device.is_cpu()) {
    if (llama.kv_cache_dtype != "auto") {
      return unimplemented("kv_cache_dtype " + llama.kv_cache_dtype +
                           ": the Llama family's CPU path keeps an f32 KV cache (FP8 KV caches run on CUDA)");
    }
    if (options.dtype && *options.dtype != DType::kF32) {
      return unimplemented(std::string("the Llama family's CPU path computes in f32, not ") +
                           dtype_name(*options.dtype));
    }
    std::shared_ptr<const models::LlamaModel> model;
    if (llava) {
      ASSIGN_OR_RETURN(std::unique_ptr<models::LlavaModel> loaded, models::LlavaModel::load(model_dir));
      std::shared_ptr<const models::LlavaModel> shared(std::move(loaded));
      model = std::shared_ptr<const models::LlamaModel>(shared, &shared->text());  // owned by the LLaVA
      e->encode_images_ = [raw = shared.get()](const float* pixels, int64_t n, float* features) {
        const models::LlavaConfig& c = raw->config();
        const int64_t s = c.vision.image_size;
        Tensor pixel_t(const_cast<float*>(pixels), DType::kF32, {n, 3, s, s});
        Tensor feature_t(features, DType::kF32, {n, c.tokens_per_image(), c.text.hidden_size});
        Arena arena;
        return raw->encode_images(pixel_t, feature_t, arena);
      };
      e->encode_images_lora_ = [raw = shared.get()](const float* pixels, int64_t n, float* features,
                                                    const std::shared_ptr<const models::LoraAdapter>& adapter) {
        const models::LlavaConfig& c = raw->config();
        const int64_t s = c.vision.image_size;
        Tensor pixel_t(const_cast<float*>(pixels), DType::kF32, {n, 3, s, s});
        Tensor feature_t(features, DType::kF32, {n, c.tokens_per_image(), c.text.hidden_size});
        Arena arena;
        return raw->encode_images(pixel_t, feature_t, arena, &adapter->projector);
      };
      e->image_newline_ = shared->image_newline();
      e->vision_owner_ = std::const_pointer_cast<models::LlavaModel>(shared);
    } else {
      ASSIGN_OR_RETURN(std::unique_ptr<models::LlamaModel> loaded, models::LlamaModel::load(model_dir));
      model = std::move(loaded);
    }
    e->config_ = model->config();
    e->max_model_len_ = llama.max_model_len > 0 ? std::min(llama.max_model_len, model->max_length())
                                                : model->max_length();
    // The pool: the bytes asked for, else what max_num_seqs sequences of max_model_len need, at most 1 GiB
    // (calloc'ed: unused pages cost nothing).
    const int64_t per_token = model->kv_bytes_per_token();
    const int64_t need = llama.max_num_seqs * e->max_model_len_ * per_token;
    const int64_t bytes = llama.kv_cache_bytes > 0 ? llama.kv_cache_bytes : std::min<int64_t>(need, int64_t{1} << 30);
    const int64_t blocks = bytes / (per_token * llama.block_size);
    // Neither size given and the default pool too small for the model's own length (Llama 3.2's 131,072 tokens on
    // a CPU): the length is what the pool holds (prompts beyond it are a 400 naming it); given sizes must agree.
    if (llama.kv_cache_bytes == 0 && llama.max_model_len == 0) {
      e->max_model_len_ = std::min(e->max_model_len_, blocks * llama.block_size);
    }
    if (blocks < KvBlockManager::blocks_for(e->max_model_len_, llama.block_size)) {
      return invalid_argument("kv_cache_bytes " + std::to_string(bytes) + " holds " + std::to_string(blocks) +
                              " blocks; one sequence of max_model_len " + std::to_string(e->max_model_len_) +
                              " needs " + std::to_string(KvBlockManager::blocks_for(e->max_model_len_, llama.block_size)) +
                              " (raise kv_cache_bytes or lower max_model_len in mmserve.yaml options)");
    }
    ASSIGN_OR_RETURN(models::LlamaKvPool pool, model->new_pool(blocks, llama.block_size));
    e->backend_ = make_llama_cpu_backend(std::move(model), std::move(pool));
  } else {
#if MMSERVE_HAS_CUDA
    CudaImageEncoder vision;
    ASSIGN_OR_RETURN(e->backend_, make_llama_cuda_backend(model_dir, options, llama, e->config_, e->max_model_len_,
                                                          e->dtype_, llava ? &*e->llava_config_ : nullptr, &vision));
    e->encode_images_ = std::move(vision.encode);
    e->encode_images_lora_ = std::move(vision.encode_lora);
    e->image_newline_ = std::move(vision.image_newline);
    e->vision_owner_ = std::move(vision.owner);
    e->lora_slots_ = llama.max_loras > 0 ? llama.max_loras
                                         : (llama.adapters.empty() ? 0 : std::max<int64_t>(4, llama.adapters.size()));
#else
    return unimplemented("this build has no CUDA backend (device " + options.device.to_string() + ")");
#endif
  }
  if (!llama.enable_chunked_prefill && llama.max_num_batched_tokens < e->max_model_len_) {
    // A prompt (or a preempted sequence's recompute) must then fit one step whole (vLLM's rule too).
    return invalid_argument("with enable_chunked_prefill false, max_num_batched_tokens (" +
                            std::to_string(llama.max_num_batched_tokens) + ") must be at least max_model_len (" +
                            std::to_string(e->max_model_len_) + ")");
  }
  e->eos_ids_ = llama_eos_ids(model_dir, e->config_, *e->tokenizer_);
  if (e->config_.num_experts > 0) {
    e->expert_tokens_ = std::vector<std::atomic<int64_t>>(
        static_cast<size_t>(e->config_.num_hidden_layers * e->config_.num_experts));
  }
  e->blocks_ = std::make_unique<KvBlockManager>(e->backend_->num_blocks(), e->backend_->block_size(),
                                                llama.enable_prefix_caching);
  SchedulerConfig sc;
  sc.max_num_seqs = std::min(llama.max_num_seqs, options.batch_size_max);
  sc.max_num_batched_tokens = llama.max_num_batched_tokens;
  sc.chunked_prefill = llama.enable_chunked_prefill;
  sc.table_ld = KvBlockManager::blocks_for(e->max_model_len_, e->backend_->block_size());
  sc.max_adapters_per_step = e->lora_slots_;  // the GPU's slots (0 on the CPU: no limit)
  // A waiting sequence's adapter still copying to the GPU: admitted at a later step (its copy runs beside the
  // running batch). An error answers ready: the step's own staging then reports it.
  sc.ready = [backend = e->backend_.get()](const DecoderSequence& seq) {
    const Live& live = static_cast<const Live&>(seq);
    bool all = true;  // both of a gate-routed pair: each one's copy starts now if it is not resident
    for (const models::LoraAdapter* lora : {live.lora.get(), live.lora2.get()}) {
      if (lora == nullptr) continue;
      const StatusOr<bool> ready = backend->adapter_ready(*lora);
      all = all && (!ready.ok() || *ready);
    }
    return all;
  };
  e->scheduler_ = std::make_unique<DecoderScheduler>(sc, *e->blocks_);
  e->info_.platform = "mmserve_llama";
  e->info_.slot_names = {"sequence", ""};
  e->info_.inputs = {{"text_input", "BYTES", {1}}};
  e->info_.outputs = {{"text_output", "BYTES", {1}}};
  e->info_.max_text_tokens = e->max_model_len_;
  e->info_.generates = true;
  e->info_.takes_adapters = true;
  for (const auto& [name, dir] : llama.adapters) RETURN_IF_ERROR(e->load_adapter(name, dir));
  if (!llama.gate.empty()) {
    ASSIGN_OR_RETURN(models::GateHead gate, models::GateHead::load(llama.gate));
    if (gate.input_dim() != e->config_.hidden_size) {
      return invalid_argument(llama.gate + ": the gate takes " + std::to_string(gate.input_dim()) +
                              " values; this decoder's embedding has " + std::to_string(e->config_.hidden_size));
    }
    for (const std::string& name : gate.adapters()) {  // every adapter it names is loaded (not a request: no count)
      std::lock_guard<std::mutex> lock(e->adapters_mutex_);
      if (e->adapters_.count(name) == 0) {
        return not_found(llama.gate + ": gate.json names adapter '" + name + "', which is not loaded");
      }
    }
    e->gate_ = std::move(gate);
  }
  if (llama.gate_distill) {
    if (!e->gate_) return invalid_argument("gate_distill needs a gate head to distil (options.gate)");
    models::GateDistillOptions d;
    d.state_dir = llama.gate_distill_dir;
    d.lr = llama.gate_distill_lr;
    d.interval_ms = llama.gate_distill_interval_ms;
    d.min_samples = llama.gate_distill_min_samples;
    ASSIGN_OR_RETURN(e->distiller_, models::GateDistiller::create(*e->gate_, d));
  }
  return e;
}

int64_t LlamaExecutor::memory_bytes() const { return backend_->memory_bytes(); }

std::string LlamaExecutor::describe() const {
  const models::LlamaConfig& c = config_;
  return backend_->describe() + ": " + c.architecture + ", " + std::to_string(c.num_hidden_layers) + " layers, hidden " +
         std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ", max_model_len " +
         std::to_string(max_model_len_) + ", KV pool " + std::to_string(backend_->num_blocks()) + " blocks of " +
         std::to_string(backend_->block_size()) + " (" + std::to_string(backend_->pool_bytes() >> 20) + " MiB)" +
         (llama_.enable_prefix_caching ? ", prefix caching" : "");
}

std::optional<ExpertLoadStats> LlamaExecutor::expert_load() const {
  if (config_.num_experts <= 0) return std::nullopt;
  ExpertLoadStats s;
  s.layers = config_.num_hidden_layers, s.experts = config_.num_experts;
  s.tokens.reserve(expert_tokens_.size());
  for (const auto& t : expert_tokens_) s.tokens.push_back(t.load());
  return s;
}

std::optional<RouterStats> LlamaExecutor::router() const {
  if (!distiller_) return std::nullopt;
  const models::GateDistillStats d = distiller_->stats();
  RouterStats s;
  s.loss = d.train_loss, s.heldout_loss = d.heldout_loss;
  s.updates = d.updates, s.rollbacks = d.rollbacks, s.samples = d.samples;
  return s;
}

std::vector<CacheStats> LlamaExecutor::caches() const {
  CacheStats prefix;
  prefix.name = "prefix";
  prefix.hits = prefix_hits_.load();
  prefix.misses = prefix_queries_.load() - prefix.hits;
  const int64_t block_bytes = backend_->pool_bytes() / std::max<int64_t>(backend_->num_blocks(), 1);
  prefix.entries = cached_blocks_.load();
  prefix.bytes = prefix.entries * block_bytes;
  prefix.capacity_bytes = backend_->pool_bytes();
  if (!encoder_cache_) return {prefix};
  CacheStats encoder;
  encoder.name = "llava_encoder";
  encoder.hits = encoder_hits_.load();
  encoder.misses = encoder_misses_.load();
  encoder.entries = encoder_entries_.load();
  encoder.bytes = encoder_bytes_.load();
  encoder.capacity_bytes = llama_.encoder_cache_bytes;
  return {prefix, encoder};
}

std::optional<SequenceStats> LlamaExecutor::sequences() const {
  SequenceStats s;
  s.running = running_.load();
  s.waiting = waiting_.load();
  s.preemptions = preemptions_.load();
  s.kv_cache_usage = static_cast<double>(used_blocks_.load()) / static_cast<double>(std::max<int64_t>(backend_->num_blocks(), 1));
  return s;
}

Status LlamaExecutor::warm() {
  // One token through a block of its own: touches every weight (and captures the CUDA backend's graphs).
  KvBlockTable table;
  if (!blocks_->grow(table, 1)) return internal_error("the KV pool has no block");
  models::DecoderStep step;
  step.tokens = {static_cast<int32_t>(std::clamp<int64_t>(config_.bos_token_id, 0, config_.vocab_size - 1))};
  step.positions = {0};
  step.slots = {static_cast<int32_t>(table.blocks[0] * blocks_->block_size())};
  step.query_start = {0, 1};
  step.seq_lens = {1};
  step.table_ld = scheduler_->config().table_ld;
  step.block_tables.assign(static_cast<size_t>(step.table_ld), table.blocks[0]);
  step.logit_rows = {0};
  step.max_seq_len = step.max_query_len = 1;
  Status s = backend_->forward(step);
  blocks_->release(table);
  return s;
}

BatchStats LlamaExecutor::run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  BatchStats stats;
  const auto start = std::chrono::steady_clock::now();
  double preempted_ms = 0;
  std::vector<BatchItem> items = batch;  // and those admitted while it runs (hooks.admit)
  std::vector<std::unique_ptr<Live>> live;
  auto publish = [&] {
    running_ = scheduler_->running();
    waiting_ = scheduler_->waiting();
    preemptions_ = scheduler_->preemptions();
    const KvBlockStats b = blocks_->stats();
    used_blocks_ = b.used_blocks;
    cached_blocks_ = b.cached_blocks;
    prefix_queries_ = b.prefix_queries;
    prefix_hits_ = b.prefix_hits;
  };
  auto finish = [&](Live& s, StatusOr<std::shared_ptr<const ModelOutput>> out) {
    s.done = true;
    scheduler_->remove(&s);
    hooks.finish(s.index, std::move(out), s.compute_ms);
  };
  auto complete = [&](Live& s, const std::string& reason) {
    auto out = std::make_shared<LlamaOutput>();
    out->prompt_ids.assign(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
    out->ids.assign(s.generated().begin(), s.generated().end());
    out->logprobs = std::move(s.logprobs);
    out->tokenizer = tokenizer_;
    out->finish_reason = reason;
    out->routed_adapters = s.routed;
    if (s.input->adapter) out->adapter = s.input->adapter->name;
    if (!s.routed.empty()) out->routed_weights.assign(s.lora_weights, s.lora_weights + s.routed.size());
    out->batch_size = stats.slot_items[0];
    out->first_ms = s.first_ms;
    out->last_ms = s.last_ms;
    if (s.input->trace_routing && backend_->routing() != nullptr) {
      out->routing_layers = config_.num_hidden_layers;
      out->routing_k = config_.experts_per_token;
      out->routing_experts = std::move(s.routing_experts);
      out->routing_weights = std::move(s.routing_weights);
    }
    // Without a stop string the text is HF's decode of the ids; the stream's tail is flushed to the callback.
    const bool stop_string = reason == "stop" && !out->ids.empty() &&
                             std::find(eos_ids_.begin(), eos_ids_.end(), out->ids.back()) == eos_ids_.end();
    if (stop_string) {
      out->text = s.text;
    } else {
      StatusOr<std::string> text = tokenizer_->decode(out->ids, /*skip_special_tokens=*/true);
      out->text = text.ok() ? *text : s.text;
    }
    if (s.input->on_delta) {
      TextDelta tail = std::move(s.pending);
      if (out->text.size() > s.streamed && out->text.compare(0, s.streamed, s.text, 0, s.streamed) == 0) {
        tail.text = out->text.substr(s.streamed);
      }
      tail.tokenizer = tokenizer_.get();
      if (!tail.text.empty() || !tail.ids.empty()) s.input->on_delta(tail);
    }
    finish(s, std::shared_ptr<const ModelOutput>(std::move(out)));
  };
  auto start_sequence = [&](size_t i) {
    const auto* input = dynamic_cast<const LlamaInput*>(items[i].input);
    if (input == nullptr) {
      hooks.finish(i, internal_error("a Llama executor was given another family's input"), 0);
      return;
    }
    const int64_t length = static_cast<int64_t>(input->prompt.size());
    const int64_t budget = std::min<int64_t>(input->max_tokens, max_model_len_ - length);
    if (budget <= 0 || length <= 0) {
      hooks.finish(i, invalid_argument("the prompt has " + std::to_string(length) + " tokens; max_model_len is " +
                                       std::to_string(max_model_len_) + ": no room to generate"), 0);
      return;
    }
    auto s = std::make_unique<Live>();
    s->index = i;
    s->input = input;
    s->prompt_len = length;
    s->budget = budget;
    s->tokens = input->prompt;
    s->admitted = std::chrono::steady_clock::now();
    s->seed = input->sampling.seed.value_or(std::random_device{}());
    if (!input->images.empty()) {  // LLaVA: the images' features now, where the placeholders take them later
      StatusOr<std::vector<float>> features = image_features(*input);
      if (!features.ok()) {
        hooks.finish(i, features.status(), 0);
        return;
      }
      s->features = std::move(*features);
      s->feature_row.assign(static_cast<size_t>(length), -1);
      int32_t next = 0;
      const int32_t placeholder = static_cast<int32_t>(llava_config_->image_token_index);
      for (int64_t p = 0; p < length; ++p) {
        if (input->prompt[p] == placeholder) s->feature_row[p] = next++;
      }
      // Prefix-cache salt: the images' content (two requests with other images never share a block).
      uint64_t salt = 0xcbf29ce484222325ull;
      for (const std::string& h : input->image_hashes) {
        salt = (salt ^ std::stoull(h.substr(0, 16), nullptr, 16)) * 0x100000001b3ull;
      }
      s->extra_hash = salt;
      // ... from the block of the first placeholder on: the text before it is shared whatever the images.
      s->extra_from = std::find(input->prompt.begin(), input->prompt.end(), placeholder) - input->prompt.begin();
    }
    // The gate's input: the mean of the prompt's decoder input rows (the backend's table, on its device).
    auto embedding = [&]() -> StatusOr<std::vector<float>> {
      std::vector<int32_t> rows;
      for (size_t p = 0; p < s->feature_row.size(); ++p) {
        if (s->feature_row[p] >= 0) rows.push_back(static_cast<int32_t>(p));
      }
      return backend_->mean_input_embedding(input->prompt, rows, s->features.data());
    };
    if (distiller_ && input->adapter) {  // an explicit choice: a sample, and its adapter's prototype moves
      StatusOr<std::vector<float>> e = embedding();
      if (e.ok()) (void)distiller_->observe(std::move(*e), input->adapter->name).ok();  // sizes agree by creation
    }
    if (input->adapter_auto) {  // the gate head's top-2 over the prompt's mean input embedding
      // With distillation, the head trained so far (a snapshot: the trainer swaps it whole, never edits it).
      const std::shared_ptr<const models::GateHead> distilled = distiller_ ? distiller_->head() : nullptr;
      const std::shared_ptr<const models::GateHead> head =
          distilled ? distilled : std::shared_ptr<const models::GateHead>(std::shared_ptr<void>(), &*gate_);
      const models::GateHead& gate = *head;
      StatusOr<std::vector<float>> e = std::vector<float>();
      StatusOr<models::GateChoice> choice = Status(StatusCode::kUnimplemented, "");
      if (s->feature_row.empty() || std::all_of(s->feature_row.begin(), s->feature_row.end(), [](int32_t r) { return r < 0; })) {
        // A text prompt on a GPU: the first layer where the table is (W1 and the rows never cross the bus).
        StatusOr<std::vector<float>> hidden = backend_->gate_first_layer(input->prompt, head, distiller_ ? &*e : nullptr);
        if (hidden.ok()) {
          choice = gate.route_from_hidden(std::move(*hidden), 2);
        } else if (hidden.status().code() != StatusCode::kUnimplemented) {
          choice = hidden.status();
        }
      }
      if (choice.status().code() == StatusCode::kUnimplemented) {  // the CPU, or image rows: e here, then the MLP
        e = embedding();
        choice = e.ok() ? gate.route(*e, 2) : StatusOr<models::GateChoice>(e.status());
      }
      if (distiller_ && e.ok() && !e->empty()) (void)distiller_->observe(*e, "").ok();
      std::shared_ptr<const models::LoraAdapter> picked[2];
      Status found = choice.status();
      for (size_t k = 0; found.ok() && k < choice->index.size(); ++k) {
        StatusOr<std::shared_ptr<const models::LoraAdapter>> a =
            adapter(gate.adapters()[static_cast<size_t>(choice->index[k])]);
        found = a.status();
        if (found.ok()) picked[k] = *a;
      }
      for (const auto& a : picked) {  // the images' features were made before routing, with the base projector
        if (found.ok() && a && a->adapts_projector()) {
          found = failed_precondition("the gate routed to adapter '" + a->name +
                                      "', which adapts LLaVA's projector: routing mixes decoder adapters only");
        }
      }
      if (!found.ok()) {
        hooks.finish(i, found, 0);
        return;
      }
      s->lora = picked[0], s->lora2 = picked[1];
      s->lora_weights[0] = choice->weight[0], s->lora_weights[1] = choice->weight.size() > 1 ? choice->weight[1] : 0.0f;
      for (const auto& a : picked) {
        if (a) s->routed.push_back(a->name);
      }
      s->adapter = s->lora->id;
      s->adapter2 = s->lora2 ? s->lora2->id : 0;  // the scheduler counts both toward the GPU's slots
      uint64_t salt = s->lora->id * 0x9e3779b97f4a7c15ull;
      if (s->lora2) salt ^= (s->lora2->id + 1) * 0xc2b2ae3d27d4eb4full;
      uint32_t bits[2];
      std::memcpy(bits, s->lora_weights, sizeof bits);
      salt ^= (uint64_t{bits[0]} << 32) | bits[1];  // other weights, other keys and values
      s->extra_hash = (s->extra_hash ^ salt) * 0x100000001b3ull;
      s->extra_from = 0;
    }
    if (input->adapter) {  // LoRA: every block salted by the adapter (its keys and values are its own)
      s->lora = input->adapter;
      s->adapter = input->adapter->id;  // what the scheduler counts per step
      s->extra_hash = (s->extra_hash ^ (s->adapter * 0x9e3779b97f4a7c15ull)) * 0x100000001b3ull;
      s->extra_from = 0;
    }
    s->stream = std::make_unique<text::IncrementalDetokenizer>(*tokenizer_, true,
                                                                text::IncrementalDetokenizer::Divergence::kResync);
    scheduler_->add(s.get());
    live.push_back(std::move(s));
  };
  // Handles the token sampled for `s`; false when the request finished.
  auto take_token = [&](Live& s, const SampledToken& t) {
    const bool early = static_cast<int64_t>(s.generated().size()) < s.input->min_tokens;
    s.tokens.push_back(t.id);
    s.pending.ids.push_back(t.id);
    if (t.logprob) {
      s.logprobs.push_back(*t.logprob);
      s.pending.logprobs.push_back(*t.logprob);
    }
    s.last_ms = ms_since(s.admitted);
    if (s.first_ms < 0) s.first_ms = s.last_ms;
    if (!early && !s.input->ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), t.id) != eos_ids_.end()) {
      complete(s, "stop");
      return;
    }
    StatusOr<std::string> piece = s.stream->step(t.id);
    const size_t before = s.text.size();
    s.text += piece.ok() ? *piece : std::string();
    bool stopped = false;
    for (const std::string& stop : early ? std::vector<std::string>() : s.input->stop) {
      // Only where the new text can complete a stop string.
      const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      const size_t at = stop.empty() ? std::string::npos : s.text.find(stop, from);
      if (at != std::string::npos && at < s.text.size()) {
        s.text.resize(at);
        stopped = true;
      }
    }
    // What may be streamed: all of the text, but for a tail that could still become a stop string ("gir" of a
    // stop "girl" split over tokens), which waits for the next tokens (or the end, when it is flushed).
    size_t safe = s.text.size();
    for (const std::string& stop : stopped || early ? std::vector<std::string>() : s.input->stop) {
      for (size_t n = std::min(stop.size() - 1, s.text.size()); n > 0; --n) {
        if (s.text.compare(s.text.size() - n, n, stop, 0, n) == 0) {
          safe = std::min(safe, s.text.size() - n);
          break;
        }
      }
    }
    if (s.input->on_delta && safe > s.streamed) {
      s.pending.text = s.text.substr(s.streamed, safe - s.streamed);
      s.streamed = safe;
      s.pending.tokenizer = tokenizer_.get();
      const bool keep = s.input->on_delta(s.pending);
      s.pending = TextDelta();
      if (!keep) {
        finish(s, Status(StatusCode::kCancelled, "the client went away"));
        return;
      }
    }
    if (stopped) {
      complete(s, "stop");
    } else if (static_cast<int64_t>(s.generated().size()) >= s.budget) {
      complete(s, "length");
    }
  };

  // Mixtral: the step's routing into the expert-load counters (every token, every layer), and the routing of the
  // row that produced each sampled token into the traces of the requests that asked (x-mmserve-trace-routing).
  auto record_routing = [&](const models::MoeRoutingTrace& routing, const StepPlan& plan) {
    const int64_t k = routing.k, t = routing.tokens, e_count = config_.num_experts;
    for (int64_t l = 0; l < routing.layers; ++l) {
      for (int64_t i = 0; i < t * k; ++i) {
        expert_tokens_[static_cast<size_t>(l * e_count + routing.experts[l * t * k + i])].fetch_add(1);
      }
    }
    int64_t row = 0;
    for (const StepEntry& e : plan.entries) {
      row += e.count;
      Live* s = static_cast<Live*>(e.seq);
      if (!e.wants_logits || !s->input->trace_routing) continue;
      for (int64_t l = 0; l < routing.layers; ++l) {
        const int64_t at = (l * t + row - 1) * k;
        s->routing_experts.insert(s->routing_experts.end(), routing.experts.begin() + at,
                                  routing.experts.begin() + at + k);
        s->routing_weights.insert(s->routing_weights.end(), routing.weights.begin() + at,
                                  routing.weights.begin() + at + k);
      }
    }
  };
  for (size_t i = 0; i < items.size(); ++i) start_sequence(i);
  auto last_yield = std::chrono::steady_clock::now(), last_progress = last_yield;
  std::vector<SampleRow> rows;
  std::vector<SampledToken> sampled;
  std::vector<Live*> sampling;
  while (true) {
    for (auto& s : live) {  // clients that left: their sequences stop now, their blocks go back
      if (!s->done && items[s->index].cancelled && items[s->index].cancelled()) {
        finish(*s, Status(StatusCode::kCancelled, "the client went away"));
      }
    }
    live.erase(std::remove_if(live.begin(), live.end(), [](const auto& s) { return s->done; }), live.end());
    if (hooks.admit && llama_.enable_continuous_batching) {  // continuous batching: requests queued meanwhile join
      const int64_t room = scheduler_->config().max_num_seqs - static_cast<int64_t>(live.size());
      if (room > 0) {
        for (BatchItem& item : hooks.admit(room)) {
          items.push_back(std::move(item));
          start_sequence(items.size() - 1);
        }
      }
    }
    // Adapters unloaded with fail_running: their sequences (running, waiting, or admitted just now with the adapter
    // they were prepared with) end here and give their blocks back as a cancelled one does.
    if (adapter_revocations() > 0) {
      for (auto& s : live) {
        for (const models::LoraAdapter* a : {s->lora.get(), s->lora2.get()}) {
          if (s->done || a == nullptr || !adapter_revoked(a->id)) continue;
          finish(*s, not_found("adapter '" + a->name +
                               "' was unloaded while this request ran (unload_lora_adapter with fail_running)"));
        }
      }
      live.erase(std::remove_if(live.begin(), live.end(), [](const auto& s) { return s->done; }), live.end());
    }
    if (live.empty()) break;
    const auto t0 = std::chrono::steady_clock::now();
    StepPlan plan = scheduler_->schedule();
    if (plan.empty() && scheduler_->held_by_ready()) {  // only sequences whose adapter is still copying: wait for it
      const Status copied = backend_->wait_for_adapters();
      if (copied.ok()) continue;
      for (auto& s : live) finish(*s, copied);
      break;
    }
    if (plan.empty()) {  // cannot happen with the admission checks; never spin
      for (auto& s : live) finish(*s, internal_error("the scheduler found no room for this sequence"));
      break;
    }
    // LLaVA: the placeholder rows of this step's prefill chunks take their image features.
    std::vector<float> step_embeds;
    int32_t row = 0;
    for (const StepEntry& e : plan.entries) {
      if (!llava_config_) break;  // text-only models have no image rows
      const Live* s = static_cast<const Live*>(e.seq);
      for (int64_t p = e.start; p < e.start + e.count; ++p, ++row) {
        if (p >= static_cast<int64_t>(s->feature_row.size()) || s->feature_row[p] < 0) continue;
        plan.step.embed_rows.push_back(row);
        const float* f = s->features.data() + static_cast<int64_t>(s->feature_row[p]) * config_.hidden_size;
        step_embeds.insert(step_embeds.end(), f, f + config_.hidden_size);
      }
    }
    plan.step.embeds = step_embeds.empty() ? nullptr : step_embeds.data();
    for (const StepEntry& e : plan.entries) {  // LoRA: each sequence's adapter (the Live entries hold them)
      if (static_cast<const Live*>(e.seq)->lora) {
        for (const StepEntry& f : plan.entries) plan.step.loras.push_back(static_cast<const Live*>(f.seq)->lora.get());
        break;
      }
    }
    for (const StepEntry& e : plan.entries) {  // gate routing: second adapters and both weights
      if (static_cast<const Live*>(e.seq)->lora2) {
        for (const StepEntry& f : plan.entries) {
          const Live* live = static_cast<const Live*>(f.seq);
          plan.step.loras_second.push_back(live->lora2.get());
          plan.step.lora_weights.push_back(live->lora_weights[0]);
          plan.step.lora_weights.push_back(live->lora_weights[1]);
        }
        break;
      }
    }
    Status step = backend_->forward(plan.step);
    if (!step.ok()) {
      if (step.code() == StatusCode::kInternal) stats.device_fault = step;
      for (auto& s : live) {
        if (!s->done) finish(*s, step);
      }
      break;
    }
    scheduler_->complete(plan);
    if (const models::MoeRoutingTrace* routing = backend_->routing()) record_routing(*routing, plan);
    rows.clear();
    sampling.clear();
    std::vector<int32_t> no_eos;
    for (const StepEntry& e : plan.entries) {
      if (!e.wants_logits) continue;
      Live* s = static_cast<Live*>(e.seq);
      SampleRow row;
      row.params = &s->input->sampling;
      row.seed = s->seed;
      row.step = static_cast<uint64_t>(s->generated().size());
      row.prompt = std::span<const int32_t>(s->tokens).first(static_cast<size_t>(s->prompt_len));
      row.generated = s->generated();
      // HF's MinNewTokensLogitsProcessor / vLLM's min_tokens: no EOS before min_tokens.
      if (static_cast<int64_t>(s->generated().size()) < s->input->min_tokens) row.banned = eos_ids_;
      row.logprobs = s->input->logprobs;
      rows.push_back(row);
      sampling.push_back(s);
    }
    Status sample = backend_->sample(rows, sampled);
    const double step_ms = ms_since(t0);
    for (const StepEntry& e : plan.entries) {  // each entry's share of the step, by its tokens
      static_cast<Live*>(e.seq)->compute_ms += step_ms * static_cast<double>(e.count) / plan.step.num_tokens();
    }
    if (!sample.ok()) {
      for (auto& s : live) {
        if (!s->done) finish(*s, sample);
      }
      break;
    }
    for (size_t r = 0; r < sampling.size(); ++r) take_token(*sampling[r], sampled[r]);
    stats.slot_items[0] = std::max<int64_t>(stats.slot_items[0], static_cast<int64_t>(plan.entries.size()));
    publish();
    if (hooks.progress && ms_since(last_progress) >= 50) {
      hooks.progress();
      last_progress = std::chrono::steady_clock::now();
    }
    if (!(hooks.admit && llama_.enable_continuous_batching) && hooks.between_chunks && hooks.chunk_budget_ms > 0 &&
        ms_since(last_yield) >= hooks.chunk_budget_ms) {
      const auto paused = std::chrono::steady_clock::now();
      hooks.between_chunks();
      preempted_ms += ms_since(paused);
      last_yield = std::chrono::steady_clock::now();
    }
  }
  publish();
  stats.compute_ms = ms_since(start) - preempted_ms;
  return stats;
}

StatusOr<std::vector<float>> LlamaExecutor::image_features(const LlamaInput& input) {
  const models::LlavaConfig& c = *llava_config_;
  const int64_t t = c.tokens_per_image(), h = c.text.hidden_size, s = c.vision.image_size;
  const int64_t tile_floats = 3 * s * s;
  // Each image's rows start at its offset (its placeholders' first row among the request's).
  std::vector<int64_t> offset(input.images.size() + 1, 0);
  for (size_t i = 0; i < input.images.size(); ++i) offset[i + 1] = offset[i] + input.image_tokens[i];
  std::vector<float> out(static_cast<size_t>(offset.back() * h));
  std::vector<size_t> missing;  // images to encode (their tiles in one batch through the tower)
  // An adapter on the projector makes other features of the same image: cached under the image and that load's id.
  const models::LoraAdapter* projector =
      input.adapter && input.adapter->adapts_projector() ? input.adapter.get() : nullptr;
  if (projector != nullptr && !encode_images_lora_) {
    return unimplemented("adapter '" + projector->name + "' adapts the projector, which this device does not apply");
  }
  auto key = [&](size_t i) {
    return projector ? input.image_hashes[i] + "/adapter-" + std::to_string(projector->id) : input.image_hashes[i];
  };
  for (size_t i = 0; i < input.images.size(); ++i) {
    std::shared_ptr<const std::vector<float>> hit = encoder_cache_->find(key(i));
    if (hit && static_cast<int64_t>(hit->size()) == input.image_tokens[i] * h) {
      std::copy(hit->begin(), hit->end(), out.begin() + offset[i] * h);
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    std::vector<float> pixels;
    for (size_t i : missing) pixels.insert(pixels.end(), input.images[i].begin(), input.images[i].end());
    const int64_t tiles = static_cast<int64_t>(pixels.size()) / tile_floats;
    std::vector<float> features(static_cast<size_t>(tiles * t * h));
    if (projector != nullptr) {
      RETURN_IF_ERROR(encode_images_lora_(pixels.data(), tiles, features.data(), input.adapter));
    } else {
      RETURN_IF_ERROR(encode_images_(pixels.data(), tiles, features.data()));
    }
    const float* tile_rows = features.data();
    for (size_t i : missing) {
      const int64_t rows = input.image_tokens[i];
      auto entry = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * h));
      if (c.is_next()) {  // the tiles' rows packed with image_newline, as HF's pack_image_features
        const auto& [height, width] = input.image_sizes[i];
        models::gather_feature_rows(models::llava_next_feature_order(c, height, width), tile_rows,
                                    image_newline_.data(), h, entry->data());
      } else {
        std::copy(tile_rows, tile_rows + rows * h, entry->begin());
      }
      tile_rows += static_cast<int64_t>(input.images[i].size()) / tile_floats * t * h;
      std::copy(entry->begin(), entry->end(), out.begin() + offset[i] * h);
      encoder_cache_->insert(key(i), std::move(entry));
    }
  }
  const CacheStats stats = encoder_cache_->stats();
  encoder_hits_ = stats.hits, encoder_misses_ = stats.misses, encoder_entries_ = stats.entries;
  encoder_bytes_ = stats.bytes;
  return out;
}

}  // namespace mmserve::engine
