// The continuous-batching scheduler of the decoders (issue 14 item 4), vLLM v1's design with Sarathi-Serve's
// order: every engine step gets a token budget (max_num_batched_tokens); running sequences that decode (one
// token each) are scheduled first, then running sequences in the middle of their prompt (a chunk of it, as much
// as the budget leaves: chunked prefill), then waiting sequences in arrival order (prefix-cache hits first
// subtracted from their prompt) while the budget, max_num_seqs and the KV pool allow. When a running sequence
// needs a block and the pool has none, the newest running sequence is preempted by recompute: its blocks go back
// (the cached ones stay cached, so the recompute often finds its own prefix), it returns to the head of the
// queue with its prompt and the tokens generated so far, and continues where it was; nothing is lost or
// generated twice.
//
// The scheduler owns no sequences: the executor's sequences embed a DecoderSequence and add / remove it.
// Not thread-safe (the executor's engine thread).
// Tests: tests/unit/engine/decoder_scheduler_test.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "engine/kv_block_manager.h"
#include "models/common/decoder_step.h"

namespace mmserve::engine {

struct DecoderSequence;

struct SchedulerConfig {
  int64_t max_num_seqs = 256;             // running sequences at most
  int64_t max_num_batched_tokens = 2048;  // tokens of one step (decode tokens + prefill chunks)
  bool chunked_prefill = true;            // false: a prompt is prefilled whole or waits
  int64_t table_ld = 0;                   // block-table row length of every step (the longest sequence's blocks)
  // Distinct LoRA adapters one step may hold (the GPU's slots; 0: no limit). A sequence whose adapter would be one
  // too many waits for a later step (a running one is skipped, not preempted; the queue's head blocks the queue,
  // keeping its order), as vLLM's max_loras.
  int64_t max_adapters_per_step = 0;
  // Whether a waiting sequence can start now (null: always). False, as when its LoRA adapter is still being copied
  // to the GPU: it waits for a later step, and the queue behind it too (order kept). Asked once per step for the
  // queue's head only.
  std::function<bool(const DecoderSequence&)> ready;
};

// What the scheduler knows of a sequence.
struct DecoderSequence {
  std::vector<int32_t> tokens;  // the prompt, then each generated token once it is sampled
  int64_t computed = 0;         // leading tokens whose K/V are in the cache
  uint64_t extra_hash = 0;      // prefix-cache salt for what the tokens do not show (images)
  int64_t extra_from = 0;       // ... applied to the blocks that end after this token (the first image's)
  uint64_t adapter = 0;         // its LoRA adapter's id (models/lora), 0: none
  uint64_t adapter2 = 0;        // gate routing's second adapter, applied with the first (0: none)
  KvBlockTable table;
  int64_t preemptions = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache supplied at the last admission
  bool running = false;
};

struct StepEntry {
  DecoderSequence* seq = nullptr;
  int64_t start = 0, count = 0;  // tokens [start, start + count) computed in this step
  bool wants_logits = false;     // the chunk reaches the sequence's last token: sample after it
};

struct StepPlan {
  std::vector<StepEntry> entries;           // in the step's sequence order
  std::vector<DecoderSequence*> preempted;  // sent back to the queue in this schedule()
  models::DecoderStep step;                 // the arrays for the model; logit_rows in entry order
  bool empty() const { return entries.empty(); }
};

class DecoderScheduler {
 public:
  DecoderScheduler(const SchedulerConfig& config, KvBlockManager& blocks);

  void add(DecoderSequence* seq);     // to the end of the queue
  void remove(DecoderSequence* seq);  // finished or cancelled: its blocks go back
  // The next step (empty when nothing can run).
  StepPlan schedule();
  // The step ran: its tokens are computed (and their full blocks registered for prefix caching).
  void complete(const StepPlan& plan);

  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // The last schedule() stopped admitting at a sequence SchedulerConfig::ready refused (its adapter's copy): an
  // empty plan then means "wait for it", not "no room".
  bool held_by_ready() const { return held_by_ready_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(DecoderSequence* seq);
  bool held_by_ready_ = false;

  SchedulerConfig config_;
  KvBlockManager& blocks_;
  std::vector<DecoderSequence*> running_;  // admission order (the newest last: the first preempted)
  std::deque<DecoderSequence*> waiting_;
  int64_t preemptions_ = 0;
};

}  // namespace mmserve::engine
