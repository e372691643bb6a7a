// ModelRuntime (see model_runtime.h): loading with quota and warm-up, admission, the preprocessing task, the
// engine threads' batch loop, and finish(), for every family alike. Locks: state_mutex_ guards only the admission
// counters; the queue's scheduling lock lives in request_queue.cpp; no lock is held while a batch runs or `done` is
// called. Tests: tests/unit/serving/inference_server_test.cpp.
#include "serving/model_runtime.h"

#include <algorithm>
#include <limits>

#include "core/thread_pool.h"  // set_current_thread_name
#include "models/registry.h"

namespace mmserve::serving {
namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

std::string mib(int64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

}  // namespace

ModelRuntime::ModelRuntime(std::string name, ModelConfig config, const RuntimeContext& context, models::Family family)
    : name_(std::move(name)),
      config_(std::move(config)),
      context_(context),
      family_(family),
      metrics_(*context.metrics, name_, config_.priority_levels),
      queue_(QueueOptions{context.policy, static_cast<size_t>(config_.queue_size), context.aging_ms_per_level,
                          &metrics_.queue_depth(),
                          [this](const PendingRequestPtr& r, const Status& s) { on_dropped(r, s); }}) {}

ModelRuntime::~ModelRuntime() {
  stop(Status(StatusCode::kUnavailable, "model " + name_ + " was unloaded"));
}

StatusOr<std::shared_ptr<ModelRuntime>> ModelRuntime::load(const std::string& name, const std::string& dir,
                                                           const ModelConfig& config, const RuntimeContext& context) {
  MMSERVE_CHECK(context.preprocess_pool != nullptr && context.metrics != nullptr, "incomplete RuntimeContext");
  const Clock::time_point start = Clock::now();
  ASSIGN_OR_RETURN(models::Family family, models::detect_family(dir));
  std::shared_ptr<ModelRuntime> runtime(new ModelRuntime(name, config, context, family));
  RETURN_IF_ERROR(runtime->load_instances(dir));
  RETURN_IF_ERROR(runtime->apply_injected_faults());
  for (size_t i = 0; i < runtime->executors_.size(); ++i) {
    runtime->engines_.emplace_back([raw = runtime.get(), exec = runtime->executors_[i].get(),
                                    replica = runtime->replicas_[i].get()] { raw->engine_loop(exec, replica); });
  }
  runtime->load_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
  return runtime;
}

Status ModelRuntime::load_instances(const std::string& dir) {
  std::vector<Device> devices;
  RETURN_IF_ERROR(place_replicas(devices));
  const int instances = static_cast<int>(devices.size());
  const bool any_cpu = std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cpu(); });
  std::optional<DType> dtype;  // "auto": the device's default (f32 on cpu, bf16 on cuda)
  if (config_.dtype != "auto")
    dtype = *dtype_from_safetensors(config_.dtype == "f32" ? "F32" : config_.dtype == "f16" ? "F16" : "BF16");
  if (any_cpu && dtype && *dtype != DType::kF32) {
    return unimplemented("dtype " + config_.dtype +
                         ": the CPU path computes in f32 (weights are upcast at load); set dtype: auto or f32, "
                         "or device: cuda");
  }
  ASSIGN_OR_RETURN(models::ModelSummary summary, models::inspect_model_dir(dir));
  architecture_ = summary.architecture;

  // The quota, first from the headers alone (refuses before reading any weight), then exactly.
  const int64_t quota = config_.memory_quota_mb * (int64_t{1} << 20);
  if (quota > 0 && summary.bytes_in_memory * instances > quota) {
    return resource_exhausted("memory quota: " + std::to_string(instances) + " instance(s) need at least " +
                              mib(summary.bytes_in_memory * instances) + " of weights but memory_quota_mb is " +
                              std::to_string(config_.memory_quota_mb));
  }
  engine::ExecutorOptions options;
  options.threads = config_.threads;
  options.batch_size_max = config_.max_batch_size;
  options.dtype = dtype;
  options.tp_collective = config_.tp_collective;
  options.batch_buckets.assign(config_.batch_buckets.begin(), config_.batch_buckets.end());
  auto ops = engine::find_family(family_);
  if (!ops.ok()) return ops.status().with_context(dir);
  family_ops_ = *ops;
  if ((config_.tensor_parallel > 1 || config_.pipeline_parallel > 1) && any_cpu) {
    return invalid_argument(dir +
                            "/mmserve.yaml: tensor_parallel / pipeline_parallel run on GPUs (device cuda), "
                            "not on the CPU");
  }
  engine::PreparerOptions prepare;
  prepare.model = name_;
  prepare.max_image_pixels = context_.max_image_pixels;
  prepare.audio_seconds_max = config_.audio_seconds_max;
  prepare.audio_bytes_max = config_.audio_bytes_max;
  prepare.qos = context_.qos;
  for (int i = 0; i < instances; ++i) {
    options.device = devices[static_cast<size_t>(i)];
    // A GPU group is a tensor-parallel group or the pipeline's stages.
    const std::vector<int>& group = replicas_[static_cast<size_t>(i)]->tp_group;
    options.tp_devices.clear();
    options.pipeline_devices.clear();
    (config_.pipeline_parallel > 1 ? options.pipeline_devices : options.tp_devices) = group;
    auto created = family_ops_->create_executor(dir, options, config_.family_options);
    if (!created.ok()) return created.status().with_context(dir);
    std::unique_ptr<engine::Executor> executor = std::move(*created);
    if (i > 0) description_ += "; ";
    description_ += "replica " + std::to_string(i) + ": " + executor->describe();
    if (i == 0) {
      // What the executor holds: weights + the activations of its largest chunk (+ graphs, caches on cuda).
      memory_bytes_ = executor->memory_bytes() * instances;
      if (quota > 0 && memory_bytes_ > quota) {
        return resource_exhausted("memory quota: " + std::to_string(instances) + " instance(s) need " +
                                  mib(memory_bytes_) + " (weights + activations for max_batch_size " +
                                  std::to_string(config_.max_batch_size) + ") but memory_quota_mb is " +
                                  std::to_string(config_.memory_quota_mb));
      }
      info_ = executor->info();
      metrics_.set_family(info_);
      ASSIGN_OR_RETURN(preparer_, family_ops_->create_preparer(dir, *executor, prepare));
    }
    RETURN_IF_ERROR(executor->warm());
    publish_caches(*executor, *replicas_[static_cast<size_t>(i)]);
    executors_.push_back(std::move(executor));
  }
  return ok_status();
}

