// The serving layer's metric families (names and labels are a public contract: dashboards, alerts and
// docs/metrics.md use them) and the per-model children the hot path keeps pointers to.
//
//   mmserve_requests_total{model,outcome}          counter; outcome: success invalid rejected timeout cancelled error
//   mmserve_rejected_requests_total{model,reason}  counter; reason: queue_full preprocess_full draining not_ready
//   mmserve_{queue,preprocess,compute,request}_duration_seconds{model,priority}   histograms
//   mmserve_batch_size{model,tower}                histogram (1..128); tower: the family's batching slot (text
//                                                  image for CLIP, audio for Whisper, image prompt for SAM); the
//                                                  bucket-rounded size
//   mmserve_audio_seconds_total{model}             counter: seconds of audio in successful transcriptions
//   mmserve_prompt_tokens_total{model}, mmserve_generation_tokens_total{model}      counters (generating families)
//   mmserve_time_to_first_token_seconds{model}     histogram: submit -> first generated token (queue, preprocess,
//                                                  the batch's prefills)
//   mmserve_time_per_output_token_seconds{model}   histogram: (last - first token) / (generated - 1), per request
//   mmserve_cache_{hits,misses}_total{model,cache} counters: an executor's caches (SAM: cache="image_embedding")
//   mmserve_cache_{bytes,entries}{model,cache}     gauges: what those caches hold, summed over the replicas
//   mmserve_queue_depth{model}, mmserve_inflight_requests{model}                  gauges
//   mmserve_model_load_seconds{model}, mmserve_model_memory_bytes{model}, mmserve_model_ready{model}   gauges
//   Topology (TopologyMetrics, issue 6; GB = 1024^3 bytes): mmserve_gpus, mmserve_nvlink_active{gpu,link},
//   mmserve_nvlink_throughput_gigabytes_per_second{gpu,link,direction}, mmserve_gpu_p2p_access{src,dst},
//   mmserve_gpu_copy_bandwidth_gigabytes_per_second{src,dst},
//   mmserve_ib_port_bandwidth_gigabytes_per_second{device,port}
//   mmserve_replica_{batches,items}_total{model,replica,device}      counters: batches a replica ran, their requests
//   mmserve_replica_busy_seconds_total{model,replica,device}         counter: time a replica spent running batches
//   mmserve_replica_healthy{model,replica,device}                    gauge: 1 in rotation, 0 taken out after a fault
//   LoRA (issue 16): mmserve_adapter_requests_total{model,adapter}, mmserve_adapter_generation_tokens_total{model,
//   adapter}   counters: successful generations under the adapter and their generated tokens (a request the gate
//   routed to two adapters counts, with all its tokens, for each)
//   mmserve_gate_distill_{loss,heldout_loss}{model}   gauges: the online distillation's last round (KL, nats)
//   mmserve_gate_distill_{updates,rollbacks,samples}_total{model}   counters: rounds kept, rounds undone, samples
// Tests: tests/unit/serving/inference_server_test.cpp reads them back from a live server.
#pragma once

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/topology.h"
#include "core/status.h"
#include "engine/executor.h"
#include "serving/metrics.h"

namespace mmserve::serving {

enum class Outcome { kSuccess, kInvalid, kRejected, kTimeout, kCancelled, kError };
enum class RejectReason { kQueueFull, kPreprocessFull, kDraining, kNotReady };

// success for OK; invalid for bad input (kInvalidArgument, kTooLarge, kOutOfRange, kUnimplemented);
// rejected for kResourceExhausted and kUnavailable; timeout; cancelled; error for the rest.
Outcome outcome_of(const Status& status);
const char* outcome_name(Outcome outcome);
const char* reject_reason_name(RejectReason reason);

// The families, registered once per registry.
struct ServingMetrics {
  explicit ServingMetrics(MetricsRegistry& registry);
  Family<Counter>& requests;
  Family<Counter>& rejected;
  Family<Histogram>& queue_seconds;
  Family<Histogram>& preprocess_seconds;
  Family<Histogram>& compute_seconds;
  Family<Histogram>& request_seconds;
  Family<Histogram>& batch_size;
  Family<Counter>& audio_seconds;
  Family<Counter>& prompt_tokens;
  Family<Counter>& generation_tokens;
  Family<Histogram>& time_to_first_token;
  Family<Histogram>& time_per_output_token;
  Family<Gauge>& requests_running;  // generating families (engine::SequenceStats)
  Family<Gauge>& requests_waiting;
  Family<Counter>& preemptions;
  Family<Gauge>& kv_cache_usage;
  Family<Counter>& cache_hits;
  Family<Counter>& cache_misses;
  Family<Gauge>& cache_bytes;
  Family<Gauge>& cache_entries;
  Family<Counter>& expert_tokens;    // mixture-of-experts decoders (engine::ExpertLoadStats)
  Family<Gauge>& top_expert_share;
  Family<Gauge>& queue_depth;
  Family<Gauge>& inflight;
  Family<Gauge>& load_seconds;
  Family<Gauge>& memory_bytes;
  Family<Gauge>& ready;
  Family<Counter>& replica_batches;  // replicas (model_runtime_replicas.cpp)
  Family<Counter>& replica_items;
  Family<Counter>& replica_busy_seconds;
  Family<Gauge>& replica_healthy;
  Family<Counter>& adapter_requests;  // LoRA adapters (engine::ModelOutput::adapters)
  Family<Counter>& adapter_generation_tokens;
  Family<Gauge>& gate_distill_loss;  // a gate head distilled online (engine::RouterStats)
  Family<Gauge>& gate_distill_heldout_loss;
  Family<Counter>& gate_distill_updates;
  Family<Counter>& gate_distill_rollbacks;
  Family<Counter>& gate_distill_samples;
};

// One model's children, created up front (so they are exposed as zeros) and then used lock-free.
class ModelMetrics {
 public:
  ModelMetrics(ServingMetrics& families, const std::string& model, int priority_levels);
  // Once the family is known (after the first executor loaded): the batch-size children of its slots and, for
  // speech families, the audio-seconds counter.
  void set_family(const engine::FamilyInfo& info);

