// Arena: one allocation up front, bump-pointer sub-allocations, reset between batches.
//
// Models plan their workspace (activations for the largest batch) and take it from an Arena, so the hot
// path never calls malloc. Allocations are 64-byte aligned (cache line / AVX-512). Exceeding the capacity
// is a Status (the caller sized the arena from a plan, so it is a bug in the plan or a request that is too
// large, never a crash). The CUDA backend will reuse the same interface over one cudaMalloc.
// Tests: tests/unit/core/arena_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mmserve {

class Arena {
 public:
  static constexpr size_t kAlignment = 64;
  explicit Arena(size_t capacity_bytes = 0);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Grows the backing buffer (only between batches: invalidates earlier allocations).
  void reserve(size_t capacity_bytes);
  StatusOr<void*> allocate(size_t bytes);
  // A contiguous tensor of `shape` taken from the arena.
  StatusOr<Tensor> allocate_tensor(DType dtype, const std::vector<int64_t>& shape);
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace mmserve