Status ModelRuntime::load_adapter(const std::string& name, const std::string& dir) {
  if (executors_.empty()) return failed_precondition("model '" + name_ + "' has no instances");
  if (!executors_.front()->adapters_per_instance()) return executors_.front()->load_adapter(name, dir);
  for (size_t i = 0; i < executors_.size(); ++i) {  // each instance its own copy; all or none
    const Status loaded = executors_[i]->load_adapter(name, dir);
    if (loaded.ok()) continue;
    for (size_t j = 0; j < i; ++j) (void)executors_[j]->unload_adapter(name);
    return executors_.size() > 1 ? loaded.with_context("instance " + std::to_string(i)) : loaded;
  }
  return ok_status();
}

Status ModelRuntime::unload_adapter(const std::string& name, bool fail_running) {
  if (executors_.empty()) return failed_precondition("model '" + name_ + "' has no instances");
  if (!executors_.front()->adapters_per_instance()) return executors_.front()->unload_adapter(name, fail_running);
  Status first;
  for (const auto& executor : executors_) {
    const Status unloaded = executor->unload_adapter(name, fail_running);
    if (!unloaded.ok() && first.ok()) first = unloaded;
  }
  return first;
}

std::vector<engine::AdapterInfo> ModelRuntime::adapter_list() const {
  if (executors_.empty()) return {};
  std::vector<engine::AdapterInfo> list = executors_.front()->adapter_list();
  if (!executors_.front()->adapters_per_instance()) return list;
  // Each instance counts the requests it ran under its copy: the registry reports their sum.
  for (size_t i = 1; i < executors_.size(); ++i) {
    for (const engine::AdapterInfo& other : executors_[i]->adapter_list()) {
      for (engine::AdapterInfo& info : list) {
        if (info.name == other.name) info.requests += other.requests;
      }
    }
  }
  return list;
}

