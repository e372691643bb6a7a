// The Llama family on the GPU at real checkpoints' shapes (random weights): decode tokens/s at each batch size and
// the prefill time of one long prompt, with the engine's own pieces (LlamaCudaModel's steps, decode CUDA graphs,
// the scheduler's block tables, greedy sampling on the GPU and the ids copied back every step, as the executor
// does). bench/run_llama_gpu_bench.sh runs it beside bench/hf_llama_gpu.py (HF transformers, same shapes, same GPU,
// same run) and prints the ratios.
//
//   llama_gpu_bench --arch llama-3-8b|llama-3.2-1b [--batches 1,32] [--prompt 128] [--new-tokens 128]
//                   [--prefill 2048] [--iters 3] [--no-graphs] [--loras N] [--w4a16 G | --fp8]
//                   [--embeddings-on-host]
// --w4a16 G (issue 17): every decoder linear as random 4-bit weights in groups of G (128, or -1: one group), run
// through kernels/w4a16 (LlamaCudaModel::random_w4a16); bench/run_llama_gpu_bench.sh with W4A16=G runs it beside the
// bf16 run of the same shapes and prints the ratios. The JSON says "weights" and "weight_bytes".
// --embeddings-on-host: LlamaCudaOptions::embeddings_on_host (the token table in host memory); the JSON's
// "host_weight_bytes" says how much stayed there.
// --fp8 (issue 17): every decoder linear as random E4M3 weights with per-tensor static scales (the fp8-static
// checkpoint's path: LlamaCudaModel::random_fp8); the runner's FP8=1.
// --loras N (issue 16): N random rank-16 LoRA adapters on all seven linears in N GPU slots (--lora-slots S: fewer);
// each batch size is then decoded twice in the same process, without adapters and with sequence i of iteration k
// under adapter (k * B + i) % N (every step mixes min(B, N) adapters, the iterations go round all N), and the ratio
// reported. Before that, each adapter's slot image is packed (host) and the first min(N, S) are copied to their
// slots one at a time, timed from the copy's start to its completion (LlamaCudaModel::lora_ready, the engine's
// path): "lora_upload_ms" and "lora_pack_ms" (medians); and one request's gate routing over N adapters
// ("gate_request_us": LlamaCudaModel::gate_first_layer over 128 embedding rows plus the second layer on the host,
// median of 200).
// Decode tokens/s = B * (N - 1) / (time of the N - 1 decode steps after the prompts' prefill); prefill = one step
// of --prefill tokens (median of --iters). One JSON object on stdout.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "decoder_bench_util.h"
#include "core/cuda/cuda_status.h"
#include "engine/decoder_scheduler.h"
#include "engine/kv_block_manager.h"
#include "kernels/sampling/sampling_cuda.h"
#include "models/llama/llama_cuda.h"
#include "models/lora/gate_head.h"

using namespace mmserve;
using bench::now_s;

