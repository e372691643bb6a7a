// Next-token selection for the decoders (issue 14): the OpenAI / vLLM sampling parameters applied to one row of
// logits, on the CPU. Order, as vLLM applies them: repetition penalty (HF's: a seen token's positive logit is
// divided by it, a negative one multiplied, over the prompt and the output), presence and frequency penalties
// (OpenAI's: logit -= presence * [count > 0] + frequency * count, over the output only), then temperature 0 =
// greedy (argmax, ties to the lowest id); else logits / temperature, top-k, top-p (the smallest set of most
// likely tokens whose probability reaches top_p; at least one), min-p (tokens with p >= min_p * p_max), and one
// draw from the renormalised distribution. The random stream is per request: the same seed gives the same
// tokens for the same logits (std::mt19937_64, not torch's generator: sampled text differs from HF's by design).
// Tests: tests/unit/engine/token_sampler_test.cpp (each rule, and the draws' statistics).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mmserve::engine {

struct SamplingParams {
  double temperature = 1.0;         // 0: greedy
  int64_t top_k = 0;                // 0 or -1: off
  double top_p = 1.0;               // (0, 1]
  double min_p = 0.0;               // [0, 1]
  double repetition_penalty = 1.0;  // > 0; 1: off
  double presence_penalty = 0.0;    // [-2, 2]
  double frequency_penalty = 0.0;   // [-2, 2]
  std::optional<uint64_t> seed;     // absent: a random seed per request
};

// kInvalidArgument naming the field and its allowed range.
Status validate_sampling(const SamplingParams& p);

// One generated token's log-probability (log-softmax of the model's raw logits, before penalties, temperature and
// filtering: vLLM's default `raw_logprobs`), and the `top` most likely tokens with theirs, most likely first (ties
// to the lower id).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

// log-softmax(logits)[id] and the `top` highest (id, log-probability) pairs, highest first, ties to the lower id.
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int64_t top);

class TokenSampler {
 public:
  // The parameters must be valid (validate_sampling); the seed, when given, fixes the draws.
  explicit TokenSampler(const SamplingParams& p);
  // The next id for `logits` (one row over the vocabulary; modified in place), given the prompt and the ids
  // generated so far (for the penalties).
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> generated);
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;   // scratch: candidate ids
  std::vector<double> probs_;    // scratch: their probabilities
};

}  // namespace mmserve::engine
