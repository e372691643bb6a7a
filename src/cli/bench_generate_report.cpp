// The generation profile's report (see bench_generate.h): outcomes folded into the counts of the other profiles
// (bench_report.h's definitions) plus the streaming latencies and token throughput.
#include <map>
#include <numeric>

#include "cli/bench_generate.h"
#include "cli/bench_report.h"

namespace mmserve::cli {
namespace {

using nlohmann::json;

// p50/p90/p95/p99 (nearest rank), max and mean of `values`; null when there are none.
json stats(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  const double sum = std::accumulate(values.begin(), values.end(), 0.0);
  return {{"p50", percentile_sorted(values, 50)}, {"p90", percentile_sorted(values, 90)},
          {"p95", percentile_sorted(values, 95)}, {"p99", percentile_sorted(values, 99)},
          {"max", values.back()},                 {"mean", sum / static_cast<double>(values.size())}};
}

}  // namespace

json generate_report_json(const GenerateBenchOptions& o, const GenerateRun& run) {
  int64_t ok = 0, rejected_429 = 0, http_5xx = 0, output_tokens = 0, prompt_tokens = 0, short_outputs = 0;
  std::map<std::string, int64_t> errors, transport_errors;
  std::vector<double> e2e, ttft, itl, tpot;
  for (const GenerateOutcome& out : run.outcomes) {
    if (out.http_status == 200 && out.stream_error.empty()) {
      ++ok;
      e2e.push_back(out.e2e_ms);
      if (out.ttft_ms >= 0) ttft.push_back(out.ttft_ms);
      itl.insert(itl.end(), out.itl_ms.begin(), out.itl_ms.end());
      if (out.output_tokens > 1 && out.ttft_ms >= 0) {
        tpot.push_back((out.e2e_ms - out.ttft_ms) / static_cast<double>(out.output_tokens - 1));
      }
      output_tokens += out.output_tokens;
      prompt_tokens += out.prompt_tokens;
      short_outputs += out.output_tokens != out.max_tokens;
    } else if (out.http_status == 200) {
      ++errors["stream_error"];
    } else if (out.http_status == 429) {
      ++rejected_429;
    } else if (out.http_status != 0) {
      ++errors[std::to_string(out.http_status)];
      http_5xx += out.http_status >= 500;
    } else {
      ++transport_errors[out.transport_error != nullptr ? out.transport_error : "unknown"];
    }
  }
  const double elapsed = run.elapsed_s > 0 ? run.elapsed_s : 1;
  json s = {{"arrivals", run.arrivals},
            {"sent", static_cast<int64_t>(run.outcomes.size())},
            {"dropped_by_client", run.dropped},
            {"ok", ok},
            {"rejected_429", rejected_429},
            {"errors", errors},
            {"transport_errors", transport_errors},
            {"http_5xx", http_5xx},
            {"throughput_ok_per_s", static_cast<double>(ok) / elapsed},
            {"latency_ms", stats(e2e)},
            {"ttft_ms", stats(ttft)},
            {"itl_ms", stats(itl)},
            {"tpot_ms", stats(tpot)},
            {"prompt_tokens", prompt_tokens},
            {"output_tokens", output_tokens},
            {"output_tokens_per_s", static_cast<double>(output_tokens) / elapsed},
            {"outputs_shorter_than_asked", short_outputs}};
  json report;
  report["config"] = {{"url", o.url},
                      {"model", o.model},
                      {"profile", "generate"},
                      {"mode", o.concurrency > 0 ? "closed_loop" : "open_loop"},
                      {"rate", o.rate},
                      {"concurrency", o.concurrency},
                      {"duration_s", o.duration_s},
                      {"connections", o.concurrency > 0 ? o.concurrency : o.connections},
                      {"timeout_s", o.timeout_s},
                      {"keep_alive", true},
                      {"seed", o.seed},
                      {"prompt", o.prompt_text.empty() ? json(nullptr) : json(o.prompt_text)},
                      {"prompt_tokens", {o.prompt_tokens_min, o.prompt_tokens_max}},
                      {"prefix_tokens", o.prefix_tokens},
                      {"token_ids", {o.token_id_min, o.token_id_max}},
                      {"max_tokens", {o.max_tokens_min, o.max_tokens_max}}};
  report["window_s"] = run.window_s;
  report["elapsed_s"] = run.elapsed_s;
  report["cut_at_drain"] = run.cut_at_drain;
  report["offered_rate"] = run.window_s > 0 ? static_cast<double>(run.arrivals) / run.window_s : 0.0;
  report["overall"] = s;
  json c = s;
  c["name"] = "generate";
  c["kind"] = "generate";
  c["api"] = "openai";
  c["priority"] = 0;
  c["weight"] = 1;
  report["classes"] = json::array({c});
  return report;
}

}  // namespace mmserve::cli
