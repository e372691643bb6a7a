// LLaVA on the GPU at LLaVA-1.5-7B's shapes (random weights): CLIP ViT-L/14-336 (feature layer -2, CLS dropped:
// 576 image tokens), the 1024 -> 4096 -> 4096 projector, a Llama-2-7B decoder (vocab 32,064). What the engine does
// for a request, piece by piece: host pixels to the tower, the features back to the host, the prompt's prefill with
// the features as the placeholder rows' embeddings (chunked by the scheduler's token budget), greedy sampling on the
// GPU with the ids copied back every step, decode steps from CUDA graphs. bench/run_llava_gpu_bench.sh runs it
// beside bench/hf_llava_gpu.py (HF transformers, same shapes, same GPU, same run).
//
//   llava_gpu_bench [--batches 1,8] [--text 40] [--new-tokens 64] [--iters 3]
// prefill_ms: one request's image encode + its prompt (1 image + --text tokens) to its first token (median of
// --iters); tokens_per_s at batch B: B * N / (the time from B requests' images to their N-th token), prefill
// included, as the HF figures are. One JSON object on stdout.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "decoder_bench_util.h"
#include "engine/decoder_scheduler.h"
#include "engine/kv_block_manager.h"
#include "kernels/sampling/sampling_cuda.h"
#include "models/llama/llama_cuda.h"
#include "models/llava/llava_cuda.h"

using namespace mmserve;
using bench::now_s;

