// ModelRuntime's replicas (see model_runtime.h): placing the instances on their devices, the per-replica
// metrics, taking a replica out of rotation after a device fault, re-queueing the failed batch's requests once,
// and the MMSERVE_TEST_REPLICA_FAULTS test seam.
//
// Routing needs no code here: every engine thread pulls its next batch from the model's one queue when its
// replica is free, which is least-loaded routing by construction. Health is per replica and one-way: a replica
// that left the rotation stays out until the model is reloaded (a broken GPU does not heal by itself, and a
// half-working one that flaps would fail a batch on every return).
// Tests: tests/unit/serving/replica_test.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "serving/model_runtime.h"

namespace mmserve::serving {
namespace {

constexpr const char* kFaultVariable = "MMSERVE_TEST_REPLICA_FAULTS";

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(sep, begin);
    out.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

bool parse_count(const std::string& text, int* out) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::atoi(text.c_str());
  return true;
}

}  // namespace

bool is_device_fault(const Status& status) {
  return status.code() == StatusCode::kInternal;
}

StatusOr<std::vector<std::pair<int, int>>> parse_injected_faults(const std::string& value, const std::string& model) {
  std::vector<std::pair<int, int>> out;
  if (value.empty()) return out;
  for (const std::string& entry : split(value, ',')) {
    const std::vector<std::string> parts = split(entry, ':');
    int replica = 0, count = 1;
    const bool ok = (parts.size() == 2 || parts.size() == 3) && !parts[0].empty() && parse_count(parts[1], &replica) &&
                    (parts.size() == 2 || parts[2] == "all" || (parse_count(parts[2], &count) && count >= 1));
    if (!ok) {
      return invalid_argument(std::string(kFaultVariable) + ": '" + entry +
                              "' is not MODEL:REPLICA[:COUNT] (COUNT a positive integer or 'all')");
    }
    if (parts.size() == 3 && parts[2] == "all") count = -1;
    if (parts[0] == model) out.emplace_back(replica, count);
  }
  return out;
}

Status ModelRuntime::place_replicas(std::vector<Device>& devices) {
  ModelConfig config = config_;
  if (!context_.device_override.empty()) {
    // `serve --device` puts every model on one device: its `devices` list no longer applies.
    config.device = context_.device_override;
    config.devices.clear();
  }
  const int gpus = config.device == "cuda:all" && config.devices.empty() ? engine::visible_gpus() : 0;
  ASSIGN_OR_RETURN(std::vector<std::vector<Device>> groups, replica_groups(config, gpus, name_ + "/mmserve.yaml"));
  ServingMetrics& m = *context_.metrics;
  devices.clear();
  for (size_t i = 0; i < groups.size(); ++i) {
    auto replica = std::make_unique<Replica>();
    replica->index = static_cast<int>(i);
    replica->device = groups[i][0];
    for (const Device& d : groups[i]) {
      if (!replica->label.empty()) replica->label += '+';
      replica->label += d.to_string();
      if (groups[i].size() > 1) replica->tp_group.push_back(d.index);
    }
    devices.push_back(groups[i][0]);
    const std::vector<std::string> labels = {name_, std::to_string(i), replica->label};
    replica->batches = &m.replica_batches.with(labels);
    replica->items = &m.replica_items.with(labels);
    replica->busy_seconds = &m.replica_busy_seconds.with(labels);
    replica->healthy_gauge = &m.replica_healthy.with(labels);
    replica->healthy_gauge->set(1);
    replicas_.push_back(std::move(replica));
  }
  healthy_count_ = static_cast<int>(replicas_.size());
  return ok_status();
}

