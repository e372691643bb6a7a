// The serving layer's metric families (names and labels are a public contract: dashboards, alerts and
// docs/metrics.md use them) and the per-model children the hot path keeps pointers to.
//
//   mmserve_requests_total{model,outcome}          counter; outcome: success invalid rejected timeout cancelled error
//   mmserve_rejected_requests_total{model,reason}  counter; reason: queue_full preprocess_full draining not_ready
//   mmserve_{queue,preprocess,compute,request}_duration_seconds{model,priority}   histograms
//   mmserve_batch_size{model,tower}                histogram (1..128); tower: text image (CLIP), audio (Whisper);
//                                                  the bucket-rounded size
//   mmserve_audio_seconds_total{model}             counter: seconds of audio in successful transcriptions
//   mmserve_queue_depth{model}, mmserve_inflight_requests{model}                  gauges
//   mmserve_model_load_seconds{model}, mmserve_model_memory_bytes{model}, mmserve_model_ready{model}   gauges
// Tests: tests/unit/serving/inference_server_test.cpp reads them back from a live server.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
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
  Family<Gauge>& queue_depth;
  Family<Gauge>& inflight;
  Family<Gauge>& load_seconds;
  Family<Gauge>& memory_bytes;
  Family<Gauge>& ready;
};

// One model's children, created up front (so they are exposed as zeros) and then used lock-free.
class ModelMetrics {
 public:
  // `audio`: a speech model (batch sizes under tower="audio" and the audio seconds counter instead of the
  // text/image towers).
  ModelMetrics(ServingMetrics& families, const std::string& model, int priority_levels, bool audio = false);

  void count(Outcome outcome) { outcomes_[static_cast<int>(outcome)]->inc(); }
  void reject(RejectReason reason) { rejects_[static_cast<int>(reason)]->inc(); }
  // priority in 1..priority_levels (clamped).
  Histogram& queue_seconds(int priority) { return *queue_[index(priority)]; }
  Histogram& preprocess_seconds(int priority) { return *preprocess_[index(priority)]; }
  Histogram& compute_seconds(int priority) { return *compute_[index(priority)]; }
  Histogram& request_seconds(int priority) { return *request_[index(priority)]; }
  Histogram& text_batch_size() { return *text_batch_; }
  Histogram& image_batch_size() { return *image_batch_; }
  Histogram& audio_batch_size() { return *audio_batch_; }
  Counter& audio_seconds() { return *audio_seconds_; }
  Gauge& queue_depth() { return *queue_depth_; }
  Gauge& inflight() { return *inflight_; }

 private:
  size_t index(int priority) const;
  std::vector<Counter*> outcomes_, rejects_;
  std::vector<Histogram*> queue_, preprocess_, compute_, request_;
  Histogram* text_batch_ = nullptr;
  Histogram* image_batch_ = nullptr;
  Histogram* audio_batch_ = nullptr;
  Counter* audio_seconds_ = nullptr;
  Gauge* queue_depth_;
  Gauge* inflight_;
};

}  // namespace mmserve::serving
