// 8-bit image levels -> the model's float pixel values through a per-channel table: out[i][c][p] =
// table[c * 256 + levels[i][c][p]]. The image frontend's rescale + normalise is a function of the level and the
// channel only (frontends/image/preprocess.h: pixel_value_table), so moving levels (1 byte per value) and
// expanding them where the model runs gives its values exactly, with 4x fewer bytes through the host, the
// engine thread's copy and PCIe.
// Layout: levels [n, channels, plane] u8, table [channels, 256] f32, out [n, channels, plane] f32 (no aliasing).
// Tests: pixel_levels_test.cpp, pixel_levels_cuda_test.cpp (bit-equal); bench: pixel_levels_cuda_bench.cpp.
#pragma once

#include <cstdint>

namespace mmserve::kernels {

// CPU twin. Precondition (checked, aborts): non-null pointers, n >= 0, channels >= 1, plane >= 0.
void expand_pixel_levels(const uint8_t* levels, int64_t n, int64_t channels, int64_t plane, const float* table,
                         float* out);

}  // namespace mmserve::kernels
