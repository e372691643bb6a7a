// Mixtral on the GPU (issue 15's performance section), random weights, bf16, the engine's own pieces
// (LlamaCudaModel's steps, the scheduler's block tables, greedy sampling on the GPU, the ids back every step):
//
//   --mode stack: SPEC 4.1's claim with our kernels. A Mixtral-shaped layer stack (hidden 4096, experts of 14336,
//                 GQA 32/8) with --experts experts, routed top-2 against every expert weighted by the full softmax
//                 (top-E renormalised is exactly that), one prefill of each --seqs length: ms and the ratio; top-2
//                 also with one cuBLASLt GEMM per expert (moe_grouped_rows 0), the path the grouped GEMM replaced.
//   --mode decode: Mixtral-8x7B's shapes (32 layers, 8 experts, top-2, vocab 32,000): decode tokens/s at each
//                 --batches size (prompts of --prompt tokens, --new-tokens each; the prefill not timed), and the
//                 batch-1 limit set by reading the active weights once per token at --hbm-tbps;
//                 --moe-grouped-rows 0 runs the per-expert baseline (a second process: the weights fill the GPU).
// One JSON object on stdout.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "decoder_bench_util.h"
#include "engine/decoder_scheduler.h"
#include "engine/kv_block_manager.h"
#include "models/llama/llama_cuda.h"

using namespace mmserve;
using bench::now_s;

