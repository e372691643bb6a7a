// Tests of the bump-pointer Arena (src/core/arena.h): 64-byte alignment of every allocation, exact
// capacity accounting with rounding, the kResourceExhausted error and its numbers, reset, high-water
// mark, reserve() growth and tensor allocation.
#include "core/arena.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace mmserve {
namespace {

using ::testing::HasSubstr;

uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

TEST(ArenaTest, AllocationsAreAlignedAndRoundedTo64) {
  Arena arena(1024);
  EXPECT_EQ(arena.capacity(), 1024u);
  auto a = arena.allocate(1);
  auto b = arena.allocate(65);
  auto c = arena.allocate(64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(addr(*a) % 64, 0u);
  EXPECT_EQ(addr(*b) - addr(*a), 64u);   // 1 byte rounds to 64
  EXPECT_EQ(addr(*c) - addr(*b), 128u);  // 65 bytes round to 128
  EXPECT_EQ(arena.used(), 256u);
}

TEST(ArenaTest, CapacityIsRoundedUp) {
  Arena arena(100);
  EXPECT_EQ(arena.capacity(), 128u);
}

TEST(ArenaTest, ExhaustionIsAStatusWithNumbers) {
  Arena arena(256);
  ASSERT_TRUE(arena.allocate(200).ok());  // takes 256
  auto more = arena.allocate(1);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("1 bytes"));
  EXPECT_THAT(more.status().message(), HasSubstr("256 of 256"));
  EXPECT_EQ(arena.used(), 256u);  // a failed allocation changes nothing
}

TEST(ArenaTest, ExactFitSucceeds) {
  Arena arena(192);
  ASSERT_TRUE(arena.allocate(128).ok());
  ASSERT_TRUE(arena.allocate(64).ok());
  EXPECT_FALSE(arena.allocate(1).ok());
}

TEST(ArenaTest, HugeRequestDoesNotOverflow) {
  Arena arena(128);
  ASSERT_TRUE(arena.allocate(64).ok());
  auto huge = arena.allocate(std::numeric_limits<size_t>::max() - 10);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
}

TEST(ArenaTest, ResetKeepsHighWater) {
  Arena arena(1024);
  ASSERT_TRUE(arena.allocate(300).ok());  // 320
  ASSERT_TRUE(arena.allocate(100).ok());  // 128 -> 448
  EXPECT_EQ(arena.high_water(), 448u);
  const void* first = *arena.allocate(0);
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  auto again = arena.allocate(64);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, first);
  EXPECT_EQ(arena.used(), 64u);
  EXPECT_EQ(arena.high_water(), 448u);
}

TEST(ArenaTest, EmptyArenaRefusesAndReserveGrows) {
  Arena arena;
  EXPECT_EQ(arena.capacity(), 0u);
  EXPECT_EQ(arena.allocate(1).status().code(), StatusCode::kResourceExhausted);
  arena.reserve(512);
  EXPECT_EQ(arena.capacity(), 512u);
  auto p = arena.allocate(512);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(addr(*p) % 64, 0u);
  arena.reserve(256);  // never shrinks
  EXPECT_EQ(arena.capacity(), 512u);
}

TEST(ArenaTest, MemoryIsWritable) {
  Arena arena(4096);
  auto p = arena.allocate(4096);
  ASSERT_TRUE(p.ok());
  auto* bytes = static_cast<uint8_t*>(*p);
  for (int i = 0; i < 4096; ++i) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(bytes[4095], 255);
}

TEST(ArenaTest, AllocateTensor) {
  Arena arena(1024);
  auto t = arena.allocate_tensor(DType::kBF16, {3, 5});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->dtype(), DType::kBF16);
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(addr(t->data()) % 64, 0u);
  EXPECT_EQ(arena.used(), 64u);  // 30 bytes rounded up
  EXPECT_EQ(arena.allocate_tensor(DType::kF32, {-1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(arena.allocate_tensor(DType::kF32, {1, 1, 1, 1, 1, 1, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(arena.allocate_tensor(DType::kF32, {1 << 30, 1 << 30, 1 << 30}).status().code(),
            StatusCode::kResourceExhausted);
  auto too_big = arena.allocate_tensor(DType::kF32, {1024});
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(too_big.status().message(), HasSubstr("4096 bytes"));
}

}  // namespace
}  // namespace mmserve
