// InferenceServer: the serving layer's one entry point, which the HTTP api (and tests) are clients of.
//
// It owns the model repository (one model per subdirectory, loaded with its mmserve.yaml), and per model:
// a bounded request queue ordered by the scheduling policy (fifo, or qos = priority class, then SPEC 3.2
// score, then arrival, with aging), a preprocessing pool (decode, resize, tokenize) bounded in size, and one
// engine thread per instance that forms batches (up to max_batch_size or max_queue_delay, separately for
// text and image inputs; the batch size is accounted to the next bucket, while on the CPU the compute is not
// padded: padding only pays for CUDA graphs) and runs the executor. All locking of the queue lives in
// request_queue.cpp. Metrics go to the registry it owns.
// Tests: tests/unit/serving/*, tests/e2e/server_*.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/metrics.h"
#include "serving/model_config.h"
#include "serving/request.h"
#include "serving/server_types.h"

namespace mmserve::serving {

class InferenceServer {
 public:
  static StatusOr<std::unique_ptr<InferenceServer>> create(const ServerConfig& config);
  virtual ~InferenceServer() = default;

  // Loads the configured models (blocking; each is warmed with one batch before it is READY).
  virtual Status start() = 0;
  virtual bool live() const = 0;
  // Every model that should be loaded is READY and has at least one healthy replica.
  virtual bool ready() const = 0;
  virtual std::vector<ModelStatus> models() const = 0;  // every subdirectory of the repository
  // kNotFound if unknown. A READY model whose replicas all failed reports UNAVAILABLE with the faults.
  virtual StatusOr<ModelStatus> model_status(const std::string& name) const = 0;
  virtual StatusOr<ModelMetadata> model_metadata(const std::string& name) const = 0;
  // Names must be plain subdirectory names of the repository (no '/', '..'): kInvalidArgument otherwise.
  virtual Status load_model(const std::string& name) = 0;
  virtual Status unload_model(const std::string& name) = 0;
  // LoRA adapters (issue 16): names share the models' namespace; a request names an adapter where it names a model
  // (resolve_adapter gives its base). load: onto `model` ("" = the one loaded model that takes adapters);
  // kAlreadyExists for a name in use, kNotFound for an unknown model, the adapter's own errors. unload: kNotFound
  // for an unknown adapter; it returns at once and sequences under the adapter (running or queued) finish with it,
  // or with `fail_running` end with kNotFound ("adapter 'X' was unloaded while this request ran").
  virtual Status load_adapter(const std::string& model, const std::string& name, const std::string& dir) = 0;
  virtual Status unload_adapter(const std::string& name, bool fail_running) = 0;
  virtual std::vector<AdapterStatus> adapters() const = 0;
  virtual std::optional<std::string> resolve_adapter(const std::string& name) const = 0;
  virtual bool allow_runtime_lora_updating() const = 0;

  // Validates and enqueues; `done` runs exactly once. Immediate errors (unknown model -> kNotFound, model not
  // ready -> kUnavailable, queue full -> kResourceExhausted, bad input -> kInvalidArgument) also arrive
  // through `done`, on the calling thread.
  virtual void submit(RequestSpec spec, Completion done) = 0;
  // Blocking convenience over submit().
  virtual StatusOr<ResponseData> infer(RequestSpec spec) = 0;

  // Stops admitting (submit answers kUnavailable) and waits for queued and running requests, at most
  // `timeout`. Returns true when everything drained.
  virtual bool drain(std::chrono::milliseconds timeout) = 0;

  virtual MetricsRegistry& metrics() = 0;
};

}  // namespace mmserve::serving
