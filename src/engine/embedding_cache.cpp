// EmbeddingCache and content_hash (see embedding_cache.h). Tests: tests/unit/engine/embedding_cache_test.cpp.
#include "engine/embedding_cache.h"

#include <cstdio>

namespace mmserve::engine {
namespace {

int64_t bytes_of(const std::vector<float>& v) {
  return static_cast<int64_t>(v.size() * sizeof(float));
}

}  // namespace

std::shared_ptr<const std::vector<float>> EmbeddingCache::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void EmbeddingCache::insert(const std::string& key, std::shared_ptr<const std::vector<float>> value) {
  if (value == nullptr) return;
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= bytes_of(*it->second->value);
    lru_.erase(it->second);
    index_.erase(it);
  }
  const int64_t size = bytes_of(*value);
  if (size > capacity_) return;
  while (bytes_ + size > capacity_ && !lru_.empty()) {
    bytes_ -= bytes_of(*lru_.back().value);
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front(Entry{key, std::move(value)});
  index_[key] = lru_.begin();
  bytes_ += size;
}

CacheStats EmbeddingCache::stats() const {
  CacheStats s;
  s.name = name_;
  s.hits = hits_;
  s.misses = misses_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  s.capacity_bytes = capacity_;
  return s;
}

std::string content_hash(const std::string& bytes) {
  // Two FNV-1a lanes with different offsets and primes, each finished with a murmur3 mix: 128 bits, so an
  // accidental collision (which would answer with another image's masks) is out of reach.
  uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : bytes) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b ^ c) * 0x00000100000001b5ULL ^ (b >> 29);
  }
  auto mix = [](uint64_t x, uint64_t n) {
    x ^= n;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  };
  a = mix(a, bytes.size());
  b = mix(b, ~static_cast<uint64_t>(bytes.size()));
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return out;
}

}  // namespace mmserve::engine
