// Element types of tensors, with the conversions the CPU path needs.
//
// f32, f16 and bf16 are computed with; f8 and packed int4 are reserved here so that checkpoints and
// kernels can name them (quantisation lands with the GPU work). Conversions are bit-exact with
// PyTorch's: f16/bf16 -> f32 is exact, f32 -> bf16 rounds to nearest even, as torch does.
// Tests: tests/unit/core/dtype_test.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace mmserve {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,    // reserved: FP8 weights/activations (issue on quantisation)
  kF8E5M2,    // reserved
  kI4Packed,  // reserved: two 4-bit values per byte with group scales
  kI8,
  kU8,
  kI32,
  kI64,
};

// Bytes per element; 0 for kI4Packed (two elements share a byte: use storage_bytes()).
size_t dtype_size(DType dtype);
// Bytes that `count` elements take (handles packed int4).
size_t storage_bytes(DType dtype, int64_t count);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...
// safetensors dtype strings: "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "U8", "I32", "I64".
std::optional<DType> dtype_from_safetensors(std::string_view name);
const char* dtype_to_safetensors(DType dtype);

inline float f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}
// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits = bits_from_f32(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts `count` elements of `src` (f32, f16 or bf16) to f32. Other dtypes: returns false.
bool convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t count);
// Its inverse: `count` f32 values to `dst_dtype` (f32, f16 or bf16, rounded to nearest even as f32_to_f16 /
// f32_to_bf16). Other dtypes: returns false.
bool convert_from_f32(const float* src, DType dst_dtype, void* dst, int64_t count);

}  // namespace mmserve
