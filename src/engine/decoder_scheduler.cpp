// DecoderScheduler (see decoder_scheduler.h).
#include "engine/decoder_scheduler.h"

#include <algorithm>

#include "core/status.h"

namespace mmserve::engine {

DecoderScheduler::DecoderScheduler(const SchedulerConfig& config, KvBlockManager& blocks)
    : config_(config), blocks_(blocks) {
  MMSERVE_CHECK(config_.max_num_seqs > 0 && config_.max_num_batched_tokens > 0 && config_.table_ld > 0,
                "scheduler limits must be positive");
}

void DecoderScheduler::add(DecoderSequence* seq) { waiting_.push_back(seq); }

void DecoderScheduler::remove(DecoderSequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  blocks_.release(seq->table);
  seq->running = false;
}

void DecoderScheduler::preempt(DecoderSequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  blocks_.release(seq->table);
  seq->computed = 0;
  seq->running = false;
  ++seq->preemptions;
  ++preemptions_;
  waiting_.push_front(seq);
}

StepPlan DecoderScheduler::schedule() {
  StepPlan plan;
  held_by_ready_ = false;
  int64_t budget = config_.max_num_batched_tokens;
  auto scheduled = [&](DecoderSequence* s) {
    return std::any_of(plan.entries.begin(), plan.entries.end(), [s](const StepEntry& e) { return e.seq == s; });
  };
  // Makes room for `tokens` tokens of `seq`, preempting the newest running sequences (never `seq` itself unless
  // it is the newest: then it is preempted and false is returned).
  auto make_room = [&](DecoderSequence* seq, int64_t tokens) {
    while (!blocks_.grow(seq->table, tokens)) {
      DecoderSequence* victim = running_.back();
      if (scheduled(victim)) {  // a decode scheduled earlier in this step: give its budget back
        auto it = std::find_if(plan.entries.begin(), plan.entries.end(),
                               [victim](const StepEntry& e) { return e.seq == victim; });
        budget += it->count;
        plan.entries.erase(it);
      }
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == seq) return false;
    }
    return true;
  };
  // LoRA: the step's distinct adapters, at most max_adapters_per_step; `fits` takes the sequence's in when it can.
  std::vector<uint64_t> adapters;
  auto fits = [&](const DecoderSequence* s) {
    if (config_.max_adapters_per_step <= 0) return true;
    std::vector<uint64_t> more;  // of its (up to two) adapters, those the step does not hold yet
    for (uint64_t a : {s->adapter, s->adapter2}) {
      if (a != 0 && std::find(adapters.begin(), adapters.end(), a) == adapters.end() &&
          std::find(more.begin(), more.end(), a) == more.end()) {
        more.push_back(a);
      }
    }
    if (static_cast<int64_t>(adapters.size() + more.size()) > config_.max_adapters_per_step) return false;
    adapters.insert(adapters.end(), more.begin(), more.end());
    return true;
  };
  // Running sequences: decodes first, then prompts being prefilled in chunks.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<DecoderSequence*> order = running_;
    for (DecoderSequence* s : order) {
      if (!s->running || budget <= 0) continue;  // preempted meanwhile
      const int64_t left = static_cast<int64_t>(s->tokens.size()) - s->computed;
      if ((pass == 0) != (left == 1) || left <= 0 || !fits(s)) continue;
      const int64_t count = std::min(left, budget);
      if (!make_room(s, s->computed + count)) continue;
      plan.entries.push_back({s, s->computed, count, s->computed + count == static_cast<int64_t>(s->tokens.size())});
      budget -= count;
    }
  }
  // Waiting sequences, in order, while there is room (none after a preemption: the pool is full).
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 && running() < config_.max_num_seqs) {
    DecoderSequence* s = waiting_.front();
    if (!fits(s)) break;  // its adapter would be one too many this step
    if (config_.ready && !config_.ready(*s)) {  // e.g. its adapter on its way to the GPU
      held_by_ready_ = true;
      break;
    }
    const int64_t total = static_cast<int64_t>(s->tokens.size());
    s->computed = blocks_.take_prefix(s->table, s->tokens, s->extra_hash, s->extra_from);
    s->cached_tokens = s->computed;
    const int64_t left = total - s->computed;
    const int64_t count = std::min(left, budget);
    if ((!config_.chunked_prefill && count < left) || !blocks_.grow(s->table, s->computed + count)) {
      blocks_.release(s->table);  // the prefix it took goes back (stays cached)
      s->computed = 0;
      break;
    }
    waiting_.pop_front();
    s->running = true;
    running_.push_back(s);
    plan.entries.push_back({s, s->computed, count, s->computed + count == total});
    budget -= count;
  }
  // The arrays.
  models::DecoderStep& step = plan.step;
  step.table_ld = config_.table_ld;
  step.query_start.push_back(0);
  const int64_t bs = blocks_.block_size();
  for (const StepEntry& e : plan.entries) {
    const DecoderSequence& s = *e.seq;
    for (int64_t p = e.start; p < e.start + e.count; ++p) {
      step.tokens.push_back(s.tokens[static_cast<size_t>(p)]);
      step.positions.push_back(static_cast<int32_t>(p));
      step.slots.push_back(static_cast<int32_t>(s.table.blocks[static_cast<size_t>(p / bs)] * bs + p % bs));
    }
    step.query_start.push_back(static_cast<int32_t>(step.tokens.size()));
    step.seq_lens.push_back(static_cast<int32_t>(e.start + e.count));
    MMSERVE_CHECK(static_cast<int64_t>(s.table.blocks.size()) <= step.table_ld, "a block table longer than table_ld");
    for (int64_t i = 0; i < step.table_ld; ++i) {
      step.block_tables.push_back(i < static_cast<int64_t>(s.table.blocks.size()) ? s.table.blocks[i] : 0);
    }
    if (e.wants_logits) step.logit_rows.push_back(step.query_start.back() - 1);
    step.max_seq_len = std::max(step.max_seq_len, e.start + e.count);
    step.max_query_len = std::max(step.max_query_len, e.count);
  }
  return plan;
}

void DecoderScheduler::complete(const StepPlan& plan) {
  for (const StepEntry& e : plan.entries) {
    e.seq->computed = e.start + e.count;
    blocks_.register_computed(e.seq->table, e.seq->tokens, e.seq->computed, e.seq->extra_hash, e.seq->extra_from);
  }
}

}  // namespace mmserve::engine
