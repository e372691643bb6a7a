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
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/metrics.h"
#include "serving/model_config.h"
#include "serving/request.h"

namespace mmserve::serving {

enum class SchedulingPolicy { kFifo, kQos };

struct ServerConfig {
  std::string model_repository;            // each subdirectory is a model named after it
  std::vector<std::string> models_to_load; // empty = all subdirectories at start-up
  SchedulingPolicy policy = SchedulingPolicy::kQos;
  double aging_ms_per_level = 500;         // a waiting request gains one priority level per this long
  int preprocess_threads = 0;              // 0 = hardware concurrency
  int preprocess_queue = 1024;             // bounded: beyond it requests get 429
  int64_t max_image_pixels = 64LL * 1024 * 1024;
  QosWeights qos;
  std::string device_override;  // `serve --device`: replaces every model's `device` ("" = each its own)
};

// The server-wide YAML (`mmserve serve --config FILE`); every key is optional, unknown keys and wrong types
// are kInvalidArgument naming the file and the key:
//   model_repository: /models
//   models_to_load: [clip-a, clip-b]   # default: every subdirectory
//   policy: qos                        # fifo | qos
//   aging_ms_per_level: 500            # 0 = no aging
//   preprocess_threads: 0
//   preprocess_queue: 1024
//   max_image_pixels: 67108864
//   qos: {image: 0.4, audio: 0.35, text: 0.25, image_tokens_max: 4096, audio_seconds_max: 60, text_chars_max: 512}
StatusOr<ServerConfig> parse_server_config(const std::string& yaml_text, const std::string& label);
StatusOr<ServerConfig> load_server_config(const std::string& path);
// The value checks both apply (also run by InferenceServer::create on a config built in code).
Status validate_server_config(const ServerConfig& config, const std::string& label);

enum class ModelState { kUnavailable, kLoading, kReady, kUnloading, kFailed };
const char* model_state_name(ModelState state);  // "UNAVAILABLE", "LOADING", "READY", ...

struct ModelStatus {
  std::string name;
  std::string version = "1";
  ModelState state = ModelState::kUnavailable;
  std::string reason;           // why it failed or is unavailable
  std::string architecture;     // "CLIPModel"
  double load_seconds = 0;
  int64_t memory_bytes = 0;     // weights + arenas
};

struct TensorSpec {
  std::string name;
  std::string datatype;         // KServe: "BYTES", "FP32"
  std::vector<int64_t> shape;   // -1 for variable
};

// One replica (instance) of a model: where it runs and whether it is in rotation.
struct ReplicaInfo {
  int index = 0;
  std::string device;  // "cpu", "cuda:1"
  bool healthy = true;
  std::string fault;   // why it was taken out of rotation (empty while healthy)
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;         // "mmserve_clip", "mmserve_whisper"
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  int64_t embedding_dim = 0;
  int64_t image_size = 0;
  int64_t max_text_tokens = 0;
  std::vector<ReplicaInfo> replicas;  // in replica order
};

class InferenceServer {
 public:
  static StatusOr<std::unique_ptr<InferenceServer>> create(const ServerConfig& config);
  virtual ~InferenceServer() = default;

  // Loads the configured models (blocking; each is warmed with one batch before it is READY).
  virtual Status start() = 0;
  virtual bool live() const = 0;
  // Every model that should be loaded is READY and has at least one healthy replica.
  virtual bool ready() const = 0;
  virtual std::vector<ModelStatus> models() const = 0;   // every subdirectory of the repository
  // kNotFound if unknown. A READY model whose replicas all failed reports UNAVAILABLE with the faults.
  virtual StatusOr<ModelStatus> model_status(const std::string& name) const = 0;
  virtual StatusOr<ModelMetadata> model_metadata(const std::string& name) const = 0;
  // Names must be plain subdirectory names of the repository (no '/', '..'): kInvalidArgument otherwise.
  virtual Status load_model(const std::string& name) = 0;
  virtual Status unload_model(const std::string& name) = 0;

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
