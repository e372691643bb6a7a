// Registration of the serving metrics and the per-model children (see serving_metrics.h).
// Tests: tests/unit/serving/inference_server_test.cpp.
#include "serving/serving_metrics.h"

#include <algorithm>

namespace mmserve::serving {
namespace {

constexpr Outcome kOutcomes[] = {Outcome::kSuccess, Outcome::kInvalid,   Outcome::kRejected,
                                 Outcome::kTimeout, Outcome::kCancelled, Outcome::kError};
constexpr RejectReason kReasons[] = {RejectReason::kQueueFull, RejectReason::kPreprocessFull, RejectReason::kDraining,
                                     RejectReason::kNotReady};

std::vector<double> batch_size_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128};
}

}  // namespace

Outcome outcome_of(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return Outcome::kSuccess;
    case StatusCode::kInvalidArgument:
    case StatusCode::kTooLarge:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented: return Outcome::kInvalid;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable: return Outcome::kRejected;
    case StatusCode::kDeadlineExceeded: return Outcome::kTimeout;
    case StatusCode::kCancelled: return Outcome::kCancelled;
    default: return Outcome::kError;
  }
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess: return "success";
    case Outcome::kInvalid: return "invalid";
    case Outcome::kRejected: return "rejected";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kError: return "error";
  }
  return "error";
}

const char* reject_reason_name(RejectReason reason) {
  switch (reason) {
    case RejectReason::kQueueFull: return "queue_full";
    case RejectReason::kPreprocessFull: return "preprocess_full";
    case RejectReason::kDraining: return "draining";
    case RejectReason::kNotReady: return "not_ready";
  }
  return "not_ready";
}

ServingMetrics::ServingMetrics(MetricsRegistry& r)
    : requests(r.counter("mmserve_requests_total", "Inference requests by outcome.", {"model", "outcome"})),
      rejected(r.counter("mmserve_rejected_requests_total", "Requests refused before running, by reason.",
                         {"model", "reason"})),
      queue_seconds(r.histogram("mmserve_queue_duration_seconds",
                                "Time from admission to being picked into a batch, minus preprocessing.",
                                {"model", "priority"})),
      preprocess_seconds(r.histogram("mmserve_preprocess_duration_seconds",
                                     "Decode, resize and tokenize time per request.", {"model", "priority"})),
      compute_seconds(r.histogram("mmserve_compute_duration_seconds", "Engine time of the batch a request rode in.",
                                  {"model", "priority"})),
      request_seconds(r.histogram("mmserve_request_duration_seconds", "Submit to completion, every outcome.",
                                  {"model", "priority"})),
      batch_size(r.histogram("mmserve_batch_size", "Engine batch size per tower, rounded up to the batch bucket.",
                             {"model", "tower"}, batch_size_buckets())),
      audio_seconds(
          r.counter("mmserve_audio_seconds_total", "Seconds of audio in successful transcriptions.", {"model"})),
      cache_hits(r.counter("mmserve_cache_hits_total", "Lookups an executor's cache answered.", {"model", "cache"})),
      cache_misses(
          r.counter("mmserve_cache_misses_total", "Lookups an executor's cache could not answer.", {"model", "cache"})),
      cache_bytes(
          r.gauge("mmserve_cache_bytes", "Bytes an executor's caches hold, over the replicas.", {"model", "cache"})),
      cache_entries(r.gauge("mmserve_cache_entries", "Entries an executor's caches hold, over the replicas.",
                            {"model", "cache"})),
      queue_depth(r.gauge("mmserve_queue_depth", "Requests waiting in the model's queue.", {"model"})),
      inflight(r.gauge("mmserve_inflight_requests", "Admitted requests not yet completed.", {"model"})),
      load_seconds(r.gauge("mmserve_model_load_seconds", "Seconds the last load took (with warm-up).", {"model"})),
      memory_bytes(r.gauge("mmserve_model_memory_bytes", "Weights plus arenas of all instances.", {"model"})),
      ready(r.gauge("mmserve_model_ready", "1 when the model is READY.", {"model"})),
      replica_batches(r.counter("mmserve_replica_batches_total", "Batches a replica ran (failed ones included).",
                                {"model", "replica", "device"})),
      replica_items(r.counter("mmserve_replica_items_total", "Requests in the batches a replica ran.",
                              {"model", "replica", "device"})),
      replica_busy_seconds(r.counter("mmserve_replica_busy_seconds_total", "Seconds a replica spent running batches.",
                                     {"model", "replica", "device"})),
      replica_healthy(r.gauge("mmserve_replica_healthy", "1 while the replica is in rotation, 0 after a device fault.",
                              {"model", "replica", "device"})) {}

