// The generation profile of `mmserve bench` (`--generate`): streaming POST /v1/completions requests with prompts of
// random token ids (lengths drawn from a range, optionally after a shared prefix of K ids: the prefix-caching
// benchmark) or one text prompt, max_tokens drawn from a range and ignore_eos (so every request generates what it
// asked), sent at open-loop Poisson arrivals (--rate, over at most --connections; an arrival finding all busy is
// dropped and counted, as the embeddings profiles do) or closed-loop (--concurrency clients, each sending its next
// request when the last one ended).
//
// Measured on the client per request: TTFT (scheduled send -> the first chunk with text), inter-token latency (the
// gaps between chunks with text), end-to-end latency (-> the last byte), TPOT ((e2e - TTFT) / (tokens - 1)), and
// the output tokens from the stream's usage chunk (stream_options.include_usage). Reported in the shape of the other
// profiles ({"config", "window_s", "elapsed_s", "overall", "classes": [one "generate" class]}), with p50/p90/p95/p99,
// max and mean of each latency, output tokens/s and requests/s. docs/load-testing.md describes it for users.
// Tested end to end by tests/e2e/client_test.sh bench-generate (against the real server with stories260K).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_runner.h"
#include "core/status.h"

namespace mmserve::cli {

struct GenerateBenchOptions {
  ServerUrl server;
  std::string url, api_key, model;
  double rate = 0;      // > 0: open loop (Poisson arrivals)
  int concurrency = 0;  // > 0: closed loop (instead of rate)
  int connections = 64;
  double duration_s = 10;
  double timeout_s = 60;
  unsigned seed = 1;
  std::string prompt_text;  // non-empty: every prompt is this text (then no random ids and no prefix)
  int prompt_tokens_min = 32, prompt_tokens_max = 128;  // random ids after the shared prefix
  int prefix_tokens = 0;                                 // the same K random ids first in every prompt
  int token_id_min = 3, token_id_max = 512;              // ids drawn from [min, max)
  int max_tokens_min = 32, max_tokens_max = 128;
};

// kInvalidArgument naming the flag for inconsistent options.
Status validate_generate_options(const GenerateBenchOptions& options);

// What one request measured.
struct GenerateOutcome {
  int http_status = 0;                    // 0: no HTTP answer
  const char* transport_error = nullptr;  // when http_status == 0
  std::string stream_error;               // an error event inside a 200 stream
  double e2e_ms = 0, ttft_ms = -1;        // ttft < 0: no text arrived
  std::vector<double> itl_ms;             // gaps between text chunks
  int64_t prompt_tokens = 0, output_tokens = 0;  // from the usage chunk
  int64_t max_tokens = 0;                        // what was asked
};

struct GenerateRun {
  std::vector<GenerateOutcome> outcomes;
  int64_t arrivals = 0, dropped = 0;
  double window_s = 0, elapsed_s = 0;
  int64_t cut_at_drain = 0;
};

GenerateRun run_generate_bench(const GenerateBenchOptions& options);
nlohmann::json generate_report_json(const GenerateBenchOptions& options, const GenerateRun& run);

}  // namespace mmserve::cli