Status ModelRuntime::apply_injected_faults() {
  const char* value = std::getenv(kFaultVariable);
  if (value == nullptr) return ok_status();
  ASSIGN_OR_RETURN(auto faults, parse_injected_faults(value, name_));
  std::lock_guard<std::mutex> lock(replicas_mutex_);
  for (const auto& [index, count] : faults) {
    if (index < 0 || static_cast<size_t>(index) >= replicas_.size()) {
      return invalid_argument(std::string(kFaultVariable) + ": model " + name_ + " has no replica " +
                              std::to_string(index) + " (it has " + std::to_string(replicas_.size()) + ")");
    }
    replicas_[static_cast<size_t>(index)]->injected_faults = count;
    std::fprintf(stderr, "mmserve: TEST SEAM %s: replica %d of model %s will fail %s batch(es)\n", kFaultVariable,
                 index, name_.c_str(), count < 0 ? "all" : std::to_string(count).c_str());
  }
  return ok_status();
}

std::optional<Status> ModelRuntime::take_injected_fault(Replica& replica) {
  std::lock_guard<std::mutex> lock(replicas_mutex_);
  if (replica.injected_faults == 0) return std::nullopt;
  if (replica.injected_faults > 0) --replica.injected_faults;
  return internal_error(std::string("injected device fault (") + kFaultVariable + ") on replica " +
                        std::to_string(replica.index) + " (" + replica.label + ")");
}

bool ModelRuntime::in_rotation(const Replica& replica) const {
  std::lock_guard<std::mutex> lock(replicas_mutex_);
  return replica.healthy;
}

int ModelRuntime::healthy_replicas() const {
  std::lock_guard<std::mutex> lock(replicas_mutex_);
  return healthy_count_;
}

std::vector<ReplicaInfo> ModelRuntime::replicas() const {
  std::lock_guard<std::mutex> lock(replicas_mutex_);
  std::vector<ReplicaInfo> out;
  for (const auto& r : replicas_) out.push_back({r->index, r->label, r->healthy, r->fault});
  return out;
}

void ModelRuntime::count_batch(Replica& replica, size_t requests, double seconds) {
  replica.batches->inc();
  replica.items->inc(static_cast<double>(requests));
  replica.busy_seconds->inc(seconds);
}

void ModelRuntime::take_out_of_rotation(Replica& replica, const Status& fault) {
  std::string summary;
  {
    std::lock_guard<std::mutex> lock(replicas_mutex_);
    if (!replica.healthy) return;
    replica.healthy = false;
    replica.fault = fault.to_string();
    replica.healthy_gauge->set(0);
    --healthy_count_;
    std::fprintf(stderr, "mmserve: model %s: replica %d (%s) taken out of rotation: %s (%d of %zu left)\n",
                 name_.c_str(), replica.index, replica.label.c_str(), replica.fault.c_str(), healthy_count_,
                 replicas_.size());
    if (healthy_count_ > 0) return;
    for (const auto& r : replicas_) {
      summary += (summary.empty() ? "" : "; ") + std::string("replica ") + std::to_string(r->index) + " (" + r->label +
                 "): " + r->fault;
    }
  }
  // None left: nothing will serve the queue, so fail what waits there and refuse new requests (503).
  context_.metrics->ready.with({name_}).set(0);
  queue_.close(Status(StatusCode::kUnavailable, "model " + name_ + " has no healthy replica (" + summary + ")"));
}

void ModelRuntime::retry_or_fail(const PendingRequestPtr& request, const Status& fault, const Replica& replica) {
  ++request->replica_faults;
  const std::string where = "replica " + std::to_string(replica.index) + " (" + replica.label + ")";
  // A request that streamed output already (a transcription's segments) would send it twice if run again.
  const bool retry = request->replica_faults < 2 && request->retriable && healthy_replicas() > 0;
  if (retry) {
    Status requeued = queue_.requeue(request);
    if (requeued.ok()) return;
    finish(request, requeued);  // the queue closed meanwhile (last replica failed, or unloading)
    return;
  }
  std::string why = request->replica_faults >= 2 ? "failed on two replicas"
                    : !request->retriable        ? "failed while streaming (not retried)"
                                                 : "failed and no healthy replica is left";
  finish(request,
         Status(StatusCode::kUnavailable, "the request " + why + "; last on " + where + ": " + fault.message()));
}

}  // namespace mmserve::serving