ModelMetrics::ModelMetrics(ServingMetrics& f, const std::string& model, int priority_levels)
    : families_(&f), model_(model) {
  for (Outcome o : kOutcomes) outcomes_.push_back(&f.requests.with({model, outcome_name(o)}));
  for (RejectReason r : kReasons) rejects_.push_back(&f.rejected.with({model, reject_reason_name(r)}));
  for (int p = 1; p <= std::max(1, priority_levels); ++p) {
    const std::string label = std::to_string(p);
    queue_.push_back(&f.queue_seconds.with({model, label}));
    preprocess_.push_back(&f.preprocess_seconds.with({model, label}));
    compute_.push_back(&f.compute_seconds.with({model, label}));
    request_.push_back(&f.request_seconds.with({model, label}));
  }
  queue_depth_ = &f.queue_depth.with({model});
  inflight_ = &f.inflight.with({model});
}

void ModelMetrics::set_family(const engine::FamilyInfo& info) {
  for (int slot = 0; slot < engine::kBatchSlots; ++slot) {
    const std::string& name = info.slot_names[static_cast<size_t>(slot)];
    if (!name.empty()) slot_batches_[static_cast<size_t>(slot)] = &families_->batch_size.with({model_, name});
  }
  if (info.counts_audio) audio_seconds_ = &families_->audio_seconds.with({model_});
}

void ModelMetrics::add_cache_delta(const std::vector<engine::CacheStats>& before,
                                   const std::vector<engine::CacheStats>& now) {
  for (const engine::CacheStats& c : now) {
    engine::CacheStats old;
    for (const engine::CacheStats& b : before) {
      if (b.name == c.name) old = b;
    }
    const std::vector<std::string> labels = {model_, c.name};
    if (c.hits > old.hits) families_->cache_hits.with(labels).inc(static_cast<double>(c.hits - old.hits));
    if (c.misses > old.misses) families_->cache_misses.with(labels).inc(static_cast<double>(c.misses - old.misses));
    families_->cache_bytes.with(labels).add(static_cast<double>(c.bytes - old.bytes));
    families_->cache_entries.with(labels).add(static_cast<double>(c.entries - old.entries));
  }
}

TopologyMetrics::TopologyMetrics(MetricsRegistry& r)
    : gpu_count(r.gauge("mmserve_gpus", "GPUs found by topology discovery (CUDA, else NVML).", {})),
      nvlink_active(r.gauge("mmserve_nvlink_active", "1 when the NVLink link is up (NVML).", {"gpu", "link"})),
      nvlink_gbps(r.gauge("mmserve_nvlink_throughput_gigabytes_per_second",
                          "NVLink data throughput over the last sampling interval (NVML THROUGHPUT_DATA, GB=1024^3).",
                          {"gpu", "link", "direction"})),
      p2p_access(r.gauge("mmserve_gpu_p2p_access", "1 when cudaDeviceCanAccessPeer(src, dst).", {"src", "dst"})),
      copy_gbps(r.gauge("mmserve_gpu_copy_bandwidth_gigabytes_per_second",
                        "Copy bandwidth measured at start-up, src GPU to dst GPU (GB=1024^3).", {"src", "dst"})),
      ib_gbps(r.gauge("mmserve_ib_port_bandwidth_gigabytes_per_second",
                      "InfiniBand port bandwidth, calc_ib_bandwidth over the last sampling interval.",
                      {"device", "port"})) {}

void TopologyMetrics::publish(const Topology& t) {
  gpu_count.with({}).set(static_cast<double>(t.gpus.size()));
  for (const GpuInfo& gpu : t.gpus) {
    const std::string g = std::to_string(gpu.index);
    for (const NvLinkInfo& link : gpu.nvlinks) {
      const std::string l = std::to_string(link.link);
      nvlink_active.with({g, l}).set(link.active ? 1.0 : 0.0);
      if (!link.counters_valid) continue;
      nvlink_gbps.with({g, l, "tx"}).set(link.tx_gbps);
      nvlink_gbps.with({g, l, "rx"}).set(link.rx_gbps);
    }
  }
  for (size_t i = 0; i < t.p2p.size(); ++i) {
    for (size_t j = 0; j < t.p2p[i].size(); ++j) {
      p2p_access.with({std::to_string(i), std::to_string(j)}).set(t.p2p[i][j] ? 1.0 : 0.0);
    }
  }
  for (size_t i = 0; i < t.bandwidth_gbps.size(); ++i) {
    for (size_t j = 0; j < t.bandwidth_gbps[i].size(); ++j) {
      copy_gbps.with({std::to_string(i), std::to_string(j)}).set(t.bandwidth_gbps[i][j]);
    }
  }
  for (const IbPortRate& port : t.ib_ports) {
    if (!port.error.empty()) continue;  // no rate yet (first sample) or a broken counter: no value, not 0
    ib_gbps.with({port.device, std::to_string(port.port)}).set(port.gbps);
  }
}

size_t ModelMetrics::index(int priority) const {
  const int last = static_cast<int>(queue_.size());
  return static_cast<size_t>(std::clamp(priority, 1, last) - 1);
}

}  // namespace mmserve::serving