namespace {

// llava-hf/llava-1.5-7b-hf's config.json shapes.
models::LlavaConfig llava_1_5_7b() {
  models::LlavaConfig c;
  c.vision.hidden_size = 1024, c.vision.intermediate_size = 4096, c.vision.num_hidden_layers = 24;
  c.vision.num_attention_heads = 16, c.vision.image_size = 336, c.vision.patch_size = 14;
  c.vision.hidden_act = kernels::Activation::kQuickGelu;
  c.text.vocab_size = 32064, c.text.hidden_size = 4096, c.text.intermediate_size = 11008;
  c.text.num_hidden_layers = 32, c.text.num_attention_heads = 32, c.text.num_key_value_heads = 32;
  c.text.head_dim = 128, c.text.max_position_embeddings = 4096, c.text.rms_norm_eps = 1e-5;
  c.image_token_index = 32000;
  c.feature_layers = {23};  // -2 of 25 hidden states
  c.drop_cls = true;
  c.projector_act = kernels::Activation::kGelu;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string batches = "1,8";
  int64_t text = 40, new_tokens = 64, iters = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--batches")
      batches = next();
    else if (a == "--text")
      text = std::stoll(next());
    else if (a == "--new-tokens")
      new_tokens = std::stoll(next());
    else if (a == "--iters")
      iters = std::stoll(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<int64_t> sizes = bench::parse_batches(batches);
  const int64_t most = *std::max_element(sizes.begin(), sizes.end());
  const models::LlavaConfig cfg = llava_1_5_7b();
  const int64_t t_img = cfg.tokens_per_image(), h = cfg.text.hidden_size, s_img = cfg.vision.image_size;
  models::LlavaCudaVisionOptions vo;
  vo.max_images = most;
  const double t_load = now_s();
  auto vision = models::LlavaCudaVision::random(cfg, vo, 7);
  BENCH_CHECK_OK(vision.status());
  models::LlamaCudaOptions o;
  o.dtype = DType::kBF16;
  o.max_num_seqs = most;
  o.max_num_tokens = 2048;
  o.max_model_len = 1 + t_img + text + new_tokens + 16;
  auto model = models::LlamaCudaModel::random(cfg.text, o, 1);
  BENCH_CHECK_OK(model.status());
  models::LlamaCudaModel& m = **model;
  std::fprintf(stderr, "LLaVA-1.5-7B shapes ready in %.1f s: tower %.2f GB, decoder %.2f GB, pool %.2f GB\n",
               now_s() - t_load, (*vision)->weight_bytes() / 1e9, m.weight_bytes() / 1e9, m.pool_bytes() / 1e9);

  // Host pixels (random levels) and a host buffer for the features, as the executor has them.
  std::mt19937 rng(0);
  std::vector<float> pixels(static_cast<size_t>(most * 3 * s_img * s_img));
  for (float& p : pixels) p = static_cast<float>(rng() % 256) / 128.0f - 1.0f;
  std::vector<float> features(static_cast<size_t>(most * t_img * h));
  // The prompt: BOS, 5 text tokens, the image's placeholders, the rest of the text.
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 5; ++i) prompt.push_back(static_cast<int32_t>(rng() % 32000));
  const int64_t image_at = static_cast<int64_t>(prompt.size());
  prompt.insert(prompt.end(), static_cast<size_t>(t_img), static_cast<int32_t>(cfg.image_token_index));
  while (static_cast<int64_t>(prompt.size()) < 1 + t_img + text) prompt.push_back(static_cast<int32_t>(rng() % 32000));
  const int64_t plen = static_cast<int64_t>(prompt.size());

  bench::Stepper stepper(m, o.max_num_seqs, o.max_num_tokens);
  engine::DecoderScheduler& scheduler = stepper.scheduler;
  std::vector<float> step_embeds;
  std::vector<engine::DecoderSequence>* live = nullptr;  // run()'s sequences (their index picks their features)
  // As the executor does: the placeholder rows of each prefill chunk take their image's features.
  stepper.before_forward = [&](engine::StepPlan& plan) {
    step_embeds.clear();
    int32_t row = 0;
    for (const engine::StepEntry& e : plan.entries) {
      const int64_t which = e.seq - live->data();
      for (int64_t p = e.start; p < e.start + e.count; ++p, ++row) {
        if (p < image_at || p >= image_at + t_img) continue;
        plan.step.embed_rows.push_back(row);
        const float* f = features.data() + (which * t_img + (p - image_at)) * h;
        step_embeds.insert(step_embeds.end(), f, f + h);
      }
    }
    plan.step.embeds = step_embeds.empty() ? nullptr : step_embeds.data();
  };
  // B requests: their images through the tower, their prompts prefilled, then decoded to N tokens each.
  auto run = [&](int64_t b, int64_t n_tokens) {
    std::vector<engine::DecoderSequence> seqs(static_cast<size_t>(b));
    BENCH_CHECK_OK((*vision)->encode(pixels.data(), b, features.data()));
    for (auto& q : seqs) {
      q.tokens = prompt;
      scheduler.add(&q);
    }
    live = &seqs;
    while (std::any_of(seqs.begin(), seqs.end(),
                       [&](const auto& q) { return static_cast<int64_t>(q.tokens.size()) < plen + n_tokens; })) {
      stepper.step();
    }
    for (auto& q : seqs) scheduler.remove(&q);
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  nlohmann::json out = {{"arch", "llava-1.5-7b"},
                        {"image_tokens", t_img},
                        {"prompt_tokens", plen},
                        {"new_tokens", new_tokens},
                        {"decode", nlohmann::json::array()}};
  std::vector<double> prefill, tower;
  for (int64_t it = 0; it <= iters; ++it) {
    const double t0 = now_s();
    BENCH_CHECK_OK((*vision)->encode(pixels.data(), 1, features.data()));
    const double t1 = now_s();
    run(1, 1);  // encodes again: the prefill figure below is the whole first token, the tower figure its share
    const double t2 = now_s();
    if (it > 0) {
      tower.push_back(1000 * (t1 - t0));
      prefill.push_back(1000 * (t2 - t1));
    }
  }
  out["prefill_ms"] = median(prefill);
  out["tower_ms"] = median(tower);
  std::fprintf(stderr, "first token (1 image + %lld text tokens): %.1f ms (tower %.1f ms)\n",
               static_cast<long long>(plen - t_img), median(prefill), median(tower));
  for (int64_t b : sizes) {
    std::vector<double> rates;
    for (int64_t it = 0; it <= iters; ++it) {
      const double t0 = now_s();
      run(b, new_tokens);
      const double t = now_s() - t0;
      if (it > 0) rates.push_back(static_cast<double>(b * new_tokens) / t);
    }
    out["decode"].push_back({{"batch", b}, {"tokens_per_s", median(rates)}});
    std::fprintf(stderr, "batch %lld: %.1f tok/s (prefill included)\n", static_cast<long long>(b), median(rates));
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
