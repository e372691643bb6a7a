// InferenceServer (see inference_server.h): the thin front of the serving layer. It owns the metrics
// registry, the bounded preprocessing pool shared by all models, and the model repository; submit() routes a
// request to its model's runtime (model_runtime.cpp), which does the rest. start() loads every model it
// should (a model that fails to load is FAILED with its reason; the server stays up and not ready) and
// returns an error only when the repository cannot be read or a model named in models_to_load does not exist.
// Tests: tests/unit/serving/inference_server_test.cpp.
#include "serving/inference_server.h"

#include <atomic>
#include <future>
#include <map>
#include <mutex>

#include "serving/preprocess_pool.h"
#include "serving/model_repository.h"
#include "serving/serving_metrics.h"

namespace mmserve::serving {

const char* model_state_name(ModelState state) {
  switch (state) {
    case ModelState::kUnavailable: return "UNAVAILABLE";
    case ModelState::kLoading: return "LOADING";
    case ModelState::kReady: return "READY";
    case ModelState::kUnloading: return "UNLOADING";
    case ModelState::kFailed: return "FAILED";
  }
  return "UNAVAILABLE";
}

namespace {

class InferenceServerImpl final : public InferenceServer {
 public:
  explicit InferenceServerImpl(ServerConfig config)
      : config_(std::move(config)),
        metrics_(registry_),
        pool_(static_cast<size_t>(config_.preprocess_threads), static_cast<size_t>(config_.preprocess_queue),
              /*reserved=*/-1, config_.policy == SchedulingPolicy::kQos ? config_.background_nice : 0) {}

  Status open_repository() {
    RuntimeContext context;
    context.preprocess_pool = &pool_;
    context.metrics = &metrics_;
    context.policy = config_.policy;
    context.aging_ms_per_level = config_.aging_ms_per_level;
    context.max_image_pixels = config_.max_image_pixels;
    context.qos = config_.qos;
    context.device_override = config_.device_override;
    ASSIGN_OR_RETURN(repository_, ModelRepository::open(config_.model_repository, context));
    return ok_status();
  }

  ~InferenceServerImpl() override { repository_.reset(); }  // stop the models before the pool goes

  Status start() override {
    std::vector<std::string> names = config_.models_to_load;
    const std::vector<ModelStatus> all = repository_->scan();
    if (names.empty()) {
      for (const ModelStatus& m : all) names.push_back(m.name);
    }
    Status missing;
    for (const std::string& name : names) {
      Status loaded = repository_->load(name);
      // A model that exists but fails to load is FAILED (see models()); only a bad name fails start().
      if (!loaded.ok() && missing.ok() && !repository_->status(name).ok()) missing = loaded;
    }
    for (const ServerConfig::LoraModuleSpec& m : config_.lora_modules) {
      RETURN_IF_ERROR(load_adapter(m.model, m.name, m.dir).with_context("--lora-modules " + m.name));
    }
    started_ = true;
    return missing;
  }

  bool live() const override { return true; }
  bool ready() const override {
    if (!started_ || draining_ || !repository_->wanted_models_ready()) return false;
    // A loaded model whose replicas all failed serves nothing (model_runtime_replicas.cpp).
    for (const auto& runtime : repository_->loaded_runtimes()) {
      if (runtime->healthy_replicas() == 0) return false;
    }
    return true;
  }
  std::vector<ModelStatus> models() const override {
    std::vector<ModelStatus> all = repository_->scan();
    for (ModelStatus& status : all) with_replica_health(status);
    return all;
  }
  StatusOr<ModelStatus> model_status(const std::string& name) const override {
    ASSIGN_OR_RETURN(ModelStatus status, repository_->status(name));
    with_replica_health(status);
    return status;
  }

  StatusOr<ModelMetadata> model_metadata(const std::string& name) const override {
    ASSIGN_OR_RETURN(auto runtime, repository_->ready_runtime(name));
    return runtime->metadata();
  }

  Status load_model(const std::string& name) override {
    if (draining_) return Status(StatusCode::kUnavailable, "the server is draining");
    return repository_->load(name);
  }
  Status unload_model(const std::string& name) override { return repository_->unload(name); }

