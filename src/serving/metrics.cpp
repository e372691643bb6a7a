// Metrics registry and the Prometheus text exposition (see metrics.h).
#include "serving/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/status.h"

namespace mmserve::serving {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  buckets_.reset(new std::atomic<uint64_t>[bounds_.size() + 1]);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::vector<double> latency_buckets_seconds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

template <typename Metric>
Metric& Family<Metric>::with(const std::vector<std::string>& values) {
  MMSERVE_CHECK(values.size() == label_names_.size(), "metric " + name_ + ": wrong number of label values");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = children_.find(values);
  if (it != children_.end()) return *it->second;
  std::unique_ptr<Metric> child;
  if constexpr (std::is_same_v<Metric, Histogram>) {
    child = std::make_unique<Histogram>(buckets_);
  } else {
    child = std::make_unique<Metric>();
  }
  Metric& ref = *child;
  children_.emplace(values, std::move(child));
  return ref;
}

template <typename Metric>
std::vector<std::pair<std::vector<std::string>, const Metric*>> Family<Metric>::children() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<std::vector<std::string>, const Metric*>> out;
  for (const auto& [labels, child] : children_) out.emplace_back(labels, child.get());
  return out;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

namespace {

template <typename Map, typename Metric = typename Map::mapped_type::element_type>
Metric& get_or_add(std::mutex& mutex, Map& map, const std::string& name, const std::string& help,
                   const std::vector<std::string>& labels, std::vector<double> buckets = {}) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = map.find(name);
  if (it != map.end()) {
    MMSERVE_CHECK(it->second->label_names() == labels, "metric " + name + " re-registered with other labels");
    return *it->second;
  }
  auto family = std::make_unique<Metric>(name, help, labels, std::move(buckets));
  Metric& ref = *family;
  map.emplace(name, std::move(family));
  return ref;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest decimal that reads back as the same double (0.0005, not 0.00050000000000000001).
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string label_text(const std::vector<std::string>& names, const std::vector<std::string>& values,
                       const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += (s.empty() ? "" : ",") + names[i] + "=\"" + escape_label_value(values[i]) + "\"";
  }
  if (!extra_name.empty()) s += (s.empty() ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  return s.empty() ? "" : "{" + s + "}";
}

std::string escape_help(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

Family<Counter>& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                          const std::vector<std::string>& labels) {
  return get_or_add(mutex_, counters_, name, help, labels);
}

Family<Gauge>& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                                      const std::vector<std::string>& labels) {
  return get_or_add(mutex_, gauges_, name, help, labels);
}

Family<Histogram>& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                              const std::vector<std::string>& labels, std::vector<double> buckets) {
  return get_or_add(mutex_, histograms_, name, help, labels, std::move(buckets));
}

std::string MetricsRegistry::expose() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  auto header = [&out](const std::string& name, const std::string& help, const char* type) {
    out += "# HELP " + name + " " + escape_help(help) + "\n# TYPE " + name + " " + type + "\n";
  };
  for (const auto& [name, family] : counters_) {
    header(name, family->help(), "counter");
    for (const auto& [labels, c] : family->children()) {
      out += name + label_text(family->label_names(), labels) + " " + format_value(c->value()) + "\n";
    }
  }
  for (const auto& [name, family] : gauges_) {
    header(name, family->help(), "gauge");
    for (const auto& [labels, g] : family->children()) {
      out += name + label_text(family->label_names(), labels) + " " + format_value(g->value()) + "\n";
    }
  }
  for (const auto& [name, family] : histograms_) {
    header(name, family->help(), "histogram");
    for (const auto& [labels, h] : family->children()) {
      const std::vector<uint64_t> counts = h->cumulative_counts();
      for (size_t i = 0; i < h->upper_bounds().size(); ++i) {
        out += name + "_bucket" + label_text(family->label_names(), labels, "le", format_value(h->upper_bounds()[i])) +
               " " + std::to_string(counts[i]) + "\n";
      }
      out += name + "_bucket" + label_text(family->label_names(), labels, "le", "+Inf") + " " +
             std::to_string(counts.back()) + "\n";
      out += name + "_sum" + label_text(family->label_names(), labels) + " " + format_value(h->sum()) + "\n";
      out += name + "_count" + label_text(family->label_names(), labels) + " " + std::to_string(counts.back()) + "\n";
    }
  }
  return out;
}

}  // namespace mmserve::serving
