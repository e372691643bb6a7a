// ModelRuntime's Whisper parts (see model_runtime.h): loading WhisperExecutor instances with the quota and a
// warm-up, the engine threads' batch loop over run_whisper_batch, and the KServe metadata of a speech model.
// Admission, queueing and finish() are the family-independent ones of model_runtime.cpp.
// Tests: tests/unit/serving/whisper_serving_test.cpp.
#include <algorithm>

#include "serving/clip_batch.h"  // bucket_for
#include "serving/model_runtime.h"
#include "serving/whisper_batch.h"

namespace mmserve::serving {
namespace {

std::string mib(int64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

Status ModelRuntime::load_whisper_instances(const std::string& dir, engine::ExecutorOptions options, int64_t quota,
                                            const std::vector<Device>& devices) {
  const int instances = static_cast<int>(devices.size());
  for (int i = 0; i < instances; ++i) {
    options.device = devices[static_cast<size_t>(i)];
    options.tp_devices = replicas_[static_cast<size_t>(i)]->tp_group;
    ASSIGN_OR_RETURN(auto executor, engine::WhisperExecutor::create(dir, options));
    if (i > 0) description_ += "; ";
    description_ += "replica " + std::to_string(i) + ": " + executor->describe();
    if (i == 0) {
      memory_bytes_ = executor->memory_bytes() * instances;
      if (quota > 0 && memory_bytes_ > quota) {
        return resource_exhausted("memory quota: " + std::to_string(instances) + " instance(s) need " +
                                  mib(memory_bytes_) + " but memory_quota_mb is " +
                                  std::to_string(config_.memory_quota_mb));
      }
      languages_ = executor->languages();
      audio_options_.model = name_;
      audio_options_.sample_rate = executor->sample_rate();
      audio_options_.seconds_max = config_.audio_seconds_max;
      audio_options_.bytes_max = config_.audio_bytes_max;
      audio_options_.qos = context_.qos;
    }
    // Warm-up: one second of silence, a few tokens, no fallback (touches every weight and arena once).
    engine::TranscribeOptions warm;
    warm.language = languages_.empty() ? "" : "en";
    warm.timestamps = false;
    warm.temperatures = {0.0f};
    warm.max_new_tokens = 4;
    const std::vector<float> silence(static_cast<size_t>(executor->sample_rate()), 0.0f);
    auto warmed = executor->transcribe(silence, warm);
    if (!warmed.ok()) return warmed.status().with_context("warm-up transcription");
    whisper_executors_.push_back(std::move(executor));
  }
  return ok_status();
}

void ModelRuntime::whisper_engine_loop(engine::WhisperExecutor* executor, Replica* replica) {
  BatchLimits limits;
  limits.items_max = config_.max_batch_size;
  limits.delay_max = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(config_.max_queue_delay_ms));
  while (in_rotation(*replica)) {  // pull-based, as engine_loop
    std::vector<PendingRequestPtr> batch = queue_.pop_batch(limits);
    if (batch.empty()) return;  // closed
    run_whisper(*executor, *replica, batch);
  }
}

void ModelRuntime::run_whisper(engine::WhisperExecutor& executor, Replica& replica,
                               const std::vector<PendingRequestPtr>& batch) {
  const Clock::time_point picked = Clock::now();
  for (const PendingRequestPtr& r : batch) {
    r->dequeued = true;
    r->times.queue_ms = std::max(0.0, ms_between(r->submitted, picked) - r->times.preprocess_ms);
  }
  // run_whisper_batch consumes the audio; keep a copy while another replica could retry the batch.
  std::vector<std::vector<float>> kept_audio(batch.size());
  if (healthy_replicas() > 1) {
    for (size_t i = 0; i < batch.size(); ++i) kept_audio[i] = batch[i]->audio;
  }
  std::optional<Status> fault = take_injected_fault(replica);
  WhisperBatchRun run;
  if (fault) {  // injected (test seam): fails as a broken device would, without running
    run.responses.assign(batch.size(), StatusOr<ResponseData>(*fault));
  } else {
    run = run_whisper_batch(executor, batch);
    // A device fault fails every request of the batch with kInternal; a kInternal on some requests only (a
    // decoding bug on one sequence) is that request's failure.
    const bool all_failed = std::all_of(run.responses.begin(), run.responses.end(),
                                        [](const auto& r) { return !r.ok() && is_device_fault(r.status()); });
    if (all_failed && !run.responses.empty()) fault = run.responses[0].status();
  }
  count_batch(replica, batch.size(), std::chrono::duration<double>(Clock::now() - picked).count());
  if (fault) {
    take_out_of_rotation(replica, *fault);
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->audio = std::move(kept_audio[i]);
      retry_or_fail(batch[i], *fault, replica);
    }
    return;
  }
  metrics_.audio_batch_size().observe(
      static_cast<double>(bucket_for(static_cast<int64_t>(batch.size()), config_.batch_buckets)));
  for (size_t i = 0; i < batch.size(); ++i) {
    const PendingRequestPtr& r = batch[i];
    r->times.compute_ms = run.compute_ms;
    metrics_.compute_seconds(r->priority).observe(run.compute_ms / 1000.0);
    StatusOr<ResponseData> response = std::move(run.responses[i]);
    if (response.ok() && r->cancelled && r->cancelled()) {
      response = Status(StatusCode::kCancelled, "the client cancelled the request while it ran; output discarded");
    }
    if (response.ok()) metrics_.audio_seconds().inc(r->audio_seconds);
    finish(r, std::move(response));
  }
}

ModelMetadata ModelRuntime::whisper_metadata() const {
  ModelMetadata m;
  m.name = name_;
  m.versions = {"1"};
  m.platform = "mmserve_whisper";
  m.inputs = {{"audio", "BYTES", {1}}};
  m.outputs = {{"text", "BYTES", {1}}, {"segments", "BYTES", {1}}, {"language", "BYTES", {1}}};
  m.replicas = replicas();
  return m;
}

}  // namespace mmserve::serving
