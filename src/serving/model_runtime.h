// ModelRuntime: one loaded model of any family: its instances (engine::Executors, each owned by ONE engine
// thread that runs the dynamic batcher), its input preparation (engine::InputPreparer), its request queue and its
// metrics children. It never branches on the family: engine/families.h creates the executors and the preparer,
// the executor's FamilyInfo names the batching slots and the KServe metadata.
//
// A request's way: submit() validates (inputs, priority), sets the deadline, reserves a queue slot (full:
// 429) and prepares the request: inline when it decodes no media (texts, tensors, pixel values cost
// microseconds, so a high-priority text never waits behind a flood of image decodes), else on the server's
// bounded preprocessing pool (full: 429); the prepared request (items per slot, QoS score) is pushed into its
// slot; an engine thread pops a batch (RequestQueue decides which: policy, aging, max_batch_size,
// max_queue_delay_ms), runs it through its executor and completes each request as the executor finishes it.
// Every admitted request ends in finish(), which fills the phase times, records metrics and calls `done` once.
//
// Priority isolation (issue 13 item 7): under qos a batch holds one priority and runs in chunks of about
// preempt_chunk_ms of engine time, and between chunks the engine thread serves queued requests of a strictly
// better own priority first (aging orders the queue but never makes a flood urgent), so an urgent request waits
// about one chunk rather than a whole low-priority batch.
//
// Loading refuses a dtype other than auto/f32 on the CPU and a model whose weights + arena for all instances
// exceed memory_quota_mb (kResourceExhausted); it warms every instance. stop() refuses new requests, fails
// queued ones with its reason, lets running batches finish and joins the engine threads.
//
// Replicas (model_runtime_replicas.cpp): each instance is a replica on its own device (mmserve.yaml `devices`
// or `device: cuda:all`, round-robin). All engine threads pull from the one queue, so a batch goes to a free
// replica as soon as one is free (least-loaded by construction) and a slow replica never holds more than the
// one batch it is running. A batch whose executor reports a device fault takes its replica out of rotation (its
// thread exits, the metric says 0, the metadata and the log say why) and its failed requests are re-queued once
// for the other replicas; a request that meets a second fault, or when no replica is left, gets kUnavailable
// (503). With no healthy replica the queue closes and the model reports itself not ready. Test seam:
// MMSERVE_TEST_REPLICA_FAULTS (see there).
// Tests: tests/unit/serving/inference_server_test.cpp, tests/unit/serving/whisper_serving_test.cpp,
// tests/unit/serving/replica_test.cpp.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serving/preprocess_pool.h"
#include "engine/executor.h"
#include "engine/families.h"
#include "serving/model_config.h"
#include "serving/request_queue.h"
#include "serving/server_types.h"
#include "serving/serving_metrics.h"

namespace mmserve::serving {

// What a runtime borrows from its server (which outlives it).
struct RuntimeContext {
  PreprocessPool* preprocess_pool = nullptr;  // media decoding, best class first, a share kept for class 1
  ServingMetrics* metrics = nullptr;
  SchedulingPolicy policy = SchedulingPolicy::kQos;
  double aging_ms_per_level = 500;
  int64_t max_image_pixels = 64LL * 1024 * 1024;
  QosWeights qos;
  std::string device_override;  // non-empty: every model runs on this device, whatever its mmserve.yaml says
};

// True when an error means the device (or its driver) is broken rather than the request: kInternal, which every
// CUDA and cuBLAS error maps to (core/cuda/cuda_status.h) and which no request input can cause. Everything else
// is the request's (kInvalidArgument, kTooLarge, kOutOfRange, kUnimplemented), the client's (kDeadlineExceeded,
// kCancelled) or transient capacity (kResourceExhausted, also CUDA out-of-memory): the request fails with it and
// the replica stays in rotation. Executors report a fault of the whole batch in BatchStats::device_fault.
bool is_device_fault(const Status& status);

// Test seam, read once per model load: MMSERVE_TEST_REPLICA_FAULTS="MODEL:REPLICA[:COUNT],..." makes replica
// REPLICA of model MODEL fail its next COUNT batches (default 1; "all" = every batch) with kInternal, as a
// broken GPU would, without running them. Unset in production; a malformed value fails the load
// (kInvalidArgument) so that a typo cannot go unnoticed. Returns the faults of `model`, replica -> count.
StatusOr<std::vector<std::pair<int, int>>> parse_injected_faults(const std::string& value, const std::string& model);

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
  // Device, dtype and memory breakdown of the instances (the executors' describe()), for the load log.
  const std::string& description() const { return description_; }
  // Replicas still in rotation; 0 once every replica failed (the model is then not ready).
  int healthy_replicas() const;
  std::vector<ReplicaInfo> replicas() const;

