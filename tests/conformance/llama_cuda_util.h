// Test helpers of the decoders on the GPU (llama_cuda_test.cpp, llava_cuda_test.cpp, llama_cuda_fp8_test.cpp,
// llama_cuda_kv_fp8_test.cpp): one sequence stepped through a LlamaCudaModel by hand, the logit rows' error measure,
// and the CPU model's greedy run the quantised GPU paths are compared with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "models/llama/llama.h"
#include "models/llama/llama_cuda.h"

namespace mmserve::models {

// max |got - want| over a row, relative to the row's largest |want| (at least 1).
inline float row_error(const float* got, const float* want, int64_t vocab) {
  float scale = 1, worst = 0;
  for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(want[v]));
  for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(got[v] - want[v]));
  return worst / scale;
}

// One sequence through the paged model by hand: the prompt in one step, then HF's greedy ids one by one.
struct OneSequence {
  LlamaCudaModel& m;
  int64_t length = 0;
  const LoraAdapter* lora = nullptr;  // the sequence's LoRA adapter (issue 16), or none
  const LoraAdapter* lora2 = nullptr;  // gate routing's second adapter, with `weights` (w for lora, w for lora2)
  std::vector<float> weights = {};
  // `embed_rows` / `embeds`: rows of this call taking their input embedding from host `embeds` (LLaVA's features).
  StatusOr<std::vector<float>> step(const std::vector<int32_t>& tokens, bool all_rows,
                                    const std::vector<int32_t>& embed_rows = {}, const float* embeds = nullptr) {
    DecoderStep s;
    s.tokens = tokens;
    s.embed_rows = embed_rows;
    s.embeds = embeds;
    if (lora != nullptr) s.loras = {lora};
    if (lora2 != nullptr) s.loras_second = {lora2}, s.lora_weights = weights;
    for (size_t t = 0; t < tokens.size(); ++t) {
      s.positions.push_back(static_cast<int32_t>(length + t));
      s.slots.push_back(static_cast<int32_t>(length + t));  // blocks 0, 1, ... in order
    }
    const int64_t n = static_cast<int64_t>(tokens.size());
    s.query_start = {0, static_cast<int32_t>(n)};
    s.seq_lens = {static_cast<int32_t>(length + n)};
    s.table_ld = m.table_ld();
    for (int64_t i = 0; i < s.table_ld; ++i) s.block_tables.push_back(static_cast<int32_t>(i));
    for (int64_t r = all_rows ? 0 : n - 1; r < n; ++r) s.logit_rows.push_back(static_cast<int32_t>(r));
    s.max_seq_len = length + n;
    s.max_query_len = n;
    RETURN_IF_ERROR(m.forward(s));
    length += n;
    const int64_t vocab = m.config().vocab_size;
    std::vector<float> out(s.logit_rows.size() * static_cast<size_t>(vocab));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data(), m.logits(), out.size() * 4, cudaMemcpyDeviceToHost, m.stream()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream()));
    return out;
  }
};

inline int32_t argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

inline float top1_margin(const float* row, int64_t vocab) {
  std::vector<float> v(row, row + vocab);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

inline float row_scale(const float* row, int64_t vocab) {
  float s = 1;
  for (int64_t i = 0; i < vocab; ++i) s = std::max(s, std::fabs(row[i]));
  return s;
}

// The CPU model: every prompt row, then `steps` decode rows each fed the argmax of the row before.
struct CpuRun {
  std::vector<float> prompt, decode;  // [prompt, vocab], [steps + 1, vocab]
  std::vector<int32_t> ids;           // [steps + 1]: ids[s] = argmax of decode row s (row 0: the prompt's last)
};
inline CpuRun cpu_run(const LlamaModel& m, const std::vector<int32_t>& prompt, int64_t steps) {
  const int64_t vocab = m.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  CpuRun r;
  auto cache = m.new_cache(n + steps + 1);
  EXPECT_TRUE(cache.ok());
  r.prompt.resize(static_cast<size_t>(n * vocab));
  EXPECT_TRUE(m.forward(prompt.data(), n, *cache, nullptr, r.prompt.data()).ok());
  r.decode.assign(r.prompt.end() - vocab, r.prompt.end());
  r.ids.push_back(argmax(r.decode.data(), vocab));
  for (int64_t s = 1; s <= steps; ++s) {
    std::vector<float> row(static_cast<size_t>(vocab));
    EXPECT_TRUE(m.forward(&r.ids.back(), 1, *cache, row.data()).ok());
    r.decode.insert(r.decode.end(), row.begin(), row.end());
    r.ids.push_back(argmax(row.data(), vocab));
  }
  return r;
}


// The GPU model fed the CPU's ids (prompt rows, then one decode step per CPU id): the worst row error, greedy
// agreement where the CPU's margin is decisive (above twice `bound` of the row's scale), and the logit rows.
struct GpuRun {
  float worst = 0;
  int agree = 0, decided = 0;
  std::vector<float> rows;
};
inline GpuRun gpu_run(LlamaCudaModel& m, const std::vector<int32_t>& prompt, const CpuRun& want, float bound) {
  const int64_t vocab = m.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  GpuRun out;
  OneSequence seq{m};
  auto first = seq.step(prompt, /*all_rows=*/true);
  EXPECT_TRUE(first.ok()) << first.status().to_string();
  if (!first.ok()) return GpuRun{1e9f, 0, 0, {}};
  out.rows = *first;
  for (int64_t r = 0; r < n; ++r) {
    out.worst = std::max(out.worst, row_error(first->data() + r * vocab, want.prompt.data() + r * vocab, vocab));
  }
  std::vector<float> row(first->end() - vocab, first->end());
  const int64_t steps = static_cast<int64_t>(want.ids.size());
  for (int64_t s = 0; s < steps; ++s) {
    const float* cpu = want.decode.data() + s * vocab;
    out.worst = std::max(out.worst, row_error(row.data(), cpu, vocab));
    if (top1_margin(cpu, vocab) > 2 * bound * row_scale(cpu, vocab)) {
      ++out.decided;
      out.agree += argmax(row.data(), vocab) == want.ids[s];
    }
    if (s + 1 == steps) break;
    auto next = seq.step({want.ids[s]}, false);
    EXPECT_TRUE(next.ok()) << next.status().to_string();
    if (!next.ok()) return GpuRun{1e9f, 0, 0, {}};
    row = *next;
    out.rows.insert(out.rows.end(), row.begin(), row.end());
  }
  return out;
}

}  // namespace mmserve::models
