// KvBlockManager and DecoderScheduler on hand-made sequences: blocks handed out and given back exactly once,
// prefix blocks shared and reference counted, cached blocks evicted least recently used first and only when
// the pool needs them, at least one prompt token always left to compute, a hash collision never shares
// (checked by the tokens), and the scheduler's rules: decodes before prefill chunks, the token budget, chunked
// and unchunked prefill, max_num_seqs, preemption of the newest sequence by recompute, and the step's arrays.
#include "engine/kv_block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "engine/decoder_scheduler.h"

namespace mmserve::engine {
namespace {

std::vector<int32_t> iota(int n, int from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(KvBlockManager, GrowsReleasesAndRefusesWhenFull) {
  KvBlockManager m(4, 16, /*prefix_caching=*/false);
  KvBlockTable a, b;
  EXPECT_TRUE(m.grow(a, 17));  // two blocks
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_TRUE(m.grow(a, 32));  // still two
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_FALSE(m.grow(b, 49));  // four needed, two left: nothing taken
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(m.available(), 2);
  EXPECT_TRUE(m.grow(b, 32));
  EXPECT_EQ(m.available(), 0);
  std::set<int32_t> all(a.blocks.begin(), a.blocks.end());
  all.insert(b.blocks.begin(), b.blocks.end());
  EXPECT_EQ(all.size(), 4u) << "no block handed out twice";
  m.release(a);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(m.available(), 2);
  EXPECT_EQ(m.stats().used_blocks, 2);
}

TEST(KvBlockManager, SharesFullPrefixBlocksAndLeavesTheLastTokenToCompute) {
  KvBlockManager m(8, 4, /*prefix_caching=*/true);
  const std::vector<int32_t> prompt = iota(12);  // three full blocks
  KvBlockTable a;
  EXPECT_EQ(m.take_prefix(a, prompt), 0);
  ASSERT_TRUE(m.grow(a, 12));
  m.register_computed(a, prompt, 12);
  // The same prompt: two blocks reused (the third holds the last token, which must be computed again).
  KvBlockTable b;
  EXPECT_EQ(m.take_prefix(b, prompt), 8);
  EXPECT_EQ(b.blocks, std::vector<int32_t>(a.blocks.begin(), a.blocks.begin() + 2));
  // A longer prompt with the same start: all three.
  std::vector<int32_t> longer = iota(14);
  KvBlockTable c;
  EXPECT_EQ(m.take_prefix(c, longer), 12);
  // A different second block: only the first.
  std::vector<int32_t> other = prompt;
  other[5] = 99;
  KvBlockTable d;
  EXPECT_EQ(m.take_prefix(d, other), 4);
  // Another extra hash (another image): nothing.
  KvBlockTable e;
  EXPECT_EQ(m.take_prefix(e, prompt, /*extra=*/7), 0);
  const KvBlockStats s = m.stats();
  EXPECT_EQ(s.prefix_hits, 2 + 3 + 1);
  // Released, the blocks stay cached (evictable) and still hit.
  for (KvBlockTable* t : {&a, &b, &c, &d, &e}) m.release(*t);
  EXPECT_EQ(m.stats().used_blocks, 0);
  EXPECT_EQ(m.stats().cached_blocks, 3);
  KvBlockTable f;
  EXPECT_EQ(m.take_prefix(f, longer), 12);
  m.release(f);
}

TEST(KvBlockManager, EvictsCachedBlocksOnlyWhenNeededLeastRecentlyUsedFirst) {
  KvBlockManager m(4, 2, /*prefix_caching=*/true);
  const std::vector<int32_t> p1 = {1, 2, 3, 4, 5};
  KvBlockTable a, b;
  ASSERT_TRUE(m.grow(a, 5));  // 3 blocks
  m.register_computed(a, p1, 5);  // two full blocks cached
  m.release(a);
  EXPECT_EQ(m.stats().cached_blocks, 2);
  ASSERT_TRUE(m.grow(b, 4));  // 2 blocks: the 2 free ones, nothing evicted
  EXPECT_EQ(m.stats().evictions, 0);
  m.release(b);
  ASSERT_TRUE(m.grow(b, 6));  // 3 blocks: 2 free + 1 evicted (the tail of p1's prefix goes first)
  EXPECT_EQ(m.stats().evictions, 1);
  KvBlockTable c;
  EXPECT_EQ(m.take_prefix(c, p1), 2) << "the head block of p1 survived, its tail was evicted";
  m.release(c);
  m.release(b);
}

TEST(KvBlockManager, DifferentContentNeverShares) {
  // Two sequences registering the same content each computed: the first copy is the cached one.
  KvBlockManager m(6, 2, /*prefix_caching=*/true);
  const std::vector<int32_t> p = {1, 2, 3};
  KvBlockTable a, b;
  ASSERT_TRUE(m.grow(a, 3));
  ASSERT_TRUE(m.grow(b, 3));
  m.register_computed(a, p, 3);
  m.register_computed(b, p, 3);
  KvBlockTable c;
  EXPECT_EQ(m.take_prefix(c, p), 2);
  EXPECT_EQ(c.blocks[0], a.blocks[0]);
  EXPECT_NE(kv_block_hash(0, std::vector<int32_t>{1, 2}, 0), kv_block_hash(0, std::vector<int32_t>{2, 1}, 0));
}

// LLaVA's salt: two prompts with the same tokens (the same placeholder ids) but different images share the blocks
// before the first placeholder and none from its block on; the same image shares everything.
TEST(KvBlockManager, ImageSaltCoversTheBlocksFromTheFirstImageOn) {
  KvBlockManager m(32, 4, /*prefix_caching=*/true);
  std::vector<int32_t> p = iota(9, 1);  // 9 text tokens: blocks [0, 4) and [4, 8) are pure text
  p.insert(p.end(), 8, 255);            // the image's placeholders from token 9 (in block [8, 12))
  p.push_back(7);
  const uint64_t image_a = 0x1111, image_b = 0x2222;
  KvBlockTable a;
  ASSERT_TRUE(m.grow(a, static_cast<int64_t>(p.size())));
  m.register_computed(a, p, static_cast<int64_t>(p.size()), image_a, /*extra_from=*/9);
  KvBlockTable other, same;
  EXPECT_EQ(m.take_prefix(other, p, image_b, 9), 8) << "the text blocks are shared, the image's are not";
  EXPECT_EQ(m.take_prefix(same, p, image_a, 9), 16) << "the same image: every full block but the last token's";
  KvBlockTable no_image;
  EXPECT_EQ(m.take_prefix(no_image, p), 8) << "unsalted: the same tokens, but not the image's blocks";
  for (KvBlockTable* t : {&a, &other, &same, &no_image}) m.release(*t);
}

struct Seq {
  DecoderSequence d;
  explicit Seq(std::vector<int32_t> tokens) { d.tokens = std::move(tokens); }
};

TEST(DecoderScheduler, DecodesFirstThenChunksUnderTheBudget) {
  KvBlockManager blocks(64, 4, /*prefix_caching=*/false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 10;
  c.table_ld = 16;
  DecoderScheduler s(c, blocks);
  Seq a(iota(3)), b(iota(25, 100));
  s.add(&a.d);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_TRUE(p.entries[0].wants_logits);
  s.complete(p);
  a.d.tokens.push_back(7);  // sampled
  s.add(&b.d);
  // a decodes (1 token), b gets the other 9 of the budget.
  p = s.schedule();
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].seq, &a.d);
  EXPECT_EQ(p.entries[0].count, 1);
  EXPECT_EQ(p.entries[1].count, 9);
  EXPECT_FALSE(p.entries[1].wants_logits);
  EXPECT_EQ(p.step.num_tokens(), 10);
  EXPECT_EQ(p.step.query_start, (std::vector<int32_t>{0, 1, 10}));
  EXPECT_EQ(p.step.seq_lens, (std::vector<int32_t>{4, 9}));
  EXPECT_EQ(p.step.positions[0], 3);
  EXPECT_EQ(p.step.logit_rows, (std::vector<int32_t>{0}));
  // Slots follow the block tables.
  for (int64_t t = 1; t < 10; ++t) {
    const int64_t pos = t - 1;
    EXPECT_EQ(p.step.slots[t], b.d.table.blocks[pos / 4] * 4 + pos % 4);
  }
  s.complete(p);
  a.d.tokens.push_back(8);
  p = s.schedule();  // a: 1, b: 9 more (18 of 25)
  s.complete(p);
  a.d.tokens.push_back(9);
  p = s.schedule();  // a: 1, b: the last 7, which want logits
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[1].count, 7);
  EXPECT_TRUE(p.entries[1].wants_logits);
  EXPECT_EQ(p.step.logit_rows, (std::vector<int32_t>{0, 7}));
  s.complete(p);
  s.remove(&a.d);
  s.remove(&b.d);
  EXPECT_EQ(blocks.stats().used_blocks, 0);
}

// LoRA: at most max_adapters_per_step distinct adapters in a step (the GPU's slots). Sequences without an adapter
// and more sequences of an adapter already in the step always fit; the queue's head whose adapter is one too many
// blocks the queue (its order kept, nothing preempted); once an adapter leaves, the waiting one runs.
TEST(DecoderScheduler, AStepHoldsAtMostMaxAdaptersPerStepDistinctAdapters) {
  KvBlockManager blocks(64, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_adapters_per_step = 2;
  c.table_ld = 16;
  DecoderScheduler s(c, blocks);
  Seq a(iota(3)), b(iota(3)), a2(iota(3)), none(iota(3)), d(iota(3)), e(iota(3));
  a.d.adapter = 1, b.d.adapter = 2, a2.d.adapter = 1, d.d.adapter = 3, e.d.adapter = 0;
  for (Seq* q : {&a, &b, &a2, &none, &d, &e}) s.add(&q->d);
  auto seqs = [](const StepPlan& p) {
    std::vector<const DecoderSequence*> out;
    for (const StepEntry& x : p.entries) out.push_back(x.seq);
    return out;
  };
  StepPlan p = s.schedule();
  // a, b, a2 and none fit; d (a third adapter) heads the queue and blocks it, so e waits behind it.
  EXPECT_EQ(seqs(p), (std::vector<const DecoderSequence*>{&a.d, &b.d, &a2.d, &none.d}));
  EXPECT_EQ(s.waiting(), 2);
  s.complete(p);
  for (Seq* q : {&a, &b, &a2, &none}) q->d.tokens.push_back(5);
  s.remove(&b.d);  // adapter 2 leaves: d (adapter 3) and e come in
  p = s.schedule();
  EXPECT_EQ(seqs(p), (std::vector<const DecoderSequence*>{&a.d, &a2.d, &none.d, &d.d, &e.d}));
  s.complete(p);
  for (Seq* q : {&a, &a2, &none, &d, &e}) q->d.tokens.push_back(6);
  // A new sequence of a third adapter waits (nothing is preempted for it) while two others fill the step.
  Seq f(iota(3));
  f.d.adapter = 2;
  s.add(&f.d);
  p = s.schedule();
  const std::vector<const DecoderSequence*> last = seqs(p);
  EXPECT_EQ(std::count(last.begin(), last.end(), &f.d), 0);
  EXPECT_EQ(last.size(), 5u);
  EXPECT_EQ(s.waiting(), 1);
  EXPECT_TRUE(p.preempted.empty());
  for (Seq* q : {&a, &a2, &none, &d, &e, &f}) s.remove(&q->d);
  EXPECT_EQ(blocks.stats().used_blocks, 0);
}

// Gate routing's mix: a sequence's two adapters both count toward max_adapters_per_step (the GPU holds both).
TEST(DecoderScheduler, BothAdaptersOfAMixCountTowardTheStepsAdapters) {
  KvBlockManager blocks(64, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_adapters_per_step = 3;
  c.table_ld = 16;
  DecoderScheduler s(c, blocks);
  Seq mix(iota(3)), same(iota(3)), other(iota(3)), twice(iota(3));
  mix.d.adapter = 1, mix.d.adapter2 = 2;
  same.d.adapter = 2, same.d.adapter2 = 1;  // the same pair the other way round: nothing new
  twice.d.adapter = 3, twice.d.adapter2 = 3;  // one adapter named twice counts once
  other.d.adapter = 4, other.d.adapter2 = 5;  // two new ones: 1, 2, 3 + 2 > 3
  for (Seq* q : {&mix, &same, &twice, &other}) s.add(&q->d);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(p.entries[2].seq, &twice.d);
  EXPECT_EQ(s.waiting(), 1) << "the pair (4, 5) would make five adapters";
  for (Seq* q : {&mix, &same, &twice, &other}) s.remove(&q->d);
}

// SchedulerConfig::ready (an adapter still copying to the GPU): the queue's head waits, and the queue behind it,
// until it answers true; running sequences are not asked.
TEST(DecoderScheduler, AWaitingSequenceStartsOnceReady) {
  KvBlockManager blocks(64, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.table_ld = 16;
  bool copied = false;
  int asked = 0;
  c.ready = [&](const DecoderSequence& q) {
    ++asked;
    return q.adapter == 0 || copied;
  };
  DecoderScheduler s(c, blocks);
  Seq base(iota(3)), lora(iota(3)), behind(iota(3));
  lora.d.adapter = 7;
  s.add(&base.d);
  s.add(&lora.d);
  s.add(&behind.d);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].seq, &base.d);
  EXPECT_EQ(s.waiting(), 2) << "the adapter's sequence heads the queue and holds it";
  EXPECT_TRUE(s.held_by_ready()) << "the engine waits for the copy when nothing else runs";
  s.complete(p);
  base.d.tokens.push_back(1);
  const int before = asked;
  copied = true;
  p = s.schedule();
  EXPECT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(asked - before, 2) << "asked for the two waiting sequences only, not the running one";
  EXPECT_FALSE(s.held_by_ready());
  for (Seq* q : {&base, &lora, &behind}) s.remove(&q->d);
  EXPECT_EQ(blocks.stats().used_blocks, 0);
}

TEST(DecoderScheduler, UnchunkedPrefillWaitsForRoomAndMaxNumSeqsHolds) {
  KvBlockManager blocks(64, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 8;
  c.chunked_prefill = false;
  c.max_num_seqs = 2;
  c.table_ld = 16;
  DecoderScheduler s(c, blocks);
  Seq a(iota(5)), b(iota(12)), d(iota(2)), e(iota(2));
  s.add(&a.d);
  s.add(&b.d);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.entries.size(), 1u) << "b (12 tokens) does not fit the 3 left and is not chunked";
  s.remove(&a.d);
  s.remove(&b.d);
  s.add(&d.d);
  s.add(&e.d);
  Seq f(iota(2));
  s.add(&f.d);
  p = s.schedule();
  EXPECT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(s.waiting(), 1);
}

TEST(DecoderScheduler, PreemptsTheNewestWhenThePoolRunsOutAndResumesIt) {
  KvBlockManager blocks(4, 2, false);  // 8 slots
  SchedulerConfig c;
  c.table_ld = 4;
  DecoderScheduler s(c, blocks);
  Seq a(iota(4)), b(iota(4, 50));
  s.add(&a.d);
  s.add(&b.d);
  StepPlan p = s.schedule();  // both prefilled: 4 blocks
  ASSERT_EQ(p.entries.size(), 2u);
  s.complete(p);
  a.d.tokens.push_back(1);
  b.d.tokens.push_back(2);
  p = s.schedule();  // a needs a 3rd block: b (the newest) is preempted
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].seq, &a.d);
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], &b.d);
  EXPECT_EQ(b.d.computed, 0);
  EXPECT_EQ(b.d.tokens.size(), 5u) << "its generated token is kept: recomputed, not lost";
  EXPECT_EQ(s.preemptions(), 1);
  s.complete(p);
  s.remove(&a.d);
  p = s.schedule();  // b comes back and recomputes its 5 tokens
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].seq, &b.d);
  EXPECT_EQ(p.entries[0].count, 5);
  EXPECT_TRUE(p.entries[0].wants_logits);
}

}  // namespace
}  // namespace mmserve::engine