  void count(Outcome outcome) { outcomes_[static_cast<int>(outcome)]->inc(); }
  void reject(RejectReason reason) { rejects_[static_cast<int>(reason)]->inc(); }
  // priority in 1..priority_levels (clamped).
  Histogram& queue_seconds(int priority) { return *queue_[index(priority)]; }
  Histogram& preprocess_seconds(int priority) { return *preprocess_[index(priority)]; }
  Histogram& compute_seconds(int priority) { return *compute_[index(priority)]; }
  Histogram& request_seconds(int priority) { return *request_[index(priority)]; }
  // nullptr for an unused slot (before set_family, or a slot without a name).
  Histogram* slot_batch_size(int slot) { return slot_batches_[static_cast<size_t>(slot)]; }
  Counter* audio_seconds() { return audio_seconds_; }
  // A generating family's successful output (nothing for others): tokens and TTFT / TPOT. `before_batch_ms` is the
  // request's time from submission to its batch's start (preprocess + queue).
  void record_generation(const engine::ModelOutput& output, int64_t prompt_tokens, double before_batch_ms);
  // Adds the change since `before` of one executor's caches (an engine thread publishes its own executor's).
  void add_cache_delta(const std::vector<engine::CacheStats>& before, const std::vector<engine::CacheStats>& now);
  // The routing decisions since `before` per (layer, expert), and each layer's share of its busiest expert.
  void add_expert_load_delta(const std::optional<engine::ExpertLoadStats>& before, const engine::ExpertLoadStats& now);
  // The same for a generating family's sequence gauges (the usage ratio is averaged over `replicas`).
  void add_sequence_delta(const std::optional<engine::SequenceStats>& before,
                          const std::optional<engine::SequenceStats>& now, int replicas);
  // A distilling executor's router counters since the last call (any engine thread: a model has at most one
  // distiller, since one state directory takes one, so the previous value is kept here) and its losses.
  void add_router(const engine::RouterStats& now);
  Gauge& queue_depth() { return *queue_depth_; }
  Gauge& inflight() { return *inflight_; }

 private:
  size_t index(int priority) const;
  std::vector<Counter*> outcomes_, rejects_;
  std::vector<Histogram*> queue_, preprocess_, compute_, request_;
  ServingMetrics* families_;
  std::string model_;
  std::array<Histogram*, engine::kBatchSlots> slot_batches_{};
  Counter* audio_seconds_ = nullptr;
  Counter *prompt_tokens_ = nullptr, *generation_tokens_ = nullptr;
  Histogram *ttft_ = nullptr, *tpot_ = nullptr;
  Gauge* queue_depth_;
  Gauge* inflight_;
  std::mutex router_mutex_;
  std::optional<engine::RouterStats> router_before_;
};

// The GPU topology gauges (docs/metrics.md "Topology"), updated from each TopologyMonitor sample. Label values
// are bounded by the hardware (GPU indices, link numbers, IB device/port names).
// Tests: tests/unit/api/topology_handler_test.cpp (TopologyMetricsTest).
struct TopologyMetrics {
  explicit TopologyMetrics(MetricsRegistry& registry);
  void publish(const Topology& topology);
  Family<Gauge>& gpu_count;
  Family<Gauge>& nvlink_active;
  Family<Gauge>& nvlink_gbps;
  Family<Gauge>& p2p_access;
  Family<Gauge>& copy_gbps;
  Family<Gauge>& ib_gbps;
};

}  // namespace mmserve::serving