std::string ModelRuntime::first_device() const {
  return replicas_.empty() ? std::string("cpu") : replicas_.front()->label;
}

ModelMetadata ModelRuntime::metadata() const {
  ModelMetadata m;
  m.name = name_;
  m.versions = {"1"};
  m.platform = info_.platform;
  m.inputs = info_.inputs;
  m.outputs = info_.outputs;
  m.embedding_dim = info_.embedding_dim;
  m.image_size = info_.image_size;
  m.max_text_tokens = info_.max_text_tokens;
  m.replicas = replicas();
  return m;
}

void ModelRuntime::reject(RejectReason reason, const Status& status, const Completion& done) {
  metrics_.reject(reason);
  metrics_.count(outcome_of(status));
  done(status);
}

void ModelRuntime::submit(RequestSpec spec, Completion done, Clock::time_point submitted) {
  auto refuse = [&](const Status& status) {
    metrics_.count(outcome_of(status));
    done(status);
  };
  // A request's params may carry its whole prompt (a decoder's token ids or chat messages): its family's
  // preparer checks what it needs.
  if (spec.inputs.empty() && spec.params == nullptr) return refuse(invalid_argument("the request has no inputs"));
  const int priority = spec.options.priority == 0 ? config_.default_priority : spec.options.priority;
  if (priority < 1 || priority > config_.priority_levels) {
    return refuse(invalid_argument("priority " + std::to_string(spec.options.priority) + " is outside 1.." +
                                   std::to_string(config_.priority_levels) + " for model " + name_));
  }
  auto request = std::make_shared<PendingRequest>();
  request->priority = priority;
  request->submitted = submitted;
  request->cancelled = std::move(spec.cancelled);
  request->deadline = spec.options.deadline;
  if (!request->deadline && config_.default_timeout_ms > 0) {
    request->deadline = submitted + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::milli>(config_.default_timeout_ms));
  }
  if (request->deadline && submitted >= *request->deadline) {
    return refuse(Status(StatusCode::kDeadlineExceeded, "the request's deadline had passed when it arrived"));
  }
  Status admitted;
  RejectReason why = RejectReason::kNotReady;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopping_) {
      admitted = Status(StatusCode::kUnavailable, "model " + name_ + " is unloading");
    } else if (!refusal_.ok()) {
      admitted = refusal_;
      why = refusal_reason_;
    } else {
      admitted = queue_.reserve();
      if (admitted.code() == StatusCode::kResourceExhausted) why = RejectReason::kQueueFull;
    }
    if (admitted.ok()) {
      ++inflight_;
      ++preprocessing_;
      metrics_.inflight().set(static_cast<double>(inflight_));
    }
  }
  if (!admitted.ok()) return reject(why, admitted, done);
  request->done = std::move(done);
  request->params = std::move(spec.params);
  // Only media decoding goes to the (priority-blind, FIFO) preprocessing pool. Texts, tensors and pixel values
  // cost microseconds, so they are prepared right here: a high-priority text never waits behind a flood of
  // image decodes.
  if (!preparer_->decodes_media(spec.inputs)) {
    preprocess(request, spec.inputs);
    return;
  }
  auto task = [self = shared_from_this(), request, inputs = std::move(spec.inputs)]() mutable {
    self->preprocess(request, inputs);
  };
  // Under qos the pool runs better classes first and keeps workers for class 1 (preprocess_pool.h).
  const int pool_priority = context_.policy == SchedulingPolicy::kQos ? priority : 1;
  if (!context_.preprocess_pool->try_submit(pool_priority, std::move(task))) {
    queue_.release();
    metrics_.reject(RejectReason::kPreprocessFull);
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      --preprocessing_;
    }
    finish(request, resource_exhausted("the preprocessing queue is full; retry later"));
  }
}

