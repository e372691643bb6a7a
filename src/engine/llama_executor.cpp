// LlamaExecutor and LlamaInputs (see llama_executor.h).
#include "engine/llama_executor.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/json_config.h"
#include "engine/families.h"

namespace mmserve::engine {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// One live sequence of a batch.
struct Sequence {
  size_t index = 0;  // in the batch
  const LlamaInput* input = nullptr;
  models::LlamaKvCache cache;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  std::vector<TokenLogprob> logprobs;
  TextDelta pending;  // ids (and logprobs) not yet handed to on_delta
  std::string text;
  std::unique_ptr<text::IncrementalDetokenizer> stream;
  std::unique_ptr<TokenSampler> sampler;
  int64_t budget = 0;  // tokens it may still generate in all
  bool done = false;
  double compute_ms = 0;
  double first_ms = -1, last_ms = -1;  // since the batch started
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

StatusOr<std::unique_ptr<LlamaExecutor>> LlamaExecutor::create(const std::string& model_dir,
                                                               const ExecutorOptions& options) {
  if (!options.device.is_cpu()) {
    return unimplemented("the Llama family runs on the CPU only so far (device " + options.device.to_string() + ")");
  }
  if (options.dtype && *options.dtype != DType::kF32) {
    return unimplemented(std::string("the Llama family's CPU path computes in f32, not ") + dtype_name(*options.dtype));
  }
  if (!options.tp_devices.empty() || !options.pipeline_devices.empty()) {
    return unimplemented("tensor and pipeline parallel are not written for the Llama family");
  }
  std::unique_ptr<LlamaExecutor> e(new LlamaExecutor());
  e->options_ = options;
  ASSIGN_OR_RETURN(e->model_, models::LlamaModel::load(model_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<text::HfTokenizer> tokenizer, text::HfTokenizer::from_model_dir(model_dir));
  e->tokenizer_ = std::move(tokenizer);
  e->eos_ids_ = llama_eos_ids(model_dir, e->model_->config(), *e->tokenizer_);
  e->info_.platform = "mmserve_llama";
  e->info_.slot_names = {"sequence", ""};
  e->info_.inputs = {{"text_input", "BYTES", {1}}};
  e->info_.outputs = {{"text_output", "BYTES", {1}}};
  e->info_.max_text_tokens = e->model_->max_length();
  e->info_.generates = true;
  return e;
}

StatusOr<std::unique_ptr<Executor>> LlamaExecutor::create_for_server(const std::string& model_dir,
                                                                     const ExecutorOptions& options,
                                                                     const nlohmann::json& family_config) {
  RETURN_IF_ERROR(check_known_keys(family_config, {}, "Llama-family"));
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaExecutor> e, create(model_dir, options));
  return std::unique_ptr<Executor>(std::move(e));
}

std::string LlamaExecutor::describe() const {
  const models::LlamaConfig& c = model_->config();
  return "cpu f32: " + c.architecture + ", " + std::to_string(c.num_hidden_layers) + " layers, hidden " +
         std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ", max length " +
         std::to_string(model_->max_length());
}

Status LlamaExecutor::warm() {
  ASSIGN_OR_RETURN(models::LlamaKvCache cache, model_->new_cache(2));
  std::vector<float> logits(static_cast<size_t>(model_->config().vocab_size));
  const int32_t bos = static_cast<int32_t>(std::clamp<int64_t>(model_->config().bos_token_id, 0,
                                                                model_->config().vocab_size - 1));
  return model_->forward(&bos, 1, cache, logits.data());
}

BatchStats LlamaExecutor::run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  BatchStats stats;
  const auto start = std::chrono::steady_clock::now();
  double preempted_ms = 0;
  const int64_t vocab = model_->config().vocab_size;
  std::vector<std::unique_ptr<Sequence>> live;
  auto finish = [&](Sequence& s, StatusOr<std::shared_ptr<const ModelOutput>> out) {
    s.done = true;
    hooks.finish(s.index, std::move(out), s.compute_ms);
  };
  auto complete = [&](Sequence& s, const std::string& reason) {
    auto out = std::make_shared<LlamaOutput>();
    out->prompt_ids = s.input->prompt;
    out->ids = s.ids;
    out->logprobs = s.logprobs;
    out->tokenizer = tokenizer_;
    out->finish_reason = reason;
    out->batch_size = static_cast<int64_t>(live.size());
    out->first_ms = s.first_ms;
    out->last_ms = s.last_ms;
    // Without a stop string the text is HF's decode of the ids; the stream's tail is flushed to the callback.
    if (reason == "stop" && !s.ids.empty() && std::find(eos_ids_.begin(), eos_ids_.end(), s.ids.back()) == eos_ids_.end()) {
      out->text = s.text;
    } else {
      StatusOr<std::string> text = tokenizer_->decode(s.ids, /*skip_special_tokens=*/true);
      out->text = text.ok() ? *text : s.text;
      if (s.input->on_delta && out->text.size() > s.text.size() && out->text.compare(0, s.text.size(), s.text) == 0) {
        TextDelta tail;
        tail.text = out->text.substr(s.text.size());
        s.input->on_delta(tail);
      }
    }
    finish(s, std::shared_ptr<const ModelOutput>(std::move(out)));
  };
  // The batch's items, and those admitted while it runs (continuous batching: hooks.admit between steps).
  std::vector<BatchItem> items = batch;
  auto start_sequence = [&](size_t i) {
    const auto* input = dynamic_cast<const LlamaInput*>(items[i].input);
    if (input == nullptr) {
      hooks.finish(i, internal_error("a Llama executor was given another family's input"), 0);
      return;
    }
    auto s = std::make_unique<Sequence>();
    s->index = i;
    s->input = input;
    const int64_t length = static_cast<int64_t>(input->prompt.size());
    s->budget = std::min<int64_t>(input->max_tokens, model_->max_length() - length);
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<models::LlamaKvCache> cache = model_->new_cache(length + std::max<int64_t>(s->budget, 0));
    if (!cache.ok() || s->budget <= 0) {
      finish(*s, cache.ok() ? invalid_argument("the prompt leaves no room to generate") : cache.status());
      return;
    }
    s->cache = std::move(*cache);
    s->logits.resize(static_cast<size_t>(vocab));
    Status prefill = model_->forward(input->prompt.data(), length, s->cache, s->logits.data());
    s->compute_ms += ms_since(t0);
    if (!prefill.ok()) {
      finish(*s, prefill);
      return;
    }
    s->sampler = std::make_unique<TokenSampler>(input->sampling);
    s->stream = std::make_unique<text::IncrementalDetokenizer>(*tokenizer_, true,
                                                                text::IncrementalDetokenizer::Divergence::kResync);
    live.push_back(std::move(s));
  };
  for (size_t i = 0; i < items.size(); ++i) start_sequence(i);
  auto running = [&] {
    return static_cast<int64_t>(std::count_if(live.begin(), live.end(), [](const auto& s) { return !s->done; }));
  };
  // Decode: one token per live sequence per round; between rounds, requests queued meanwhile join (up to
  // batch_size_max live sequences) and finished sequences leave.
  auto last_yield = std::chrono::steady_clock::now();
  int64_t most = running();
  while (running() > 0) {
    for (size_t k = 0; k < live.size(); ++k) {
      Sequence& s = *live[k];
      if (s.done) continue;
      if (items[s.index].cancelled && items[s.index].cancelled()) {
        finish(s, Status(StatusCode::kCancelled, "the client went away"));
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      const bool early = static_cast<int64_t>(s.ids.size()) < s.input->min_tokens;
      if (early) {  // HF's MinNewTokensLogitsProcessor / vLLM's min_tokens: no EOS before min_tokens
        for (int32_t eos : eos_ids_) {
          if (eos >= 0 && eos < vocab) s.logits[eos] = -std::numeric_limits<float>::infinity();
        }
      }
      std::optional<std::vector<float>> raw;
      if (s.input->logprobs >= 0) raw = s.logits;
      const int32_t next = s.sampler->sample(s.logits, s.input->prompt, s.ids);
      s.ids.push_back(next);
      s.pending.ids.push_back(next);
      if (raw) {
        s.logprobs.push_back(token_logprob(*raw, next, s.input->logprobs));
        s.pending.logprobs.push_back(s.logprobs.back());
      }
      s.last_ms = ms_since(start);
      if (s.first_ms < 0) s.first_ms = s.last_ms;
      if (!early && !s.input->ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), next) != eos_ids_.end()) {
        s.compute_ms += ms_since(t0);
        complete(s, "stop");
        continue;
      }
      StatusOr<std::string> piece = s.stream->step(next);
      std::string add = piece.ok() ? *piece : std::string();
      const size_t before = s.text.size();
      s.text += add;
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
      if (s.input->on_delta && s.text.size() > before) {
        s.pending.text = s.text.substr(before);
        const bool keep = s.input->on_delta(s.pending);
        s.pending = TextDelta();
        if (!keep) {
          s.compute_ms += ms_since(t0);
          finish(s, Status(StatusCode::kCancelled, "the client went away"));
          continue;
        }
      }
      if (stopped) {
        s.compute_ms += ms_since(t0);
        complete(s, "stop");
        continue;
      }
      if (static_cast<int64_t>(s.ids.size()) >= s.budget) {
        s.compute_ms += ms_since(t0);
        complete(s, "length");
        continue;
      }
      Status step = model_->forward(&next, 1, s.cache, s.logits.data());
      s.compute_ms += ms_since(t0);
      if (!step.ok()) finish(s, step);
    }
    if (hooks.admit) {
      const int64_t room = options_.batch_size_max - running();
      if (room > 0) {
        for (BatchItem& item : hooks.admit(room)) {
          items.push_back(std::move(item));
          start_sequence(items.size() - 1);
        }
      }
      live.erase(std::remove_if(live.begin(), live.end(), [](const auto& s) { return s->done; }), live.end());
    } else if (hooks.between_chunks && hooks.chunk_budget_ms > 0 && ms_since(last_yield) >= hooks.chunk_budget_ms) {
      const auto paused = std::chrono::steady_clock::now();
      hooks.between_chunks();
      preempted_ms += ms_since(paused);
      last_yield = std::chrono::steady_clock::now();
    }
    most = std::max(most, running());
  }
  stats.slot_items[0] = most;
  stats.compute_ms = ms_since(start) - preempted_ms;
  return stats;
}