namespace {

models::LlamaConfig mixtral(int64_t layers, int64_t experts, int64_t k) {
  models::LlamaConfig c;
  c.architecture = "MixtralForCausalLM";
  c.vocab_size = 32000, c.hidden_size = 4096, c.intermediate_size = 14336, c.num_hidden_layers = layers;
  c.num_attention_heads = 32, c.num_key_value_heads = 8, c.head_dim = 128, c.max_position_embeddings = 32768;
  c.rope_theta = 1e6, c.rms_norm_eps = 1e-5;
  c.num_experts = experts, c.experts_per_token = k;
  return c;
}

std::vector<int32_t> random_prompt(int64_t n, std::mt19937& rng) {
  std::vector<int32_t> p;
  for (int64_t t = 0; t < n; ++t) p.push_back(static_cast<int32_t>(rng() % 32000));
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "stack", batches = "1,32", seqs = "512,2048";
  int64_t layers = 4, experts = 32, prompt = 128, new_tokens = 64, iters = 3;
  int64_t grouped_rows = models::LlamaCudaOptions{}.moe_grouped_rows;  // decode: 0 runs the per-expert baseline
  double hbm = 4.24;  // TB/s measured on the H200 (docs/perf/llama_gpu.md)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--mode")
      mode = next();
    else if (a == "--batches")
      batches = next();
    else if (a == "--seqs")
      seqs = next();
    else if (a == "--layers")
      layers = std::stoll(next());
    else if (a == "--experts")
      experts = std::stoll(next());
    else if (a == "--prompt")
      prompt = std::stoll(next());
    else if (a == "--new-tokens")
      new_tokens = std::stoll(next());
    else if (a == "--iters")
      iters = std::stoll(next());
    else if (a == "--moe-grouped-rows")
      grouped_rows = std::stoll(next());
    else if (a == "--hbm-tbps")
      hbm = std::stod(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::mt19937 rng(0);
  nlohmann::json out = {{"mode", mode}};
  if (mode == "stack") {
    const std::vector<int64_t> lengths = bench::parse_batches(seqs);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    out["layers"] = layers, out["experts"] = experts, out["runs"] = nlohmann::json::array();
    // top-2 by the default paths (the grouped GEMM up to moe_grouped_rows pairs per expert), top-2 with one cuBLASLt
    // GEMM per expert (the path the grouped GEMM replaced), and every expert by the default paths.
    struct Variant {
      const char* name;
      int64_t k, grouped_rows;
    };
    const models::LlamaCudaOptions defaults;
    const std::vector<Variant> variants = {
        {"top2", 2, defaults.moe_grouped_rows}, {"top2_per_expert", 2, 0}, {"all", experts, defaults.moe_grouped_rows}};
    std::map<std::string, std::map<int64_t, double>> ms;  // variant -> length -> ms
    for (const Variant& v : variants) {
      models::LlamaCudaOptions o;
      o.max_num_seqs = 1, o.max_num_tokens = longest, o.max_model_len = longest + 16;
      o.kv_cache_bytes = int64_t{1} << 30;
      o.moe_grouped_rows = v.grouped_rows;
      auto model = models::LlamaCudaModel::random(mixtral(layers, experts, v.k), o, 1);
      BENCH_CHECK_OK(model.status());
      bench::Stepper st(**model, 1, longest);
      for (int64_t n : lengths) {
        std::vector<double> times;
        for (int64_t it = 0; it <= iters; ++it) {
          engine::DecoderSequence q;
          q.tokens = random_prompt(n, rng);
          st.scheduler.add(&q);
          const double t0 = now_s();
          st.step();  // the whole prompt in one step, to its first token
          const double t = now_s() - t0;
          st.scheduler.remove(&q);
          if (it > 0) times.push_back(1000 * t);
        }
        ms[v.name][n] = median(times);
        std::fprintf(stderr, "stack: %lld layers, %s of %lld experts, %lld tokens: %.2f ms\n",
                     static_cast<long long>(layers), v.name, static_cast<long long>(experts),
                     static_cast<long long>(n), ms[v.name][n]);
      }
    }
    for (int64_t n : lengths) {
      out["runs"].push_back({{"tokens", n},
                             {"top2_ms", ms["top2"][n]},
                             {"top2_per_expert_ms", ms["top2_per_expert"][n]},
                             {"all_ms", ms["all"][n]},
                             {"speedup", ms["all"][n] / ms["top2"][n]},
                             {"grouped_vs_per_expert", ms["top2_per_expert"][n] / ms["top2"][n]},
                             {"top2_tokens_per_s", 1000.0 * n / ms["top2"][n]},
                             {"all_tokens_per_s", 1000.0 * n / ms["all"][n]}});
    }
  } else if (mode == "decode") {
    const std::vector<int64_t> sizes = bench::parse_batches(batches);
    const int64_t most = *std::max_element(sizes.begin(), sizes.end());
    const models::LlamaConfig c = mixtral(32, 8, 2);
    models::LlamaCudaOptions o;
    o.max_num_seqs = most, o.max_num_tokens = std::max<int64_t>(prompt * most, 2048);
    o.max_model_len = prompt + new_tokens + 16;
    o.kv_cache_bytes = int64_t{8} << 30;
    o.moe_grouped_rows = grouped_rows;
    out["moe_grouped_rows"] = grouped_rows;
    const double t_load = now_s();
    auto model = models::LlamaCudaModel::random(c, o, 1);
    BENCH_CHECK_OK(model.status());
    std::fprintf(stderr, "Mixtral-8x7B shapes ready in %.1f s: weights %.1f GB\n", now_s() - t_load,
                 (*model)->weight_bytes() / 1e9);
    // Bytes one decode token reads: attention, norms, router and 2 of 8 experts per layer, and lm_head.
    const double h = 4096, inter = 14336, kv = 1024;
    const double per_layer = (h * h * 2 + h * kv * 2) + 2 * 3 * h * inter + 8 * h + 2 * h;
    const double active_bytes = 2.0 * (32 * per_layer + 32000 * h + h);
    out["active_gb_per_token"] = active_bytes / 1e9;
    out["limit_tokens_per_s"] = hbm * 1e12 / active_bytes;
    out["weights_gb"] = (*model)->weight_bytes() / 1e9;
    out["decode"] = nlohmann::json::array();
    bench::Stepper st(**model, most, o.max_num_tokens);
    for (int64_t b : sizes) {
      std::vector<double> rates;
      for (int64_t it = 0; it <= iters; ++it) {
        std::vector<engine::DecoderSequence> q(static_cast<size_t>(b));
        for (auto& s : q) {
          s.tokens = random_prompt(prompt, rng);
          st.scheduler.add(&s);
        }
        while (std::any_of(q.begin(), q.end(), [&](const auto& s) { return (int64_t)s.tokens.size() == prompt; })) {
          st.step();
        }
        const double t0 = now_s();
        for (int64_t n = 1; n < new_tokens; ++n) st.step();
        const double t = now_s() - t0;
        for (auto& s : q) st.scheduler.remove(&s);
        if (it > 0) rates.push_back(static_cast<double>(b * (new_tokens - 1)) / t);
      }
      out["decode"].push_back({{"batch", b}, {"tokens_per_s", median(rates)}});
      std::fprintf(stderr, "Mixtral-8x7B batch %lld: %.1f tok/s (limit at batch 1: %.1f)\n", static_cast<long long>(b),
                   median(rates), out["limit_tokens_per_s"].get<double>());
    }
  } else {
    std::fprintf(stderr, "--mode stack|decode\n");
    return 2;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
