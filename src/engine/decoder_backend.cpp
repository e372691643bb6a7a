// sampling_inputs (see decoder_backend.h).
#include "engine/decoder_backend.h"

#include <algorithm>

namespace mmserve::engine {

SamplingInputs sampling_inputs(std::span<const SampleRow> rows) {
  SamplingInputs in;
  for (const SampleRow& row : rows) {
    const SamplingParams& p = *row.params;
    kernels::SamplingRowParams k;
    k.temperature = static_cast<float>(p.temperature);
    k.top_k = static_cast<int32_t>(p.top_k);
    k.top_p = static_cast<float>(p.top_p);
    k.min_p = static_cast<float>(p.min_p);
    k.repetition_penalty = static_cast<float>(p.repetition_penalty);
    k.presence_penalty = static_cast<float>(p.presence_penalty);
    k.frequency_penalty = static_cast<float>(p.frequency_penalty);
    k.seed = row.seed;
    k.step = row.step;
    in.params.push_back(k);
    in.penalties = in.penalties || p.repetition_penalty != 1.0 || p.presence_penalty != 0 || p.frequency_penalty != 0;
    if (row.logprobs >= 0) {
      in.logprobs = true;
      in.top_n = std::max(in.top_n, row.logprobs);
    }
  }
  if (in.penalties) {
    in.seen_offsets.push_back(0);
    for (const SampleRow& row : rows) {
      in.seen_ids.insert(in.seen_ids.end(), row.prompt.begin(), row.prompt.end());
      in.seen_ids.insert(in.seen_ids.end(), row.generated.begin(), row.generated.end());
      in.seen_offsets.push_back(static_cast<int32_t>(in.seen_ids.size()));
      in.prompt_lens.push_back(static_cast<int32_t>(row.prompt.size()));
    }
  }
  return in;
}

}  // namespace mmserve::engine
