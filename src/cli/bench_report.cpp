// Folding `mmserve bench` outcomes into the report (see bench_report.h for the definitions).
#include "cli/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mmserve::cli {
namespace {

using nlohmann::json;

struct Tally {
  int64_t arrivals = 0, dropped = 0, sent = 0, ok = 0, rejected_429 = 0;
  std::map<std::string, int64_t> errors;            // HTTP code -> count
  std::map<std::string, int64_t> transport_errors;  // kind -> count
  std::vector<double> latencies_ms;                 // ok requests

  void add(const Outcome& o) {
    ++sent;
    if (o.http_status >= 200 && o.http_status < 300) {
      ++ok;
      latencies_ms.push_back(o.latency_ms);
    } else if (o.http_status == 429) {
      ++rejected_429;
    } else if (o.http_status != 0) {
      ++errors[std::to_string(o.http_status)];
    } else {
      ++transport_errors[o.transport_error != nullptr ? o.transport_error : "unknown"];
    }
  }

  json to_json(double elapsed_s) {
    std::sort(latencies_ms.begin(), latencies_ms.end());
    json j = {{"arrivals", arrivals},         {"sent", sent},     {"dropped_by_client", dropped},        {"ok", ok},
              {"rejected_429", rejected_429}, {"errors", errors}, {"transport_errors", transport_errors}};
    int64_t http_5xx = 0;
    for (const auto& [code, n] : errors) http_5xx += code[0] == '5' ? n : 0;
    j["http_5xx"] = http_5xx;
    j["throughput_ok_per_s"] = elapsed_s > 0 ? static_cast<double>(ok) / elapsed_s : 0.0;
    if (latencies_ms.empty()) {
      j["latency_ms"] = nullptr;
    } else {
      double sum = 0;
      for (double v : latencies_ms) sum += v;
      j["latency_ms"] = {{"p50", percentile_sorted(latencies_ms, 50)},
                         {"p95", percentile_sorted(latencies_ms, 95)},
                         {"p99", percentile_sorted(latencies_ms, 99)},
                         {"max", latencies_ms.back()},
                         {"mean", sum / static_cast<double>(latencies_ms.size())}};
    }
    return j;
  }
};

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string latency_cell(const json& stats, const char* key) {
  if (stats["latency_ms"].is_null()) return "-";
  return fmt("%.1f", stats["latency_ms"][key].get<double>());
}

std::string count_map(const json& m) {
  std::string s;
  for (const auto& [k, v] : m.items()) s += (s.empty() ? "" : " ") + k + ":" + std::to_string(v.get<int64_t>());
  return s;
}

}  // namespace

double percentile_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size()))) - 1;
  return sorted[index];
}

json bench_report_json(const BenchConfig& config, const std::vector<PreparedClass>& classes, const BenchRun& run) {
  std::vector<Tally> per_class(classes.size());
  Tally overall;
  for (size_t c = 0; c < classes.size(); ++c) {
    per_class[c].arrivals = run.arrivals[c];
    per_class[c].dropped = run.dropped[c];
    overall.arrivals += run.arrivals[c];
    overall.dropped += run.dropped[c];
  }
  for (const Outcome& o : run.outcomes) {
    per_class[o.class_index].add(o);
    overall.add(o);
  }
  json report;
  report["config"] = {{"url", config.url},
                      {"model", config.model},
                      {"profile", config.profile_source},
                      {"rate", config.rate},
                      {"duration_s", config.duration_s},
                      {"connections", config.connections},
                      {"timeout_s", config.timeout_s},
                      {"keep_alive", config.keep_alive},
                      {"seed", config.seed}};
  report["window_s"] = run.window_s;
  report["elapsed_s"] = run.elapsed_s;
  report["cut_at_drain"] = run.cut_at_drain;
  report["offered_rate"] = run.window_s > 0 ? static_cast<double>(overall.arrivals) / run.window_s : 0.0;
  report["overall"] = overall.to_json(run.elapsed_s);
  report["classes"] = json::array();
  for (size_t c = 0; c < classes.size(); ++c) {
    const BenchClass& spec = classes[c].spec;
    json j = per_class[c].to_json(run.elapsed_s);
    j["name"] = spec.name;
    j["kind"] = bench_kind_name(spec.kind);
    j["api"] = bench_api_name(spec.api);
    j["priority"] = spec.priority;
    j["weight"] = spec.weight;
    j["body_bytes_mean"] = classes[c].body_bytes_mean;
    report["classes"].push_back(std::move(j));
  }
  return report;
}

std::string bench_report_table(const json& report) {
  const json& cfg = report["config"];
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "mmserve bench: %s model %s, offered %.1f req/s (target %.1f) for %.1f s, %d connections, seed %u\n",
                cfg["url"].get<std::string>().c_str(), cfg["model"].get<std::string>().c_str(),
                report["offered_rate"].get<double>(), cfg["rate"].get<double>(), report["window_s"].get<double>(),
                cfg["connections"].get<int>(), cfg["seed"].get<unsigned>());
  out += line;
  std::snprintf(line, sizeof line, "%-14s %-7s %4s %8s %8s %8s %6s %6s %7s %8s %8s %8s %8s %8s\n", "class", "api",
                "prio", "arrivals", "sent", "ok", "429", "errors", "drops", "ok/s", "p50 ms", "p95 ms", "p99 ms",
                "max ms");
  out += line;
  auto row = [&](const json& s, const std::string& name, const std::string& api, const std::string& prio) {
    int64_t errors = 0;
    for (const auto& [k, v] : s["errors"].items()) errors += v.get<int64_t>();
    for (const auto& [k, v] : s["transport_errors"].items()) errors += v.get<int64_t>();
    std::snprintf(line, sizeof line, "%-14s %-7s %4s %8lld %8lld %8lld %6lld %6lld %7lld %8.1f %8s %8s %8s %8s\n",
                  name.c_str(), api.c_str(), prio.c_str(), static_cast<long long>(s["arrivals"].get<int64_t>()),
                  static_cast<long long>(s["sent"].get<int64_t>()), static_cast<long long>(s["ok"].get<int64_t>()),
                  static_cast<long long>(s["rejected_429"].get<int64_t>()), static_cast<long long>(errors),
                  static_cast<long long>(s["dropped_by_client"].get<int64_t>()), s["throughput_ok_per_s"].get<double>(),
                  latency_cell(s, "p50").c_str(), latency_cell(s, "p95").c_str(), latency_cell(s, "p99").c_str(),
                  latency_cell(s, "max").c_str());
    out += line;
  };
  for (const json& c : report["classes"]) {
    const int prio = c["priority"].get<int>();  // 0: the model's default
    row(c, c["name"].get<std::string>(), c["api"].get<std::string>(), prio > 0 ? std::to_string(prio) : "-");
  }
  const json& all = report["overall"];
  row(all, "overall", "", "");
  if (!all["errors"].empty()) out += "HTTP errors by code: " + count_map(all["errors"]) + "\n";
  if (!all["transport_errors"].empty()) out += "transport errors: " + count_map(all["transport_errors"]) + "\n";
  if (report["cut_at_drain"].get<int64_t>() > 0) {
    out += "requests cut at the end of the drain: " + std::to_string(report["cut_at_drain"].get<int64_t>()) + "\n";
  }
  return out;
}

}  // namespace mmserve::cli
