// DType tables and the f16 conversions (IEEE binary16, round to nearest even as torch does).
#include "core/dtype.h"

#include <cmath>

namespace mmserve {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kF8E5M2: return 1;
    case DType::kI4Packed: return 0;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

size_t storage_bytes(DType dtype, int64_t count) {
  if (dtype == DType::kI4Packed) return static_cast<size_t>((count + 1) / 2);
  return dtype_size(dtype) * static_cast<size_t>(count);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
    case DType::kI4Packed: return "i4";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "F8_E5M2") return DType::kF8E5M2;
  if (name == "I8") return DType::kI8;
  if (name == "U8") return DType::kU8;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  return std::nullopt;
}

const char* dtype_to_safetensors(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kI4Packed: return "U8";  // packed int4 is stored as bytes with a side scale tensor
  }
  return "?";
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24, exact in f32.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
  return f32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t bits = bits_from_f32(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (bits < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to nearest even.
    float scaled = f32_from_bits(bits) * 16777216.0f;  // exact: power of two
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: drop 13 mantissa bits with round to nearest even.
  uint32_t rounded = bits + 0xfffu + ((bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

bool convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t count) {
  switch (src_dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(count) * 4); return true;
    case DType::kF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = f16_to_f32(p[i]);
      return true;
    }
    case DType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(p[i]);
      return true;
    }
    default: return false;
  }
}

bool convert_from_f32(const float* src, DType dst_dtype, void* dst, int64_t count) {
  switch (dst_dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(count) * 4); return true;
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) p[i] = f32_to_f16(src[i]);
      return true;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) p[i] = f32_to_bf16(src[i]);
      return true;
    }
    default: return false;
  }
}

}  // namespace mmserve