void ModelRuntime::preprocess(const PendingRequestPtr& request, std::vector<InputItem>& inputs) {
  const Clock::time_point start = Clock::now();
  Status status;
  if (request->deadline && start >= *request->deadline) {
    status = Status(StatusCode::kDeadlineExceeded, "the deadline passed before preprocessing started");
  } else if (request->cancelled && request->cancelled()) {
    status = Status(StatusCode::kCancelled, "the client cancelled the request before preprocessing");
  } else {
    StatusOr<engine::Prepared> prepared = preparer_->prepare(inputs, request->params.get());
    if (prepared.ok()) {
      request->input = std::move(prepared->input);
      request->items = prepared->items;
      request->score = prepared->score;
      request->tokens = prepared->tokens;
      request->retriable = prepared->retriable;
    } else {
      status = prepared.status();
    }
    request->times.preprocess_ms = ms_between(start, Clock::now());
    request->preprocessed = true;
  }
  if (status.ok()) {
    status = queue_.push_reserved(request);  // on failure the queue released the slot
  } else {
    queue_.release();
  }
  if (!status.ok()) finish(request, status);
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (--preprocessing_ == 0) idle_.notify_all();
}

void ModelRuntime::engine_loop(engine::Executor* executor, Replica* replica) {
  set_current_thread_name("mm-eng" + std::to_string(replica->index) + "-" + name_);  // top -H: mm-eng0-clip-gp
  BatchLimits limits;
  limits.items_max = config_.max_batch_size;
  limits.delay_max = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(config_.max_queue_delay_ms));
  // A generating family batches continuously: an idle engine starts a request at once and later ones join the
  // running batch at its next step, so waiting to fill a batch would only add to the time to first token.
  if (executor->info().generates) limits.delay_max = Clock::duration::zero();
  // Pull-based: this thread asks for a batch only when its replica is free, so work goes to whichever
  // replica frees up first, and a replica that left the rotation simply stops asking.
  while (in_rotation(*replica)) {
    std::vector<PendingRequestPtr> batch = queue_.pop_batch(limits);
    if (batch.empty()) return;  // closed
    run_batch(*executor, *replica, batch, /*preemptible=*/true);
  }
}

