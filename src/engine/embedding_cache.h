// EmbeddingCache: an LRU of per-image encoder outputs keyed by the image's content hash, under a byte budget, so
// that repeated prompts on the same image (SAM's interactive clicks; later LLaVA's repeated images) skip the
// encoder. Owned by one executor and used by its engine thread only: no locks. Counts hits and misses for the
// mmserve_cache_* metrics. An entry larger than the whole budget is never stored (a budget of 0 disables it).
// Tests: tests/unit/engine/embedding_cache_test.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/executor.h"

namespace mmserve::engine {

class EmbeddingCache {
 public:
  EmbeddingCache(std::string name, int64_t capacity_bytes) : name_(std::move(name)), capacity_(capacity_bytes) {}

  // The entry, now the most recently used; nullptr (a miss) when absent.
  std::shared_ptr<const std::vector<float>> find(const std::string& key);
  // Stores `value` (replacing an entry of the same key), evicting least recently used entries to fit.
  void insert(const std::string& key, std::shared_ptr<const std::vector<float>> value);
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  CacheStats stats() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const std::vector<float>> value;
  };
  std::string name_;
  int64_t capacity_;
  int64_t bytes_ = 0, hits_ = 0, misses_ = 0;
  std::list<Entry> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// A content hash of bytes as 32 hex digits (two independent 64-bit FNV-1a-style lanes over the bytes and their
// length): the key of an image in the embedding caches and SAM's image_id.
std::string content_hash(const std::string& bytes);

}  // namespace mmserve::engine