  // LoRA adapters (issue 16). The registry lives on the first executor: the preparer resolves a request's adapter
  // there and hands the adapter itself (host memory, shared) to whichever replica runs it, so one load serves every
  // replica. A family without adapters answers kUnimplemented.
  bool takes_adapters() const { return info_.takes_adapters; }
  Status load_adapter(const std::string& name, const std::string& dir);
  Status unload_adapter(const std::string& name, bool fail_running = false);  // Executor::unload_adapter
  std::vector<engine::AdapterInfo> adapter_list() const;
  std::string first_device() const;

 private:
  // One instance: its device, metrics and health. Fields below `healthy` are guarded by replicas_mutex_.
  struct Replica {
    int index = 0;
    Device device;              // the first GPU of a tensor-parallel group
    std::vector<int> tp_group;  // the group's CUDA ordinals (tensor_parallel or pipeline_parallel > 1), else empty
    std::string label;          // "cuda:0", or "cuda:0+cuda:1" for a group: metrics and logs
    Counter* batches = nullptr;
    Counter* items = nullptr;
    Counter* busy_seconds = nullptr;
    Gauge* healthy_gauge = nullptr;
    bool healthy = true;
    std::string fault;                       // why it left the rotation
    int injected_faults = 0;                 // test seam: batches left to fail (-1: all)
    std::vector<engine::CacheStats> caches;  // the executor's, when last published (its engine thread only)
    std::optional<engine::SequenceStats> sequences;  // likewise, for generating families
    std::optional<engine::ExpertLoadStats> expert_load;  // likewise, for mixture-of-experts decoders
  };

  ModelRuntime(std::string name, ModelConfig config, const RuntimeContext& context, models::Family family);
  Status load_instances(const std::string& dir);
  // Replicas (model_runtime_replicas.cpp).
  Status place_replicas(std::vector<Device>& devices);  // fills replicas_ (devices, metrics) from the config
  Status apply_injected_faults();                       // MMSERVE_TEST_REPLICA_FAULTS
  std::optional<Status> take_injected_fault(Replica& replica);
  bool in_rotation(const Replica& replica) const;
  // Records a batch of `requests` that took `seconds` on the replica.
  void count_batch(Replica& replica, size_t requests, double seconds);
  // Takes the replica out of rotation (idempotent); with none left, closes the queue.
  void take_out_of_rotation(Replica& replica, const Status& fault);
  // A request whose batch failed with `fault` on `replica`: re-queued once (its input intact), else finished
  // with kUnavailable.
  void retry_or_fail(const PendingRequestPtr& request, const Status& fault, const Replica& replica);
  void preprocess(const PendingRequestPtr& request, std::vector<InputItem>& inputs);
  void engine_loop(engine::Executor* executor, Replica* replica);
  // `preemptible`: under qos, run in chunks and serve better-class arrivals between them.
  void run_batch(engine::Executor& executor, Replica& replica, const std::vector<PendingRequestPtr>& batch,
                 bool preemptible);
  // Adds the change of the executor's cache counters since the replica's last look to the metrics.
  void publish_caches(const engine::Executor& executor, Replica& replica);
  void on_dropped(const PendingRequestPtr& request, const Status& status);
  // The one way an admitted request ends.
  void finish(const PendingRequestPtr& request, StatusOr<ResponseData> result);
  void reject(RejectReason reason, const Status& status, const Completion& done);

  const std::string name_;
  const ModelConfig config_;
  const RuntimeContext context_;
  const models::Family family_;
  ModelMetrics metrics_;
  const engine::FamilyOps* family_ops_ = nullptr;
  std::string architecture_;
  engine::FamilyInfo info_;  // the first executor's
  int64_t memory_bytes_ = 0;
  std::string description_;
  double load_seconds_ = 0;
  std::unique_ptr<engine::InputPreparer> preparer_;
  std::vector<std::unique_ptr<engine::Executor>> executors_;        // each driven only by its engine thread
  std::array<Histogram*, engine::kBatchSlots> slot_batch_sizes_{};  // mmserve_batch_size{tower=<slot name>}
  RequestQueue queue_;
  std::vector<std::thread> engines_;
  std::vector<std::unique_ptr<Replica>> replicas_;  // one per executor, same order
  mutable std::mutex replicas_mutex_;               // Replica::healthy, fault, injected_faults; healthy_count_
  int healthy_count_ = 0;

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