void ModelRuntime::run_batch(engine::Executor& executor, Replica& replica, const std::vector<PendingRequestPtr>& first,
                             bool preemptible) {
  const Clock::time_point picked = Clock::now();
  // The batch grows while it runs when the family admits requests between its steps (continuous batching).
  std::vector<PendingRequestPtr> batch = first;
  // The best own priority in this batch (one under qos): queued requests of a strictly better own priority may
  // run between chunks. Not the aged class: aging decides when queued work starts (request_queue.h), and a
  // flood's batch that aged to class 1 must stay preemptible by a genuinely urgent request.
  int best_class = std::numeric_limits<int>::max();
  for (const PendingRequestPtr& r : batch) best_class = std::min(best_class, r->priority);
  engine::BatchHooks hooks;
  if (preemptible && context_.policy == SchedulingPolicy::kQos && config_.preempt_chunk_ms > 0 && best_class > 1) {
    hooks.chunk_budget_ms = config_.preempt_chunk_ms;
    hooks.between_chunks = [&] {
      BatchLimits limits;
      limits.items_max = config_.max_batch_size;
      if (!in_rotation(replica)) return;  // a nested batch found the device broken: take nothing more
      std::vector<PendingRequestPtr> urgent = queue_.pop_urgent(best_class, limits);
      if (!urgent.empty()) run_batch(executor, replica, urgent, /*preemptible=*/false);
    };
  }
  for (const PendingRequestPtr& r : batch) {
    r->dequeued = true;
    r->times.queue_ms = std::max(0.0, ms_between(r->submitted, picked) - r->times.preprocess_ms);
  }
  // Another replica may retry this batch after a device fault: the executor must leave the inputs intact.
  hooks.keep_inputs = healthy_replicas() > 1;
  std::vector<std::optional<StatusOr<std::shared_ptr<const engine::ModelOutput>>>> results(batch.size());
  std::vector<double> compute_ms(batch.size(), 0.0);
  std::vector<bool> finished(batch.size(), false);
  if (preemptible && executor.info().generates) {
    // A decoder batch takes the requests queued meanwhile between its steps, up to max_batch_size live ones; they
    // are this batch's requests from then on (the same finish, fault and retry handling).
    hooks.admit = [&](int64_t max_items) {
      std::vector<engine::BatchItem> items;
      if (max_items <= 0 || !in_rotation(replica)) return items;
      BatchLimits limits;
      limits.items_max = std::min<int64_t>(max_items, config_.max_batch_size);
      const Clock::time_point now = Clock::now();
      for (PendingRequestPtr& r : queue_.pop_ready(limits)) {
        r->dequeued = true;
        r->times.queue_ms = std::max(0.0, ms_between(r->submitted, now) - r->times.preprocess_ms);
        engine::BatchItem item;
        item.input = r->input.get();
        item.mutable_input = r->input.get();
        item.cancelled = r->cancelled;
        items.push_back(std::move(item));
        batch.push_back(std::move(r));
        results.emplace_back();
        compute_ms.push_back(0.0);
        finished.push_back(false);
      }
      return items;
    };
  }
  std::optional<Status> fault = take_injected_fault(replica);
  // A request finishes as soon as its executor says so (text-only CLIP requests before the image tower), unless
  // it failed with kInternal: that may be a device fault, known only when the batch returns.
  auto complete = [&](size_t i, StatusOr<std::shared_ptr<const engine::ModelOutput>> output, double ms) {
    const PendingRequestPtr& r = batch[i];
    if (!output.ok() && is_device_fault(output.status())) {
      results[i] = std::move(output);
      compute_ms[i] = ms;
      return;
    }
    finished[i] = true;
    r->times.compute_ms = ms;
    metrics_.compute_seconds(r->priority).observe(ms / 1000.0);
    StatusOr<ResponseData> response = Status(StatusCode::kInternal, "no output");
    if (output.ok()) {
      ResponseData data;
      data.output = std::move(*output);
      data.tokens = r->tokens;
      data.batch_size = static_cast<int>(data.output ? data.output->batch_size : 0);
      response = std::move(data);
    } else {
      response = output.status();
    }
    if (response.ok() && r->cancelled && r->cancelled()) {
      response = Status(StatusCode::kCancelled, "the client cancelled the request while it ran; output discarded");
    }
    if (response.ok() && metrics_.audio_seconds() && response->output) {
      metrics_.audio_seconds()->inc(response->output->audio_seconds());
    }
    if (response.ok() && response->output) {
      metrics_.record_generation(*response->output, r->tokens, r->times.preprocess_ms + r->times.queue_ms);
    }
    finish(r, std::move(response));
  };
  const Clock::time_point start = Clock::now();
  engine::BatchStats stats;
  if (fault) {  // injected (test seam): the batch fails as a broken device would fail it, without running
    for (size_t i = 0; i < batch.size(); ++i) results[i] = StatusOr<std::shared_ptr<const engine::ModelOutput>>(*fault);
  } else {
    std::vector<engine::BatchItem> items(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      items[i].input = batch[i]->input.get();
      items[i].mutable_input = batch[i]->input.get();
      items[i].cancelled = batch[i]->cancelled;
    }
    hooks.finish = complete;
    hooks.progress = [&] { publish_caches(executor, replica); };
    stats = executor.run(items, hooks);
    fault = stats.device_fault;
    publish_caches(executor, replica);
  }
  for (int slot = 0; slot < engine::kBatchSlots; ++slot) {
    Histogram* histogram = metrics_.slot_batch_size(slot);
    const int64_t n = stats.slot_items[static_cast<size_t>(slot)];
    if (histogram != nullptr && n > 0) histogram->observe(static_cast<double>(bucket_for(n, config_.batch_buckets)));
  }
  // An urgent batch run between this batch's chunks (preemptible == false) is inside the outer batch's time.
  count_batch(replica, batch.size(), preemptible ? std::chrono::duration<double>(Clock::now() - start).count() : 0.0);
  std::vector<size_t> faulted;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (finished[i]) continue;
    if (!results[i])
      results[i] = StatusOr<std::shared_ptr<const engine::ModelOutput>>(
          internal_error("the executor did not finish this request"));
    if (fault) {
      faulted.push_back(i);
      continue;
    }
    // kInternal on some requests of a batch whose device is fine: that request's own failure.
    finished[i] = true;
    batch[i]->times.compute_ms = compute_ms[i];
    finish(batch[i], results[i]->status());
  }
  if (faulted.empty()) return;
  take_out_of_rotation(replica, *fault);
  for (size_t i : faulted) retry_or_fail(batch[i], *fault, replica);  // their inputs were kept
}

