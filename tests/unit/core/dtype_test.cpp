// Tests of the dtype tables and the f16/bf16 conversions (src/core/dtype.h) against known IEEE bit
// patterns worked out by hand: exact values, the largest finite f16, overflow to infinity, subnormals,
// signed zero, NaN, and round-to-nearest-even on exact ties.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace mmserve {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(storage_bytes(DType::kF32, 3), 12u);
  EXPECT_EQ(storage_bytes(DType::kI4Packed, 5), 3u);  // two per byte, rounded up
  EXPECT_EQ(storage_bytes(DType::kI4Packed, 4), 2u);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
}

TEST(DTypeTest, SafetensorsNamesRoundTrip) {
  const char* names[] = {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "U8", "I32", "I64"};
  for (const char* name : names) {
    auto dtype = dtype_from_safetensors(name);
    ASSERT_TRUE(dtype.has_value()) << name;
    EXPECT_STREQ(dtype_to_safetensors(*dtype), name);
  }
  EXPECT_EQ(dtype_from_safetensors("BF16"), DType::kBF16);
  EXPECT_FALSE(dtype_from_safetensors("F64").has_value());
  EXPECT_FALSE(dtype_from_safetensors("BOOL").has_value());
  EXPECT_FALSE(dtype_from_safetensors("f32").has_value());  // case matters in the format
}

TEST(F16Test, DecodesKnownPatterns) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);        // 0x155/1024 * 2^-2 + 2^-2
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal, 5.96e-8
  EXPECT_NEAR(f16_to_f32(0x0001), 5.96e-8f, 0.01e-8f);
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));  // signalling NaN pattern is still NaN
  const float neg_zero = f16_to_f32(0x8000);
  EXPECT_EQ(neg_zero, 0.0f);
  EXPECT_TRUE(std::signbit(neg_zero));
}

TEST(F16Test, EncodesKnownPatterns) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // exact tie with an odd mantissa: rounds up to infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -30)), 0x0000);  // underflows to zero
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(F16Test, RoundsToNearestEvenOnTies) {
  // 1 + 2^-11 lies exactly between 0x3c00 (even) and 0x3c01: goes to the even one.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies between 0x3c01 and 0x3c02 (even).
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above a tie rounds up.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  // Subnormal ties: 2^-25 is half the smallest subnormal (-> 0), 3 * 2^-25 is 1.5 of it (-> 2).
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);
  // Largest subnormal + half a step rounds into the smallest normal (mantissa carry).
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);
}

TEST(BF16Test, KnownPatterns) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // FLT_MAX (0x7f7fffff) rounds up past the largest bf16: infinity, as torch does.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(BF16Test, RoundsToNearestEvenOnTies) {
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);                 // 0x3f808000: tie, 0x3f80 is even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);                 // 0x3f818000: tie, 0x3f81 is odd -> up
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f807fffu)), 0x3f80);  // just below
}

TEST(BF16Test, NaNStaysNaN) {
  // A NaN whose payload sits only in the low 16 bits would truncate to infinity without the quiet bit.
  const uint16_t h = f32_to_bf16(f32_from_bits(0x7f800001u));
  EXPECT_EQ(h & 0x7f80, 0x7f80);
  EXPECT_NE(h & 0x007f, 0);
  EXPECT_TRUE(std::isnan(bf16_to_f32(h)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ConvertTest, ConvertsHalfTypesAndRefusesOthers) {
  const uint16_t f16[] = {0x3c00, 0xc000, 0x7bff};
  const uint16_t bf16[] = {0x3f80, 0x4049};
  const float f32[] = {0.5f, -3.0f};
  float out[3] = {};
  ASSERT_TRUE(convert_to_f32(DType::kF16, f16, out, 3));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  ASSERT_TRUE(convert_to_f32(DType::kBF16, bf16, out, 2));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.140625f);
  ASSERT_TRUE(convert_to_f32(DType::kF32, f32, out, 2));
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], -3.0f);
  const int8_t i8[] = {1};
  EXPECT_FALSE(convert_to_f32(DType::kI8, i8, out, 1));
}

TEST(DType, ConvertFromF32RoundsAsTheScalarConversions) {
  const float in[] = {1.0f, -2.0f, 3.14159f, 65504.0f};
  uint16_t half[4], bf16[4];
  float f32[4];
  ASSERT_TRUE(convert_from_f32(in, DType::kF16, half, 4));
  ASSERT_TRUE(convert_from_f32(in, DType::kBF16, bf16, 4));
  ASSERT_TRUE(convert_from_f32(in, DType::kF32, f32, 4));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(half[i], f32_to_f16(in[i])) << i;
    EXPECT_EQ(bf16[i], f32_to_bf16(in[i])) << i;
    EXPECT_EQ(f32[i], in[i]) << i;
  }
  EXPECT_EQ(bf16[2], 0x4049);  // 3.140625, nearest even
  int8_t i8[1];
  EXPECT_FALSE(convert_from_f32(in, DType::kI8, i8, 1));
}

}  // namespace
}  // namespace mmserve
