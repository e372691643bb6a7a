// Arena: one 64-byte-aligned buffer, bump-pointer allocation, reset between batches.
//
// Every sub-allocation is rounded up to kAlignment so the next one stays aligned too. Running out is a
// kResourceExhausted Status with the numbers (the workspace plan was wrong or the request is too big), never
// an abort; a failed reserve() leaves an empty arena, so the next allocate() reports it the same way.
// Tests: tests/unit/core/arena_test.cpp.
#include "core/arena.h"

#include <cstdlib>
#include <limits>
#include <optional>

namespace mmserve {
namespace {

// Rounds up to kAlignment; nullopt when that would overflow size_t.
std::optional<size_t> round_up(size_t bytes) {
  constexpr size_t kMask = Arena::kAlignment - 1;
  if (bytes > std::numeric_limits<size_t>::max() - kMask) return std::nullopt;
  return (bytes + kMask) & ~kMask;
}

}  // namespace

Arena::Arena(size_t capacity_bytes) {
  reserve(capacity_bytes);
}

Arena::~Arena() {
  std::free(base_);
}

void Arena::reserve(size_t capacity_bytes) {
  if (capacity_bytes <= capacity_) return;
  std::free(base_);
  base_ = nullptr;
  capacity_ = 0;
  used_ = 0;
  const auto rounded = round_up(capacity_bytes);  // aligned_alloc wants a multiple of the alignment
  if (!rounded) return;
  base_ = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, *rounded));
  if (base_ != nullptr) capacity_ = *rounded;
}

StatusOr<void*> Arena::allocate(size_t bytes) {
  const auto rounded = round_up(bytes);
  if (!rounded || *rounded > capacity_ - used_) {
    return resource_exhausted("arena: cannot allocate " + std::to_string(bytes) + " bytes: " + std::to_string(used_) +
                              " of " + std::to_string(capacity_) + " bytes in use");
  }
  // A zero-byte request gets the current position (possibly null in an empty arena) without advancing.
  void* p = base_ + used_;
  used_ += *rounded;
  if (used_ > high_water_) high_water_ = used_;
  return p;
}

StatusOr<Tensor> Arena::allocate_tensor(DType dtype, const std::vector<int64_t>& shape) {
  if (shape.size() > static_cast<size_t>(Tensor::kMaxDims)) {
    return invalid_argument("arena: tensor of " + std::to_string(shape.size()) + " dimensions (at most " +
                            std::to_string(Tensor::kMaxDims) + ")");
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("arena: negative dimension " + std::to_string(d));
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  }
  overflow |= numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8;  // room for bytes
  if (overflow) return resource_exhausted("arena: tensor shape overflows the byte count");
  ASSIGN_OR_RETURN(void* p, allocate(storage_bytes(dtype, static_cast<int64_t>(numel))));
  return Tensor(p, dtype, shape);
}

}  // namespace mmserve