void ModelRuntime::publish_caches(const engine::Executor& executor, Replica& replica) {
  std::optional<engine::SequenceStats> sequences = executor.sequences();
  metrics_.add_sequence_delta(replica.sequences, sequences, static_cast<int>(replicas_.size()));
  replica.sequences = sequences;
  if (std::optional<engine::RouterStats> router = executor.router()) metrics_.add_router(*router);
  std::optional<engine::ExpertLoadStats> load = executor.expert_load();
  if (load) {
    metrics_.add_expert_load_delta(replica.expert_load, *load);
    replica.expert_load = std::move(load);
  }
  std::vector<engine::CacheStats> now = executor.caches();
  if (now.empty() && replica.caches.empty()) return;
  metrics_.add_cache_delta(replica.caches, now);
  replica.caches = std::move(now);
}

void ModelRuntime::on_dropped(const PendingRequestPtr& request, const Status& status) {
  request->dequeued = true;
  request->times.queue_ms = std::max(0.0, ms_between(request->submitted, Clock::now()) - request->times.preprocess_ms);
  finish(request, status);
}

void ModelRuntime::finish(const PendingRequestPtr& request, StatusOr<ResponseData> result) {
  PendingRequest& r = *request;
  r.times.total_ms = ms_between(r.submitted, Clock::now());
  metrics_.count(outcome_of(result.ok() ? ok_status() : result.status()));
  if (r.preprocessed) metrics_.preprocess_seconds(r.priority).observe(r.times.preprocess_ms / 1000.0);
  if (r.dequeued) metrics_.queue_seconds(r.priority).observe(r.times.queue_ms / 1000.0);
  metrics_.request_seconds(r.priority).observe(r.times.total_ms / 1000.0);
  if (result.ok()) result->times = r.times;
  Completion done = std::move(r.done);
  r.done = nullptr;
  if (done) done(std::move(result));
  std::lock_guard<std::mutex> lock(state_mutex_);
  --inflight_;
  metrics_.inflight().set(static_cast<double>(inflight_));
  if (inflight_ == 0) idle_.notify_all();
}

void ModelRuntime::stop_admitting(const Status& reason, RejectReason why) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  refusal_ = reason.ok() ? Status(StatusCode::kUnavailable, "model " + name_ + " is not admitting requests") : reason;
  refusal_reason_ = why;
}

void ModelRuntime::stop(const Status& reason) {
  std::lock_guard<std::mutex> stop_lock(stop_mutex_);
  if (stopped_) return;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopping_ = true;
  }
  queue_.close(reason);
  {
    std::unique_lock<std::mutex> lock(state_mutex_);
    idle_.wait(lock, [this] { return preprocessing_ == 0; });
  }
  for (std::thread& engine : engines_) engine.join();
  engines_.clear();
  executors_.clear();  // frees the weights and arenas now, even if a pool task still holds a reference
  stopped_ = true;
}

bool ModelRuntime::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(state_mutex_);
  return idle_.wait_until(lock, deadline, [this] { return inflight_ == 0; });
}

}  // namespace mmserve::serving
