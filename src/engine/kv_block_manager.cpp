// KvBlockManager (see kv_block_manager.h).
#include "engine/kv_block_manager.h"

#include <algorithm>

#include "core/status.h"

namespace mmserve::engine {

uint64_t kv_block_hash(uint64_t parent, std::span<const int32_t> tokens, uint64_t extra) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t word) {
    // FNV-1a over the word's bytes, then a final avalanche (splitmix64's) per word.
    for (int i = 0; i < 8; ++i) {
      h ^= (word >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ull;
    h ^= h >> 27;
  };
  mix(parent);
  mix(extra);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;  // 0 means "no hash"
}

KvBlockManager::KvBlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(static_cast<size_t>(num_blocks)) {
  MMSERVE_CHECK(num_blocks > 0 && block_size > 0, "a KV block manager needs blocks");
  // Lowest ids first out (pop_back), which keeps tests readable.
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int32_t KvBlockManager::take_block() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    MMSERVE_CHECK(!evictable_.empty(), "take_block with no block available");
    id = evictable_.front();
    evictable_.pop_front();
    Block& b = blocks_[static_cast<size_t>(id)];
    cached_.erase(b.hash);
    b.hash = 0;
    b.tokens.clear();
    ++evictions_;
  }
  blocks_[static_cast<size_t>(id)].refs = 1;
  return id;
}

void KvBlockManager::put_back(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  MMSERVE_CHECK(b.refs > 0, "a KV block released twice");
  if (--b.refs > 0) return;
  if (b.hash != 0) {
    b.lru = evictable_.insert(evictable_.end(), id);
  } else {
    free_.push_back(id);
  }
}

int64_t KvBlockManager::take_prefix(KvBlockTable& table, std::span<const int32_t> tokens, uint64_t extra_salt,
                                    int64_t extra_from) {
  MMSERVE_CHECK(table.blocks.empty(), "take_prefix on a table that holds blocks");
  if (!prefix_caching_ || tokens.empty()) return 0;
  const int64_t most = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  uint64_t parent = 0;
  for (int64_t i = 0; i < most; ++i) {
    ++queries_;
    const std::span<const int32_t> block_tokens = tokens.subspan(static_cast<size_t>(i * block_size_),
                                                                 static_cast<size_t>(block_size_));
    const uint64_t extra = (i + 1) * block_size_ > extra_from ? extra_salt : 0;
    const uint64_t h = kv_block_hash(parent, block_tokens, extra);
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.parent != parent || b.extra != extra || !std::equal(b.tokens.begin(), b.tokens.end(), block_tokens.begin())) {
      break;  // a hash collision: not the same prefix
    }
    ++hits_;
    if (b.refs == 0) evictable_.erase(b.lru);
    ++b.refs;
    table.blocks.push_back(it->second);
    parent = h;
  }
  table.registered = static_cast<int64_t>(table.blocks.size());
  table.last_hash = parent;
  return table.registered * block_size_;
}

bool KvBlockManager::grow(KvBlockTable& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens, block_size_) - static_cast<int64_t>(table.blocks.size());
  if (need <= 0) return true;
  if (need > available()) return false;
  for (int64_t i = 0; i < need; ++i) table.blocks.push_back(take_block());
  return true;
}

void KvBlockManager::register_computed(KvBlockTable& table, std::span<const int32_t> tokens, int64_t computed,
                                       uint64_t extra_salt, int64_t extra_from) {
  if (!prefix_caching_) return;
  const int64_t full = std::min<int64_t>(computed / block_size_, static_cast<int64_t>(table.blocks.size()));
  for (int64_t i = table.registered; i < full; ++i) {
    const std::span<const int32_t> block_tokens = tokens.subspan(static_cast<size_t>(i * block_size_),
                                                                 static_cast<size_t>(block_size_));
    const uint64_t extra = (i + 1) * block_size_ > extra_from ? extra_salt : 0;
    const uint64_t h = kv_block_hash(table.last_hash, block_tokens, extra);
    const int32_t id = table.blocks[static_cast<size_t>(i)];
    Block& b = blocks_[static_cast<size_t>(id)];
    // Another sequence may have registered the same content meanwhile (both computed it): keep the first; this
    // block stays private and goes back free when released.
    if (b.hash == 0 && cached_.find(h) == cached_.end()) {
      b.hash = h;
      b.parent = table.last_hash;
      b.extra = extra;
      b.tokens.assign(block_tokens.begin(), block_tokens.end());
      cached_.emplace(h, id);
    }
    table.last_hash = h;
    table.registered = i + 1;
  }
}

void KvBlockManager::release(KvBlockTable& table) {
  // Last blocks first into the LRU, so a prefix's head outlives its tail (it is the part more often shared).
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) put_back(*it);
  table = KvBlockTable();
}

KvBlockStats KvBlockManager::stats() const {
  KvBlockStats s;
  s.num_blocks = num_blocks();
  s.cached_blocks = static_cast<int64_t>(evictable_.size());
  s.used_blocks = s.num_blocks - s.cached_blocks - static_cast<int64_t>(free_.size());
  s.prefix_queries = queries_;
  s.prefix_hits = hits_;
  s.evictions = evictions_;
  return s;
}

}  // namespace mmserve::engine
