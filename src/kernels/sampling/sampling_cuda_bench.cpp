// Micro-benchmark of sample_tokens_cuda() at Llama-3's vocabulary (128256) for 1, 32 and 64 rows: greedy, top-p
// 0.9 (T 0.7), and top-k 50 + top-p 0.9 with the repetition penalty over 512 seen ids and raw logprobs + top-5.
// `bytes` counts the logits read ONCE (rows * vocab * 4); the kernel makes several passes (greedy 1, top-p ~8,
// the radix passes mostly from L2), so GB/s here is the effective rate per logit row, against HBM's ~4.2 TB/s.
// Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

template <typename T>
T* upload(const std::vector<T>& host) {
  void* d = nullptr;
  if (cudaMalloc(&d, host.size() * sizeof(T) + 1) != cudaSuccess) return nullptr;
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T*>(d);
}

void bench_case(CudaBench& bench, int64_t rows, const std::string& label, SamplingRowParams params, bool penalties) {
  const int64_t vocab = 128256;
  auto* logits = static_cast<float*>(device_random(DType::kF32, rows * vocab, 1));
  std::vector<SamplingRowParams> host_params(rows, params);
  for (int64_t r = 0; r < rows; ++r) host_params[r].seed = 1000 + r;
  std::vector<int32_t> offsets(rows + 1), seen, prompt_lens(rows, 256);
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < (penalties ? 512 : 0); ++j) seen.push_back(static_cast<int32_t>((r * 7919 + j * 104729) % vocab));
    offsets[r + 1] = static_cast<int32_t>(seen.size());
  }
  seen.push_back(0);
  SamplingRowParams* dparams = upload(host_params);
  int32_t* doffsets = upload(offsets);
  int32_t* dseen = upload(seen);
  int32_t* dprompt = upload(prompt_lens);
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, rows * vocab * 8) == cudaSuccess) cudaMemset(scratch, 0, rows * vocab * 8);
  int32_t* ids = upload(std::vector<int32_t>(rows));
  float* logprobs = upload(std::vector<float>(rows));
  int32_t* top_ids = upload(std::vector<int32_t>(rows * 5));
  float* top_logprobs = upload(std::vector<float>(rows * 5));
  SamplingArgs a;
  a.logits = logits;
  a.rows = rows;
  a.vocab = a.vocab_ld = vocab;
  a.params = dparams;
  if (penalties) {
    a.seen_offsets = doffsets;
    a.seen_ids = dseen;
    a.prompt_lens = dprompt;
    a.scratch = static_cast<uint64_t*>(scratch);
    a.logprobs = logprobs;
    a.top_n = 5;
    a.top_ids = top_ids;
    a.top_logprobs = top_logprobs;
  }
  a.ids = ids;
  const std::string shape = "rows=" + std::to_string(rows) + " vocab=128256 " + label;
  const Status first = logits && dparams && scratch && ids ? sample_tokens_cuda(a, bench.stream())
                                                           : internal_error("cudaMalloc failed");
  if (first.ok()) {
    // Penalties rewrite the seen logits each call (same values each time: repeated penalties only shrink them,
    // the work is the same).
    bench.run("sampling", shape, 0, static_cast<double>(rows) * vocab * 4,
              [&] { (void)sample_tokens_cuda(a, bench.stream()); });
  } else {
    std::fprintf(stderr, "sampling %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(dparams), static_cast<void*>(doffsets),
                  static_cast<void*>(dseen), static_cast<void*>(dprompt), scratch, static_cast<void*>(ids),
                  static_cast<void*>(logprobs), static_cast<void*>(top_ids), static_cast<void*>(top_logprobs)}) {
    cudaFree(p);
  }
}

}  // namespace

void bench_sampling_cuda(CudaBench& bench) {
  SamplingRowParams greedy;
  greedy.temperature = 0.0f;
  SamplingRowParams top_p;
  top_p.temperature = 0.7f;
  top_p.top_p = 0.9f;
  SamplingRowParams full = top_p;
  full.top_k = 50;
  full.repetition_penalty = 1.1f;
  for (int64_t rows : {1, 32, 64}) {
    bench_case(bench, rows, "greedy", greedy, false);
    bench_case(bench, rows, "top-p 0.9 T 0.7", top_p, false);
    bench_case(bench, rows, "top-k 50 + top-p 0.9 + repetition, logprobs + top-5", full, true);
  }
}

}  // namespace mmserve::kernels
