// Next-token selection for `rows` rows of f32 logits in one call, on the CPU (this twin) and the GPU
// (sampling_cuda.h), choosing the same token for the same logits and parameters: every decision is made on
// integers computed by the same f32 operations on both sides (sampling_math.h), and the random draw is
// Philox4x32-10 (curand's on the GPU, the same written out here) of (seed, step).
//
// The rules, per row, in vLLM's order (those of engine/token_sampler.h, made exact):
//  1. Penalties over the row's seen ids (seen_ids[seen_offsets[r], seen_offsets[r + 1]); the first
//     prompt_lens[r] of them are the prompt's, the rest generated): repetition (HF's: a seen token's positive
//     logit / penalty, a non-positive one * penalty, over prompt and output), then presence / frequency (OpenAI's:
//     logit -= presence + frequency * count, for tokens generated count > 0 times). In f32; the row's logits
//     are OVERWRITTEN with the penalised logits l (rows with no penalty active are left alone).
//  2. temperature == 0 (or not > 0): greedy, the largest l, ties to the lowest id.
//  3. Else the total order "l descending, then id ascending" ranks the tokens (l compared as the order key of
//     sampling_math.h: -0 ranks below +0), and each token gets an integer mass q = floor(2^32 * e) with
//     e = exp(l / T - l_max / T) in a fixed f32 evaluation (so q = 2^32 for the top token; tokens below
//     e^-22.2 relative to it get q = 0 and are never drawn). top_k (> 0 and < vocab): keep the first top_k in
//     the order. top_p (< 1): of those, keep the shortest prefix whose mass reaches top_p * (their mass), at
//     least one token. min_p (> 0): of those, keep q >= ceil(min_p * 2^32) (p >= min_p * p_max).
//  4. One draw: r = the 64-bit Philox output for (seed, step); R = floor(r * Q / 2^64) with Q the kept mass;
//     the chosen token is the kept one whose interval of the cumulative mass in token-id order holds R.
// Outputs: ids[r]; optional logprobs[r] = log-softmax of the RAW logits (before penalties and temperature) at
// the chosen id; optional top_n (<= 20) ids and raw log-probabilities, highest first, ties to the lower id.
// Parameters outside their ranges are clamped as stated on SamplingRowParams (the GPU cannot report errors per
// row); validate on the host (engine's validate_sampling) before filling them. Logits must not be NaN.
// Tests: sampling_test.cpp (the twin against the rules, draw statistics), sampling_cuda_test.cpp (GPU == twin).
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"

namespace mmserve::kernels {

// One row's parameters; an array of them lives in device memory for the GPU (so graphs replay with new ones).
struct SamplingRowParams {
  float temperature = 1.0f;         // not > 0: greedy
  int32_t top_k = 0;                // <= 0 or >= vocab: off
  float top_p = 1.0f;               // >= 1 (or NaN): off; <= 0 keeps the top token only
  float min_p = 0.0f;               // not > 0: off; > 1 acts as 1
  float repetition_penalty = 1.0f;  // 1 or not > 0: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint32_t reserved = 0;            // keeps seed 8-byte aligned; must be 0
  uint64_t seed = 0;                // the draw for (seed, step) is a pure function of both
  uint64_t step = 0;                // the caller advances it once per generated token
};
static_assert(sizeof(SamplingRowParams) == 48, "SamplingRowParams is shared with device code");

struct SamplingArgs {
  float* logits = nullptr;  // [rows, vocab_ld]; penalised rows are overwritten (rule 1)
  int64_t rows = 0, vocab = 0, vocab_ld = 0;
  const SamplingRowParams* params = nullptr;  // [rows]
  // Seen tokens, CSR: nullptr seen_offsets = none (penalties are no-ops). Ids outside [0, vocab) are ignored.
  const int32_t* seen_offsets = nullptr;  // [rows + 1], non-decreasing
  const int32_t* seen_ids = nullptr;
  const int32_t* prompt_lens = nullptr;  // [rows] or nullptr (all generated)
  // GPU only, needed with seen_offsets: [rows, vocab] words that are all zero before the call and are zero
  // again after it (cudaMemset once at allocation; the kernel restores them). Ignored by the CPU twin.
  uint64_t* scratch = nullptr;
  int32_t* ids = nullptr;       // [rows], out
  float* logprobs = nullptr;    // [rows] or nullptr
  int64_t top_n = 0;            // 0..kSamplingTopNMax
  int32_t* top_ids = nullptr;   // [rows, top_n] when top_n > 0
  float* top_logprobs = nullptr;
};

constexpr int64_t kSamplingTopNMax = 20;
constexpr int64_t kSamplingVocabMax = int64_t{1} << 30;

// Shapes and pointers (the checks both twins make; device data is not read).
Status validate_sampling_args(const SamplingArgs& args, bool needs_scratch);

// The CPU twin: every pointer is host memory.
Status sample_tokens(const SamplingArgs& args);

// Philox4x32-10 (Salmon et al., Random123), exactly curand_Philox4x32_10: counter ctr, key key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

}  // namespace mmserve::kernels
