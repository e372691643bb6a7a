// Internal to the CPU twins of the CUDA kernels: read and write one element of an f32 / f16 / bf16 buffer as
// float. The twins are references (clarity over speed), so a switch per element is fine here; hot CPU kernels
// convert whole rows instead.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mmserve::kernels::cpu {

inline bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

// `dtype` must be f32, f16 or bf16 (callers check with is_float_dtype first).
inline float load_float(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[index];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
    default: return bf16_to_f32(static_cast<const uint16_t*>(base)[index]);
  }
}

inline void store_float(void* base, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[index] = value; break;
    case DType::kF16: static_cast<uint16_t*>(base)[index] = f32_to_f16(value); break;
    default: static_cast<uint16_t*>(base)[index] = f32_to_bf16(value); break;
  }
}

}  // namespace mmserve::kernels::cpu