namespace {

// The shapes of meta-llama/Meta-Llama-3-8B and meta-llama/Llama-3.2-1B (as bench/hf_llama_gpu.py).
models::LlamaConfig arch(const std::string& name) {
  models::LlamaConfig c;
  c.vocab_size = 128256;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  if (name == "llama-3-8b") {
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_hidden_layers = 32, c.head_dim = 128;
    c.max_position_embeddings = 8192;
  } else if (name == "llama-3.2-1b") {
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_hidden_layers = 16, c.head_dim = 64;
    c.max_position_embeddings = 8192;  // the bench's sequences are short; llama3 rope as the checkpoint has it
    c.tie_word_embeddings = true;
    c.rope_scaling.type = "llama3", c.rope_scaling.factor = 32, c.rope_scaling.original_max_position_embeddings = 8192;
  } else {
    std::fprintf(stderr, "unknown --arch %s\n", name.c_str());
    std::exit(2);
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name = "llama-3-8b", batches = "1,32";
  int64_t prompt = 128, new_tokens = 128, prefill = 2048, iters = 3;
  bool graphs = true;
  int64_t loras = 0, lora_slots = -1, w4a16 = 0;  // w4a16: the group size, 0 for bf16 weights
  bool fp8 = false, host_embeddings = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--arch") name = next();
    else if (a == "--batches") batches = next();
    else if (a == "--prompt") prompt = std::stoll(next());
    else if (a == "--new-tokens") new_tokens = std::stoll(next());
    else if (a == "--prefill") prefill = std::stoll(next());
    else if (a == "--iters") iters = std::stoll(next());
    else if (a == "--no-graphs") graphs = false;
    else if (a == "--loras") loras = std::stoll(next());
    else if (a == "--lora-slots") lora_slots = std::stoll(next());
    else if (a == "--w4a16") w4a16 = std::stoll(next());
    else if (a == "--fp8") fp8 = true;
    else if (a == "--embeddings-on-host") host_embeddings = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<int64_t> sizes = bench::parse_batches(batches);
  const int64_t most = *std::max_element(sizes.begin(), sizes.end());
  models::LlamaCudaOptions o;
  o.dtype = DType::kBF16;
  o.max_num_seqs = std::max<int64_t>(most, 1);
  o.max_num_tokens = std::max<int64_t>(prefill, prompt);
  o.max_model_len = std::max(prefill, prompt + new_tokens) + 16;
  o.graphs = graphs;
  o.embeddings_on_host = host_embeddings;
  o.max_loras = lora_slots >= 0 ? std::min(lora_slots, loras) : loras, o.max_lora_rank = 16;
  const double t_load = now_s();
  auto model = w4a16 != 0 ? models::LlamaCudaModel::random_w4a16(arch(name), o, 1, w4a16)
               : fp8        ? models::LlamaCudaModel::random_fp8(arch(name), o, 1)
                            : models::LlamaCudaModel::random(arch(name), o, 1);
  BENCH_CHECK_OK(model.status());
  models::LlamaCudaModel& m = **model;
  const std::string weights = w4a16 != 0 ? "w4a16 g" + std::to_string(w4a16) : fp8 ? "fp8 e4m3 per-tensor" : "bf16";
  std::fprintf(stderr, "%s (%s) ready in %.1f s: weights %.2f GB (%.2f GiB) on the GPU, %.2f GB on the host, pool %.2f GB (%lld blocks)\n",
               name.c_str(), weights.c_str(), now_s() - t_load, m.weight_bytes() / 1e9, m.weight_bytes() / 1073741824.0,
               m.host_weight_bytes() / 1e9, m.pool_bytes() / 1e9, static_cast<long long>(m.num_blocks()));
  const int64_t vocab = m.config().vocab_size;
  bench::Stepper stepper(m, o.max_num_seqs, o.max_num_tokens);
  engine::DecoderScheduler& scheduler = stepper.scheduler;
  std::mt19937 rng(0);
  nlohmann::json out = {{"arch", name},     {"graphs", m.graphs()},           {"decode", nlohmann::json::array()},
                        {"weights", weights}, {"weight_bytes", m.weight_bytes()},
                        {"host_weight_bytes", m.host_weight_bytes()}};
  // --loras: random adapters (normal-ish values from a cheap generator; the timing does not depend on them).
  std::vector<std::shared_ptr<models::LoraAdapter>> adapters;
  std::vector<double> pack_ms, upload_ms;
  uint64_t lcg = 12345;
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      x = (static_cast<float>(lcg >> 40) / static_cast<float>(1ull << 24) - 0.5f) * 0.02f;
    }
  };
  for (int64_t a = 0; a < loras; ++a) {
    auto adapter = std::make_shared<models::LoraAdapter>();
    adapter->name = "bench" + std::to_string(a), adapter->id = 1000 + static_cast<uint64_t>(a), adapter->max_rank = 16;
    adapter->layers.resize(static_cast<size_t>(m.config().num_hidden_layers));
    for (auto& layer : adapter->layers) {
      for (int t = 0; t < models::kLoraTargets; ++t) {
        const auto [in, outf] = models::lora_target_features(m.config(), static_cast<models::LoraTarget>(t));
        models::LoraModule& mod = layer[t];
        mod.rank = 16, mod.in = in, mod.out = outf, mod.scale = 2.0f;
        fill(mod.a, static_cast<size_t>(16 * in));
        fill(mod.b, static_cast<size_t>(outf * 16));
      }
    }
    const double t_pack = now_s();
    auto image = models::LlamaCudaModel::pack_lora_slot_image(*adapter, m.config(), o.dtype, o.max_lora_rank);
    BENCH_CHECK_OK(image.status());
    pack_ms.push_back(1000 * (now_s() - t_pack));
    adapter->slot_image = *image;
    adapters.push_back(std::move(adapter));
  }
  for (int64_t a = 0; a < std::min(loras, o.max_loras); ++a) {  // host (pinned) -> slot, one at a time
    const double t0 = now_s();
    for (;;) {
      auto ready = m.lora_ready(*adapters[static_cast<size_t>(a)]);
      BENCH_CHECK_OK(ready.status());
      if (*ready) break;
    }
    upload_ms.push_back(1000 * (now_s() - t0));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  if (loras > 0) {
    // Gate routing of one request on this GPU model (the engine's admission path for "auto"): the mean of a
    // 128-token prompt's rows of the device's embedding table and the router's first layer (D = hidden, H 256) on the
    // device, the rest (N = --loras) on the host. A random gate, PyTorch's Linear init range; the first request
    // (which copies W1 to the device) is the warm-up.
    const int64_t d = m.config().hidden_size, hidden = 256;
    auto uniform = [&](size_t n, float bound) {
      std::vector<float> v;
      fill(v, n);  // +-0.01: rescaled to +-bound
      for (float& x : v) x *= bound / 0.01f;
      return v;
    };
    std::vector<std::string> names;
    for (int64_t a = 0; a < loras; ++a) names.push_back("bench" + std::to_string(a));
    auto made = models::GateHead::from_weights(d, hidden, uniform(static_cast<size_t>(hidden * d), 1 / std::sqrt(float(d))),
                                               uniform(static_cast<size_t>(hidden), 1 / std::sqrt(float(d))),
                                               uniform(static_cast<size_t>(loras * hidden), 1 / 16.0f),
                                               uniform(static_cast<size_t>(loras), 1 / 16.0f), names);
    BENCH_CHECK_OK(made.status());
    const auto gate = std::make_shared<const models::GateHead>(std::move(*made));
    std::vector<double> gate_us;
    for (int it = 0; it < 201; ++it) {
      std::vector<int32_t> ids(128);
      for (int32_t& id : ids) id = static_cast<int32_t>(rng() % vocab);
      const double t0 = now_s();
      auto hidden = m.gate_first_layer(ids, gate);  // the engine's path for a text prompt on a GPU
      BENCH_CHECK_OK(hidden.status());
      auto choice = gate->route_from_hidden(std::move(*hidden), 2);
      BENCH_CHECK_OK(choice.status());
      if (it > 0) gate_us.push_back(1e6 * (now_s() - t0));  // the first is a warm-up
    }
    out["gate_request_us"] = median(gate_us);
    std::fprintf(stderr, "gate routing (128-token prompt, %lld adapters): %.1f us a request, median\n",
                 static_cast<long long>(loras), median(gate_us));
    const double bytes = static_cast<double>(adapters[0]->slot_image->bytes);
    out["lora_pack_ms"] = median(pack_ms), out["lora_upload_ms"] = median(upload_ms), out["lora_image_bytes"] = bytes;
    out["lora_slots"] = o.max_loras;
    std::fprintf(stderr, "adapter image %.1f MB: pack %.2f ms, upload %.3f ms (%.1f GB/s), medians\n", bytes / 1e6,
                 median(pack_ms), median(upload_ms), bytes / (median(upload_ms) * 1e6));
  }
  std::vector<engine::DecoderSequence>* current = nullptr;
  bool with_loras = false;
  int64_t rotation = 0;  // this iteration's first adapter
  stepper.before_forward = [&](engine::StepPlan& plan) {
    if (!with_loras || current == nullptr) return;
    for (const engine::StepEntry& e : plan.entries) {
      const int64_t index = e.seq - current->data();
      plan.step.loras.push_back(adapters[static_cast<size_t>((rotation + index) % loras)].get());
    }
  };
  for (int variant = 0; variant < (loras > 0 ? 2 : 1); ++variant)
  for (int64_t b : sizes) {
    with_loras = variant == 1;
    std::vector<double> rates;
    for (int64_t it = 0; it <= iters; ++it) {  // the first is a warm-up
      std::vector<engine::DecoderSequence> seqs(static_cast<size_t>(b));
      current = &seqs;
      rotation = it * b;
      for (auto& q : seqs) {
        q.adapter = with_loras ? 1000 + static_cast<uint64_t>((rotation + (&q - seqs.data())) % loras) : 0;
        for (int64_t t = 0; t < prompt; ++t) q.tokens.push_back(static_cast<int32_t>(rng() % vocab));
        scheduler.add(&q);
      }
      // Prefill until every sequence has its first token.
      while (std::any_of(seqs.begin(), seqs.end(), [&](const auto& q) { return (int64_t)q.tokens.size() == prompt; })) {
        stepper.step();
      }
      const double t0 = now_s();
      for (int64_t n = 1; n < new_tokens; ++n) stepper.step();
      const double t = now_s() - t0;
      for (auto& q : seqs) scheduler.remove(&q);
      if (it > 0) rates.push_back(static_cast<double>(b * (new_tokens - 1)) / t);
    }
    std::sort(rates.begin(), rates.end());
    const double rate = rates[rates.size() / 2];
    out["decode"].push_back({{"batch", b}, {"tokens_per_s", rate}, {"loras", with_loras ? std::min(b, loras) : 0}});
    std::fprintf(stderr, "batch %lld%s: %.1f tok/s\n", static_cast<long long>(b),
                 with_loras ? " with adapters" : "", rate);
  }
  current = nullptr, with_loras = false;
  std::vector<double> times;
  for (int64_t it = 0; it <= iters; ++it) {
    engine::DecoderSequence q;
    for (int64_t t = 0; t < prefill; ++t) q.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    scheduler.add(&q);
    const double t0 = now_s();
    stepper.step();
    const double t = now_s() - t0;
    scheduler.remove(&q);
    if (it > 0) times.push_back(1000 * t);
  }
  std::sort(times.begin(), times.end());
  out["prefill"] = {{"tokens", prefill}, {"ms", times[times.size() / 2]}};
  std::fprintf(stderr, "prefill %lld: %.1f ms\n", static_cast<long long>(prefill), times[times.size() / 2]);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