  Status load_adapter(const std::string& model, const std::string& name, const std::string& dir) override {
    if (name.empty() || name.size() > 128) return invalid_argument("an adapter's name must have 1..128 characters");
    if (repository_->status(name).ok()) {
      return Status(StatusCode::kAlreadyExists, "'" + name + "' names a model; an adapter needs a name of its own");
    }
    std::vector<std::shared_ptr<ModelRuntime>> candidates;
    if (!model.empty()) {
      ASSIGN_OR_RETURN(std::shared_ptr<ModelRuntime> runtime, repository_->ready_runtime(model));
      candidates.push_back(std::move(runtime));
    } else {  // the loaded models that take adapters: the one whose modules the adapter's are
      for (const auto& r : repository_->loaded_runtimes()) {
        if (r->takes_adapters()) candidates.push_back(r);
      }
      if (candidates.empty()) return Status(StatusCode::kNotFound, "adapter '" + name + "': no loaded model takes adapters");
    }
    if (std::optional<std::string> parent = resolve_adapter(name)) {
      return Status(StatusCode::kAlreadyExists, "adapter '" + name + "' is already loaded (on '" + *parent + "')");
    }
    std::lock_guard<std::mutex> lock(adapters_mutex_);  // one load at a time: names stay unique
    if (adapters_.count(name) > 0) {
      return Status(StatusCode::kAlreadyExists, "adapter '" + name + "' is already loaded (on '" + adapters_[name] + "')");
    }
    if (candidates.size() == 1) {
      RETURN_IF_ERROR(candidates.front()->load_adapter(name, dir));
      adapters_[name] = candidates.front()->name();
      return ok_status();
    }
    // Several models take adapters and none was named: an adapter's modules fit one family's (a CLIP adapter is
    // refused by a decoder at its first tensor, and the other way round), so it goes where it loads; where it loads on
    // more than one (two decoders of one shape), the base must be named.
    std::vector<std::shared_ptr<ModelRuntime>> loaded;
    Status first_error;
    for (const auto& r : candidates) {
      const Status status = r->load_adapter(name, dir);
      if (status.ok()) {
        loaded.push_back(r);
      } else if (first_error.ok()) {
        first_error = status.with_context("on '" + r->name() + "'");
      }
    }
    if (loaded.size() == 1) {
      adapters_[name] = loaded.front()->name();
      return ok_status();
    }
    for (const auto& r : loaded) (void)r->unload_adapter(name);
    if (loaded.empty()) return first_error;
    return invalid_argument("adapter '" + name + "': several loaded models take adapters ('" + loaded[0]->name() +
                            "', '" + loaded[1]->name() + "') and it fits both; name the base model");
  }

  Status unload_adapter(const std::string& name, bool fail_running) override {
    std::lock_guard<std::mutex> lock(adapters_mutex_);
    const auto it = adapters_.find(name);
    if (it == adapters_.end()) return Status(StatusCode::kNotFound, "no adapter '" + name.substr(0, 128) + "' is loaded");
    auto runtime = repository_->ready_runtime(it->second);
    if (runtime.ok()) RETURN_IF_ERROR((*runtime)->unload_adapter(name, fail_running));
    adapters_.erase(it);
    return ok_status();
  }

  std::vector<AdapterStatus> adapters() const override {
    std::vector<AdapterStatus> out;
    for (const auto& runtime : repository_->loaded_runtimes()) {
      for (engine::AdapterInfo& info : runtime->adapter_list()) {
        out.push_back({runtime->name(), std::move(info), runtime->first_device()});
      }
    }
    return out;
  }

  std::optional<std::string> resolve_adapter(const std::string& name) const override {
    if (repository_->status(name).ok()) return std::nullopt;  // a model: the common case pays no scan
    {
      std::lock_guard<std::mutex> lock(adapters_mutex_);
      const auto it = adapters_.find(name);
      if (it != adapters_.end()) return it->second;
    }
    // Adapters a model loaded itself (its mmserve.yaml `adapters`) are addressable by name too.
    for (const auto& runtime : repository_->loaded_runtimes()) {
      for (const engine::AdapterInfo& info : runtime->adapter_list()) {
        if (info.name == name) return runtime->name();
      }
    }
    return std::nullopt;
  }

