// What the decoder GPU benches share (llama_gpu_bench.cpp, llava_gpu_bench.cpp, mixtral_gpu_bench.cpp): a wall
// clock, fatal checks, the --batches list, greedy sampling on the GPU with the ids copied back, and engine steps
// over one model (the scheduler's plan, forward, sample, the tokens appended), as the executor runs them.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "engine/decoder_scheduler.h"
#include "engine/kv_block_manager.h"
#include "kernels/sampling/sampling_cuda.h"
#include "models/llama/llama_cuda.h"

namespace mmserve::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define BENCH_CHECK_OK(expr)                                           \
  do {                                                                 \
    ::mmserve::Status _s = (expr);                                     \
    if (!_s.ok()) {                                                    \
      std::fprintf(stderr, "%s: %s\n", #expr, _s.to_string().c_str()); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

// "1,8,32" -> {1, 8, 32}.
inline std::vector<int64_t> parse_batches(const std::string& text) {
  std::vector<int64_t> sizes;
  for (size_t p = 0; p < text.size();) {
    const size_t q = text.find(',', p);
    sizes.push_back(std::stoll(text.substr(p, q - p)));
    p = q == std::string::npos ? text.size() : q + 1;
  }
  return sizes;
}

// Greedy rows on the GPU: sample(logits, rows) leaves the ids in ids() (host) once the stream is synchronised.
class GreedySampler {
 public:
  GreedySampler(int64_t max_rows, int64_t vocab) : vocab_(vocab), ids_(static_cast<size_t>(max_rows)) {
    BENCH_CHECK_OK(
        cuda_status(cudaMalloc(&params_, max_rows * sizeof(kernels::SamplingRowParams)), "malloc", __FILE__, __LINE__));
    BENCH_CHECK_OK(cuda_status(cudaMalloc(&d_ids_, max_rows * sizeof(int32_t)), "malloc", __FILE__, __LINE__));
    std::vector<kernels::SamplingRowParams> greedy(static_cast<size_t>(max_rows));
    for (auto& p : greedy) p.temperature = 0;
    cudaMemcpy(params_, greedy.data(), greedy.size() * sizeof(greedy[0]), cudaMemcpyHostToDevice);
  }
  ~GreedySampler() {
    cudaFree(params_);
    cudaFree(d_ids_);
  }
  void sample(const float* logits, int64_t rows, cudaStream_t s) {
    kernels::SamplingArgs a;
    a.logits = const_cast<float*>(logits), a.rows = rows, a.vocab = vocab_, a.vocab_ld = vocab_;
    a.params = params_, a.ids = d_ids_;
    BENCH_CHECK_OK(kernels::sample_tokens_cuda(a, s));
    cudaMemcpyAsync(ids_.data(), d_ids_, rows * sizeof(int32_t), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
  }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  int64_t vocab_;
  kernels::SamplingRowParams* params_ = nullptr;
  int32_t* d_ids_ = nullptr;
  std::vector<int32_t> ids_;
};

// Engine steps over one model without prefix caching: step() schedules, runs `before_forward` on the plan (LLaVA's
// image rows) when set, forwards, samples greedily and appends each sampled token to its sequence.
struct Stepper {
  models::LlamaCudaModel& m;
  GreedySampler sampler;
  engine::KvBlockManager blocks;
  engine::DecoderScheduler scheduler;
  std::function<void(engine::StepPlan&)> before_forward;
  Stepper(models::LlamaCudaModel& model, int64_t max_seqs, int64_t max_tokens)
      : m(model),
        sampler(max_seqs, model.config().vocab_size),
        blocks(model.num_blocks(), model.block_size(), false),
        scheduler(config(model, max_seqs, max_tokens), blocks) {}
  static engine::SchedulerConfig config(const models::LlamaCudaModel& m, int64_t seqs, int64_t tokens) {
    engine::SchedulerConfig sc;
    sc.max_num_seqs = seqs, sc.max_num_batched_tokens = tokens, sc.table_ld = m.table_ld();
    return sc;
  }
  void step() {
    engine::StepPlan plan = scheduler.schedule();
    if (before_forward) before_forward(plan);
    BENCH_CHECK_OK(m.forward(plan.step));
    sampler.sample(m.logits(), static_cast<int64_t>(plan.step.logit_rows.size()), m.stream());
    scheduler.complete(plan);
    size_t r = 0;
    for (const engine::StepEntry& e : plan.entries) {
      if (e.wants_logits) e.seq->tokens.push_back(sampler.ids()[r++]);
    }
  }
};

}  // namespace mmserve::bench
