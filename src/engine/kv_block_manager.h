// The paged KV cache's bookkeeping (issue 14 item 4): which blocks of the pool are free, which sequence holds
// which, and automatic prefix caching. It owns no memory: the executor's model owns the pool (host or device),
// this hands out block ids.
//
// Prefix caching (vLLM's automatic prefix caching): a FULL block is identified by the hash of everything that
// decides its keys and values: the tokens of the block, the hash of the block before it (so the whole prefix),
// and an `extra` hash for what the tokens do not show (the images of a multimodal prompt, issue 15; 0 for text).
// Once a sequence's full block has been computed it is registered under that hash; a new sequence whose prompt
// starts with the same blocks takes them (reference counted) instead of computing them. Hash equality is
// confirmed by comparing the block's tokens and parent, so a 64-bit collision cannot share wrong keys. Blocks
// whose last holder leaves stay cached (evictable, least recently used first) until the pool needs them.
// A cached block is never written again: sequences write only their own, not yet full blocks. At least the last
// prompt token is always computed (the step needs its logits), so a prompt that is all cached blocks reuses all
// but the last.
//
// Not thread-safe: one per executor, used by its engine thread.
// Tests: tests/unit/engine/kv_block_manager_test.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace mmserve::engine {

// One sequence's blocks, in position order.
struct KvBlockTable {
  std::vector<int32_t> blocks;
  int64_t registered = 0;  // leading blocks whose hash is known (registered or taken from the cache)
  uint64_t last_hash = 0;  // hash of block registered - 1 (0 before the first)
};

struct KvBlockStats {
  int64_t num_blocks = 0, used_blocks = 0, cached_blocks = 0;  // used: held by a sequence; cached: evictable
  int64_t prefix_queries = 0, prefix_hits = 0;                 // blocks looked up / found (hit rate = hits / queries)
  int64_t evictions = 0;
};

class KvBlockManager {
 public:
  KvBlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  // Blocks a new allocation may take: free ones plus cached ones nobody holds.
  int64_t available() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
  static int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

  // For a sequence with an empty table: takes the cached blocks that begin `tokens` (at most
  // (tokens.size() - 1) / block_size of them) and returns how many tokens they cover.
  // `extra` salts the hashes of the blocks that end after token `extra_from` (what the tokens do not show: the
  // images a LLaVA prompt's placeholders stand for); earlier blocks hash on their tokens alone, so text before the
  // first image is shared whatever the images.
  int64_t take_prefix(KvBlockTable& table, std::span<const int32_t> tokens, uint64_t extra = 0,
                      int64_t extra_from = 0);
  // Grows the table to hold `tokens` tokens; false (nothing taken) when the pool has too few blocks.
  bool grow(KvBlockTable& table, int64_t tokens);
  // The first `computed` of `tokens` have their K/V written: registers the full blocks among them for reuse.
  void register_computed(KvBlockTable& table, std::span<const int32_t> tokens, int64_t computed, uint64_t extra = 0,
                         int64_t extra_from = 0);
  // Gives back every block of the table (cached ones stay cached) and empties it.
  void release(KvBlockTable& table);

  KvBlockStats stats() const;

 private:
  struct Block {
    int32_t refs = 0;
    uint64_t hash = 0;  // registered hash (cached) or 0
    uint64_t parent = 0;
    std::vector<int32_t> tokens;  // the block's tokens when registered (collision check)
    uint64_t extra = 0;
    std::list<int32_t>::iterator lru;  // position in evictable_ when refs == 0 and hash != 0
  };
  int32_t take_block();  // a free block, else the least recently used evictable one (its hash forgotten)
  void put_back(int32_t id);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;    // refs 0, not cached
  std::list<int32_t> evictable_;  // refs 0, cached: front = least recently used
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block
  int64_t queries_ = 0, hits_ = 0, evictions_ = 0;
};

// The hash of a full block: its tokens, its parent's hash and the extra hash (FNV-1a over 64-bit words, mixed).
uint64_t kv_block_hash(uint64_t parent, std::span<const int32_t> tokens, uint64_t extra);

}  // namespace mmserve::engine
