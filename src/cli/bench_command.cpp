// `mmserve bench`: an open-loop load generator against a running mmserve (or any server speaking the same
// KServe v2 / OpenAI embeddings routes). It checks the server is ready, picks the model (--model, else the
// first of GET /v1/models), builds the profile's request bodies once, runs Poisson arrivals at --rate for
// --duration over at most --connections connections (bench_runner.h), and prints the per-class and overall
// report (bench_report.h) as a table or JSON. Exit 0 when the run completed and at least one request
// succeeded; 1 with a message otherwise.
//
//   mmserve bench --url http://127.0.0.1:8000 --rate 50 --duration 10 [--profile mix.yaml]
//
// With --generate it runs the generation profile instead (bench_generate.h: streaming completions, TTFT and
// inter-token latency).
//
// Tests: tests/e2e/client_test.sh bench and bench-generate (ctest e2e_client_bench*), against the real server.
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <tuple>

#include "cli/bench_generate.h"
#include "cli/bench_payloads.h"
#include "cli/bench_profile.h"
#include "cli/bench_report.h"
#include "cli/bench_runner.h"
#include "cli/commands.h"

namespace mmserve::cli {
namespace {

constexpr double kMaxArrivals = 5e6;  // outcomes are kept in memory (~32 bytes each)
constexpr int kMaxConnections = 4096;

httplib::Headers auth_headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

// Waits up to `timeout_s` for GET /v2/health/ready to answer 200 while the server answers at all (a server
// still loading answers 503); no answer at all fails at once.
Status wait_ready(httplib::Client& client, const ServerUrl& server, const std::string& url, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    httplib::Result res = client.Get(server.base_path + "/v2/health/ready");
    if (!res) {
      return failed_precondition("server at " + url + " is not reachable (" + httplib::to_string(res.error()) + ")");
    }
    if (res->status == 200) return ok_status();
    if (std::chrono::steady_clock::now() >= deadline) {
      return failed_precondition("server at " + url + " is not ready (GET /v2/health/ready: HTTP " +
                                 std::to_string(res->status) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// The first model of GET /v1/models.
StatusOr<std::string> first_model(httplib::Client& client, const ServerUrl& server, const std::string& api_key) {
  httplib::Result res = client.Get(server.base_path + "/v1/models", auth_headers(api_key));
  if (!res) return failed_precondition("GET /v1/models: " + httplib::to_string(res.error()));
  if (res->status != 200) {
    return failed_precondition("GET /v1/models: HTTP " + std::to_string(res->status) + ": " + res->body);
  }
  const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return failed_precondition("GET /v1/models lists no model; give --model");
  }
  return j["data"][0]["id"].get<std::string>();
}

// "N" or "MIN:MAX" (non-negative integers).
StatusOr<std::pair<int, int>> parse_range(const std::string& text, const std::string& flag) {
  const size_t colon = text.find(':');
  const std::string a = text.substr(0, colon), b = colon == std::string::npos ? a : text.substr(colon + 1);
  auto number = [](const std::string& s) -> std::optional<int> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoi(s);
  };
  const std::optional<int> lo = number(a), hi = number(b);
  if (!lo || !hi) return invalid_argument(flag + " must be N or MIN:MAX, not '" + text + "'");
  return std::make_pair(*lo, *hi);
}

// --generate: the generation profile (bench_generate.h).
int run_generate(const BenchArgs& args, const ServerUrl& server, httplib::Client& probe) {
  GenerateBenchOptions o;
  o.server = server;
  o.url = args.url;
  o.api_key = args.api_key;
  o.concurrency = args.concurrency;
  o.rate = args.concurrency > 0 ? 0 : args.rate;  // --concurrency overrides --rate
  o.connections = args.connections;
  o.duration_s = args.duration_s;
  o.timeout_s = args.timeout_s;
  o.seed = args.seed;
  o.prompt_text = args.prompt;
  o.prefix_tokens = args.prefix_tokens;
  for (auto [text, flag, lo, hi] : {std::make_tuple(args.prompt_tokens, "--prompt-tokens", &o.prompt_tokens_min,
                                                    &o.prompt_tokens_max),
                                    std::make_tuple(args.max_tokens, "--max-tokens", &o.max_tokens_min,
                                                    &o.max_tokens_max),
                                    std::make_tuple(args.token_ids, "--token-ids", &o.token_id_min, &o.token_id_max)}) {
    auto range = parse_range(text, flag);
    if (!range.ok()) return fail(range.status().message());
    *lo = range->first;
    *hi = range->second;
  }
  if (Status s = validate_generate_options(o); !s.ok()) return fail(s.message());
  o.model = args.model;
  if (o.model.empty()) {
    auto first = first_model(probe, server, args.api_key);
    if (!first.ok()) return fail(first.status().message());
    o.model = std::move(first).value();
  }
  std::fprintf(stderr, "mmserve bench --generate: %s, model %s, %s for %.1f s\n", args.url.c_str(), o.model.c_str(),
               o.concurrency > 0 ? ("closed loop, " + std::to_string(o.concurrency) + " clients").c_str()
                                 : ("open loop, " + std::to_string(o.rate) + " req/s").c_str(),
               o.duration_s);
  const GenerateRun run = run_generate_bench(o);
  const nlohmann::json report = generate_report_json(o, run);
  const std::string json_text = report.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (args.output == "json") {
    std::printf("%s\n", json_text.c_str());
  } else {
    std::fputs(bench_report_table(report).c_str(), stdout);
    const nlohmann::json& all = report["overall"];
    for (const char* key : {"ttft_ms", "itl_ms", "tpot_ms"}) {
      if (all[key].is_null()) continue;
      std::printf("%-8s p50 %8.2f  p90 %8.2f  p99 %8.2f  max %8.2f\n", key, all[key]["p50"].get<double>(),
                  all[key]["p90"].get<double>(), all[key]["p99"].get<double>(), all[key]["max"].get<double>());
    }
    std::printf("output tokens %lld, %.1f tokens/s\n", static_cast<long long>(all["output_tokens"].get<int64_t>()),
                all["output_tokens_per_s"].get<double>());
  }
  std::fflush(stdout);
  if (!args.json_file.empty()) {
    std::ofstream out(args.json_file);
    out << json_text << "\n";
    if (!out) return fail("cannot write " + args.json_file);
  }
  if (report["overall"]["ok"].get<int64_t>() == 0) return fail("no request succeeded (see the report)");
  return 0;
}

}  // namespace

int run_bench(const BenchArgs& args) {
  auto server = parse_server_url(args.url);
  if (!server.ok()) return fail(server.status().message());
  if (args.connections < 1 || args.connections > kMaxConnections) {
    return fail("--connections must be in 1.." + std::to_string(kMaxConnections));
  }
  if (args.rate * args.duration_s > kMaxArrivals) {
    return fail("--rate x --duration above " + std::to_string(static_cast<long long>(kMaxArrivals)) +
                " arrivals; run shorter");
  }
  BenchProfile profile = default_bench_profile();
  if (!args.profile_file.empty()) {
    auto loaded = load_bench_profile(args.profile_file);
    if (!loaded.ok()) return fail(loaded.status().message());
    profile = std::move(loaded).value();
  }

  httplib::Client probe(server->host, server->port);
  probe.set_connection_timeout(std::chrono::seconds(5));
  probe.set_read_timeout(std::chrono::seconds(10));
  if (Status s = wait_ready(probe, *server, args.url, 10); !s.ok()) return fail(s.message());
  if (args.generate) return run_generate(args, *server, probe);
  std::string model = args.model;
  if (model.empty()) {
    auto first = first_model(probe, *server, args.api_key);
    if (!first.ok()) return fail(first.status().message());
    model = std::move(first).value();
  }
  auto classes = prepare_requests(profile, model, server->base_path);
  if (!classes.ok()) return fail(classes.status().message());

  RunnerOptions options;
  options.server = *server;
  options.api_key = args.api_key;
  options.rate = args.rate;
  options.duration_s = args.duration_s;
  options.timeout_s = profile.timeout_s;
  options.connections = args.connections;
  options.seed = args.seed;
  options.keep_alive = profile.keep_alive;
  std::fprintf(stderr, "mmserve bench: %s, model %s, %zu classes (%s), %.1f req/s for %.1f s, %d connections\n",
               args.url.c_str(), model.c_str(), classes->size(), profile.source.c_str(), args.rate, args.duration_s,
               args.connections);
  const BenchRun run = run_open_loop(options, *classes);

  BenchConfig config{args.url,         model,     profile.source,    args.rate, args.duration_s, profile.timeout_s,
                     args.connections, args.seed, profile.keep_alive};
  const nlohmann::json report = bench_report_json(config, *classes, run);
  const std::string json_text = report.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (args.output == "json") {
    std::printf("%s\n", json_text.c_str());
  } else {
    std::fputs(bench_report_table(report).c_str(), stdout);
  }
  std::fflush(stdout);
  if (!args.json_file.empty()) {
    std::ofstream out(args.json_file);
    out << json_text << "\n";
    if (!out) return fail("cannot write " + args.json_file);
  }
  if (report["overall"]["ok"].get<int64_t>() == 0) return fail("no request succeeded (see the report)");
  return 0;
}

}  // namespace mmserve::cli