  bool allow_runtime_lora_updating() const override { return config_.allow_runtime_lora_updating; }

  void submit(RequestSpec spec, Completion done) override {
    const Clock::time_point submitted = Clock::now();
    if (!done) done = [](const StatusOr<ResponseData>&) {};
    auto runtime = repository_->ready_runtime(spec.model);
    if (!runtime.ok()) {
      // Unknown names are not counted: their label values would come from users.
      if (runtime.status().code() != StatusCode::kNotFound) count_rejection(spec.model, RejectReason::kNotReady);
      done(runtime.status());
      return;
    }
    if (draining_) {
      count_rejection(spec.model, RejectReason::kDraining);
      done(Status(StatusCode::kUnavailable, "the server is draining"));
      return;
    }
    (*runtime)->submit(std::move(spec), std::move(done), submitted);
  }

  StatusOr<ResponseData> infer(RequestSpec spec) override {
    auto promise = std::make_shared<std::promise<StatusOr<ResponseData>>>();
    std::future<StatusOr<ResponseData>> result = promise->get_future();
    submit(std::move(spec), [promise](StatusOr<ResponseData> r) { promise->set_value(std::move(r)); });
    return result.get();
  }

  bool drain(std::chrono::milliseconds timeout) override {
    draining_ = true;
    const Clock::time_point deadline = Clock::now() + timeout;
    const std::vector<std::shared_ptr<ModelRuntime>> runtimes = repository_->loaded_runtimes();
    // Refused under each runtime's admission lock, so a submit() racing with the flag above cannot slip in
    // after its runtime was seen idle.
    for (const auto& runtime : runtimes) {
      runtime->stop_admitting(Status(StatusCode::kUnavailable, "the server is draining"), RejectReason::kDraining);
    }
    bool drained = true;
    for (const auto& runtime : runtimes) drained = runtime->wait_idle(deadline) && drained;
    return drained;
  }

  MetricsRegistry& metrics() override { return registry_; }

 private:
  // The repository knows load states; the runtime knows whether any replica is left. A READY model with none
  // is reported UNAVAILABLE with the faults, so /v2/models/{m}/ready and the repository index say 503 / why.
  void with_replica_health(ModelStatus& status) const {
    if (status.state != ModelState::kReady) return;
    auto runtime = repository_->ready_runtime(status.name);
    if (!runtime.ok() || (*runtime)->healthy_replicas() > 0) return;
    status.state = ModelState::kUnavailable;
    status.reason = "no healthy replica:";
    for (const ReplicaInfo& r : (*runtime)->replicas()) {
      status.reason += " replica " + std::to_string(r.index) + " (" + r.device + "): " + r.fault + ";";
    }
    status.reason.pop_back();
  }

  void count_rejection(const std::string& model, RejectReason reason) {
    metrics_.rejected.with({model, reject_reason_name(reason)}).inc();
    metrics_.requests.with({model, outcome_name(Outcome::kRejected)}).inc();
  }

  const ServerConfig config_;
  MetricsRegistry registry_;
  ServingMetrics metrics_;
  PreprocessPool pool_;
  std::unique_ptr<ModelRepository> repository_;  // declared after pool_: destroyed (models stopped) first
  std::atomic<bool> started_{false};
  std::atomic<bool> draining_{false};
  mutable std::mutex adapters_mutex_;
  std::map<std::string, std::string> adapters_;  // adapter name -> its base model
};

}  // namespace

StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::create(const ServerConfig& config) {
  RETURN_IF_ERROR(validate_server_config(config, "server config"));
  auto server = std::make_unique<InferenceServerImpl>(config);
  RETURN_IF_ERROR(server->open_repository());
  return std::unique_ptr<InferenceServer>(std::move(server));
}

}  // namespace mmserve::serving