StatusOr<std::unique_ptr<InputPreparer>> LlamaInputs::create_for_server(const std::string& model_dir,
                                                                        const Executor& first,
                                                                        const PreparerOptions& options) {
  const auto* executor = dynamic_cast<const LlamaExecutor*>(&first);
  if (executor == nullptr) return internal_error("LlamaInputs needs a LlamaExecutor");
  std::unique_ptr<LlamaInputs> inputs(new LlamaInputs());
  inputs->executor_ = executor;
  inputs->options_ = options;
  StatusOr<chat_template::LoadedChatTemplate> chat = chat_template::load_chat_template(model_dir);
  if (chat.ok()) {
    inputs->chat_ = std::move(*chat);
  } else {
    inputs->chat_error_ = chat.status().message();
  }
  return std::unique_ptr<InputPreparer>(std::move(inputs));
}

StatusOr<Prepared> LlamaInputs::prepare(std::vector<InputItem>& inputs, const RequestParams* params) const {
  const auto* p = dynamic_cast<const LlamaParams*>(params);
  const LlamaParams defaults;
  if (p == nullptr) p = &defaults;
  RETURN_IF_ERROR(validate_sampling(p->sampling));
  if (p->max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (p->logprobs < -1 || p->logprobs > 20) {
    return invalid_argument("logprobs must be in [0, 20], got " + std::to_string(p->logprobs));
  }
  if (p->min_tokens < 0 || p->min_tokens > p->max_tokens) {
    return invalid_argument("min_tokens must be in [0, max_tokens], got " + std::to_string(p->min_tokens));
  }
  auto input = std::make_unique<LlamaInput>();
  const text::HfTokenizer& tokenizer = executor_->tokenizer();
  const int forms = (p->prompt_ids ? 1 : 0) + (p->messages ? 1 : 0) + (inputs.empty() ? 0 : 1);
  if (forms != 1) return invalid_argument("give exactly one prompt (text, token ids or messages)");
  if (p->prompt_ids) {
    input->prompt = *p->prompt_ids;
  } else if (p->messages) {
    if (!chat_) return invalid_argument("model '" + options_.model + "' has no chat template: " + chat_error_);
    chat_template::RenderOptions render;
    render.add_generation_prompt = true;
    render.bos_token = chat_->bos_token;
    render.eos_token = chat_->eos_token;
    ASSIGN_OR_RETURN(std::string text, chat_->chat_template.render(*p->messages, render));
    // The template writes the special tokens (apply_chat_template(tokenize=True) adds none).
    ASSIGN_OR_RETURN(input->prompt, tokenizer.encode(text, /*add_special_tokens=*/false));
  } else {
    if (inputs.size() != 1 || inputs[0].kind != InputKind::kText) {
      return invalid_argument("a Llama-family model takes one text prompt");
    }
    ASSIGN_OR_RETURN(input->prompt, tokenizer.encode(inputs[0].text, /*add_special_tokens=*/true));
  }
  if (input->prompt.empty()) return invalid_argument("the prompt has no tokens");
  const int64_t vocab = executor_->model().config().vocab_size, max_length = executor_->model().max_length();
  for (int32_t id : input->prompt) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(vocab) + ")");
    }
  }
  if (static_cast<int64_t>(input->prompt.size()) >= max_length) {
    return invalid_argument("the prompt has " + std::to_string(input->prompt.size()) +
                            " tokens; this model's maximum context length is " + std::to_string(max_length));
  }
  input->sampling = p->sampling;
  input->max_tokens = p->max_tokens;
  input->min_tokens = p->min_tokens;
  input->stop = p->stop;
  input->ignore_eos = p->ignore_eos;
  input->logprobs = p->logprobs;
  input->on_delta = p->on_delta;
  Prepared prepared;
  prepared.tokens = static_cast<int64_t>(input->prompt.size());
  prepared.items = {1, 0};
  prepared.score = qos_score(0, 0, static_cast<double>(input->prompt.size()), options_.qos);
  prepared.retriable = !p->on_delta;
  prepared.input = std::move(input);
  return prepared;
}

}  // namespace mmserve::engine
