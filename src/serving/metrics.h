// A small Prometheus metrics registry: counters, gauges and histograms with labels, exposed in the text
// format 0.0.4 (what Prometheus scrapes from GET /metrics).
//
// Families are created once (at start-up) and hold children per label-value tuple; updating a child is a
// lock-free atomic operation, so the hot path (one observe() per request phase) costs a few nanoseconds.
// Looking a child up by labels takes the family's mutex: callers on hot paths keep the child pointer.
// Names and label values are escaped as the format requires. Tests: tests/unit/serving/metrics_test.cpp,
// and `promtool check metrics` over a live server's exposition in tests/e2e.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mmserve::serving {

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Cumulative counts per bucket (the last is +Inf), sum and count, read consistently enough for scraping.
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1 (the +Inf bucket)
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

// Default latency buckets in seconds: 0.5 ms .. 30 s.
std::vector<double> latency_buckets_seconds();

template <typename Metric>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> buckets = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        buckets_(std::move(buckets)) {}
  // The child for these label values (created on first use); values.size() must equal the label names'.
  Metric& with(const std::vector<std::string>& values);
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Snapshot of (label values, child) pairs, sorted by labels.
  std::vector<std::pair<std::vector<std::string>, const Metric*>> children() const;

 private:
  std::string name_, help_;
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_;
};

class MetricsRegistry {
 public:
  // Registering the same name twice returns the existing family (label names must match).
  Family<Counter>& counter(const std::string& name, const std::string& help, const std::vector<std::string>& labels);
  Family<Gauge>& gauge(const std::string& name, const std::string& help, const std::vector<std::string>& labels);
  Family<Histogram>& histogram(const std::string& name, const std::string& help, const std::vector<std::string>& labels,
                               std::vector<double> buckets = latency_buckets_seconds());
  // The whole registry in Prometheus text format 0.0.4.
  std::string expose() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Family<Counter>>> counters_;
  std::map<std::string, std::unique_ptr<Family<Gauge>>> gauges_;
  std::map<std::string, std::unique_ptr<Family<Histogram>>> histograms_;
};

// Escapes a label value for the text format (backslash, double quote, newline).
std::string escape_label_value(const std::string& value);

}  // namespace mmserve::serving
