// One engine step of a decoder over a paged KV cache (issue 14): the new tokens of every scheduled sequence,
// concatenated, with where each one's keys and values go and where each sequence's past lives. The scheduler
// (engine/decoder_scheduler.h) builds it; every decoder model (CPU and CUDA, Llama, and the decoders of LLaVA and
// Mixtral) runs it. The arrays are exactly kernels/paged_attention.h's PagedAttentionArgs / PagedKvWriteArgs.
//
// A step mixes sequences decoding one token and prefill chunks of many (chunked prefill); a sequence whose chunk
// finishes its prompt (or any decoding one) wants the logits of its last new token: `logit_rows` lists those token
// rows, and the model returns logits in that order.
//
// A multimodal prompt (LLaVA) carries image features in place of its placeholder tokens: the token rows listed in
// `embed_rows` take their input embedding from `embeds` (row i of embeds for embed_rows[i], hidden_size f32 each,
// host memory the caller keeps alive for the step) instead of the token's embedding; their token id stays the
// placeholder's (what the prefix cache hashes, with the image's hash: engine/kv_block_manager.h).
// A sequence may run under a LoRA adapter (issue 16): `loras` is empty (no adapters in the step) or [S], sequence
// s's adapter or null; the caller keeps the adapters alive for the step. The prefix cache salts the blocks of an
// adapter's sequences (their keys differ).
// Tests: through the models' tests (tests/unit/models/llama_paged_test.cpp) and the scheduler's.
#pragma once

#include <cstdint>
#include <vector>

namespace mmserve::models {

struct LoraAdapter;

struct DecoderStep {
  std::vector<int32_t> tokens;       // [T] new token ids, sequence by sequence
  std::vector<int32_t> positions;    // [T] their positions in their sequences
  std::vector<int32_t> slots;        // [T] cache slot (block * block_size + offset) of each token's K/V
  std::vector<int32_t> query_start;  // [S + 1] sequence s's tokens are rows [query_start[s], query_start[s + 1])
  std::vector<int32_t> seq_lens;     // [S] keys of sequence s after the step (past + new)
  std::vector<int32_t> block_tables;  // [S, table_ld] block ids of each sequence (unused entries 0)
  int64_t table_ld = 0;
  std::vector<int32_t> logit_rows;  // token rows whose logits are wanted, in output order
  int64_t max_seq_len = 0, max_query_len = 0;
  std::vector<int32_t> embed_rows;  // token rows whose input embedding is given, ascending
  const float* embeds = nullptr;    // [embed_rows.size(), hidden]
  std::vector<const LoraAdapter*> loras;  // [S] or empty
  // Gate routing (issue 16): a second adapter per sequence ([S] or empty; null: none) and both adapters' weights
  // ([S, 2] or empty: 1 and 0). The sequence's delta is w0 * delta(loras[s]) + w1 * delta(loras_second[s]).
  std::vector<const LoraAdapter*> loras_second;
  std::vector<float> lora_weights;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
};

}  // namespace mmserve::models
