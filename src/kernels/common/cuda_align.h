// Alignment checks the CUDA kernels' host launchers make before picking a vectorised (16-byte load) variant.
#pragma once

#include <cstdint>

namespace mmserve::kernels {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace mmserve::kernels
