// Test helpers of the decoders on the GPU (llama_cuda_test.cpp, llava_cuda_test.cpp): one sequence stepped through a
// LlamaCudaModel by hand, and the logit rows' error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/cuda_status.h"
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

}  // namespace mmserve::models
