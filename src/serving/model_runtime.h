// ModelRuntime: one loaded model: its instances (a ClipExecutor or a WhisperExecutor each, owned by ONE engine
// thread that runs the dynamic batcher), its request queue, its preprocessor, and its metrics children.
//
// A request's way: submit() validates (inputs, priority), sets the deadline, reserves a queue slot (full:
// 429) and hands the request to the server's bounded preprocessing pool (full: 429); the pool thread decodes,
// tokenizes and scores it and pushes it into its slot; an engine thread pops a batch (RequestQueue decides
// which: policy, aging, max_batch_size, max_queue_delay_ms), runs it (clip_batch.cpp: both towers;
// whisper_batch.cpp: transcribe_batch), splits the results and completes each request. Every admitted request
// ends in finish(), which fills the phase times, records metrics and calls `done` exactly once.
//
// Whisper models (model_runtime_whisper.cpp) take one encoded audio file per request: it is decoded on the
// pool with the model's audio limits, the QoS score is the audio's duration term, and a batch is up to
// max_batch_size requests. Loading refuses a dtype other than auto/f32 on the CPU, and a model whose weights +
// arena for all instances exceed memory_quota_mb (kResourceExhausted); it warms every instance (CLIP: one text
// batch and one image batch; Whisper: one second of silence). stop() refuses new requests, fails queued ones
// with its reason, lets running batches finish and joins the engine threads.
// Tests: tests/unit/serving/inference_server_test.cpp, tests/unit/serving/whisper_serving_test.cpp.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "engine/clip_executor.h"
#include "engine/whisper_executor.h"
#include "models/registry.h"
#include "serving/audio_preprocessor.h"
#include "serving/inference_server.h"
#include "serving/model_config.h"
#include "serving/request_preprocessor.h"
#include "serving/request_queue.h"
#include "serving/serving_metrics.h"

namespace mmserve::serving {

// What a runtime borrows from its server (which outlives it).
struct RuntimeContext {
  ThreadPool* preprocess_pool = nullptr;
  ServingMetrics* metrics = nullptr;
  SchedulingPolicy policy = SchedulingPolicy::kQos;
  double aging_ms_per_level = 500;
  int64_t max_image_pixels = 64LL * 1024 * 1024;
  QosWeights qos;
  std::string device_override;  // non-empty: every model runs on this device, whatever its mmserve.yaml says
};

class ModelRuntime : public std::enable_shared_from_this<ModelRuntime> {
 public:
  // Loads, checks the quota, warms every instance and starts the engine threads. Errors are the model's
  // FAILED reason.
  static StatusOr<std::shared_ptr<ModelRuntime>> load(const std::string& name, const std::string& dir,
                                                      const ModelConfig& config, const RuntimeContext& context);
  ~ModelRuntime();
  ModelRuntime(const ModelRuntime&) = delete;
  ModelRuntime& operator=(const ModelRuntime&) = delete;

  // Admits the request or completes `done` on this thread with the reason it was refused.
  void submit(RequestSpec spec, Completion done, Clock::time_point submitted);
  // From now on submit() refuses with `reason` (counted as `why`); admitted requests still run (drain).
  void stop_admitting(const Status& reason, RejectReason why);
  // Refuses new requests, completes queued ones with `reason`, finishes running batches, joins. Idempotent.
  void stop(const Status& reason);
  // Waits until no admitted request is left (or the deadline); true when idle.
  bool wait_idle(Clock::time_point deadline);

  const std::string& name() const { return name_; }
  const ModelConfig& config() const { return config_; }
  const std::string& architecture() const { return architecture_; }
  ModelMetadata metadata() const;
  int64_t memory_bytes() const { return memory_bytes_; }
  double load_seconds() const { return load_seconds_; }
  // Device, dtype and memory breakdown of one instance (the executor's describe()), for the load log.
  const std::string& description() const { return description_; }

 private:
  ModelRuntime(std::string name, ModelConfig config, const RuntimeContext& context, models::Family family);
  Status load_instances(const std::string& dir);
  Status warm(engine::ClipExecutor& executor);
  void preprocess(const PendingRequestPtr& request, std::vector<InputItem>& inputs);
  void engine_loop(engine::ClipExecutor* executor);
  // Whisper (model_runtime_whisper.cpp).
  Status load_whisper_instances(const std::string& dir, const engine::ExecutorOptions& options, int64_t quota);
  void whisper_engine_loop(engine::WhisperExecutor* executor);
  void run_whisper(engine::WhisperExecutor& executor, const std::vector<PendingRequestPtr>& batch);
  ModelMetadata whisper_metadata() const;
  // `preemptible`: under qos, run the images in chunks and serve better-class arrivals between them.
  void run_batch(engine::ClipExecutor& executor, const std::vector<PendingRequestPtr>& batch, bool preemptible);
  void on_dropped(const PendingRequestPtr& request, const Status& status);
  // The one way an admitted request ends.
  void finish(const PendingRequestPtr& request, StatusOr<ResponseData> result);
  void reject(RejectReason reason, const Status& status, const Completion& done);

  const std::string name_;
  const ModelConfig config_;
  const RuntimeContext context_;
  const models::Family family_;
  ModelMetrics metrics_;
  std::string architecture_;
  int64_t embedding_dim_ = 0, image_size_ = 0, max_text_tokens_ = 0;
  int64_t memory_bytes_ = 0;
  std::string description_;
  double load_seconds_ = 0;
  std::unique_ptr<RequestPreprocessor> preprocessor_;
  std::vector<std::unique_ptr<engine::ClipExecutor>> executors_;             // each driven only by its engine thread
  std::vector<std::unique_ptr<engine::WhisperExecutor>> whisper_executors_;  // likewise (Whisper models)
  AudioPreprocessorOptions audio_options_;                                   // Whisper models
  std::vector<std::string> languages_;                                       // Whisper: the tokenizer's
  RequestQueue queue_;
  std::vector<std::thread> engines_;

  std::mutex state_mutex_;  // admission state and counters (the queue has its own lock)
  std::condition_variable idle_;
  bool stopping_ = false;
  Status refusal_;  // set by stop_admitting()
  RejectReason refusal_reason_ = RejectReason::kDraining;
  int64_t inflight_ = 0;       // admitted, not yet finished
  int64_t preprocessing_ = 0;  // admitted, not yet pushed into the queue (or failed)
  std::mutex stop_mutex_;      // serialises stop()
  bool stopped_ = false;
};

}  // namespace mmserve::serving
