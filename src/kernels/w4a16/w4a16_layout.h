// Where each 4-bit value of a packed W4A16 tile sits (w4a16.h describes the layout); shared by the packer, the CPU
// twin, the GPU's dequantise kernel and, implicitly, the mma kernel, which consumes the words as A fragments.
//
// mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16", f16/bf16 A): lane L = 4 g + t holds four 32-bit
// registers a0..a3 of two 16-bit values each, the lower column in the low half:
//   a0: row g,     columns 2t, 2t + 1        a1: row g + 8, columns 2t, 2t + 1
//   a2: row g,     columns 2t + 8, 2t + 9    a3: row g + 8, columns 2t + 8, 2t + 9
// A packed word holds register i's two values in nibbles i (low half's value) and i + 4 (high half's), so
// ((word >> 4i) & 0x000f000f) | magic is register i as two 16-bit numbers magic + value: the int4 -> f16/bf16 trick
// of Marlin (IST-DASLab/marlin, marlin_cuda_kernel.cu: dequant(); vLLM gptq_marlin's dequant<bf16>): OR-ing a value
// v < 16 into the low mantissa bits of 1024.0 (f16, 0x6400) or 128.0 (bf16, 0x4300) gives exactly base + v, and
// subtracting base + zero (stored as such) leaves v - zero, exact. Unlike Marlin, every nibble is shifted to the
// bottom (one shift and one lop3 a register), which is what bf16 needs anyway (its 7-bit mantissa has no room for
// Marlin's f16 shortcut of a nibble at bits 4..7).
// Tests: w4a16_test.cpp (the packing's round trip), w4a16_cuda_test.cpp (the kernels against the CPU twin).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MMSERVE_W4A16_HD __host__ __device__ __forceinline__
#else
#define MMSERVE_W4A16_HD inline
#endif

namespace mmserve::kernels::w4a16_layout {

// Register i (0..3) of lane L, value h (0: the low half, 1: the high half): its row in the 16-row tile and its
// column in the 16-column step.
MMSERVE_W4A16_HD int fragment_row(int lane, int i) {
  return lane / 4 + 8 * (i & 1);
}
MMSERVE_W4A16_HD int fragment_col(int lane, int i, int h) {
  return 2 * (lane % 4) + 8 * (i >> 1) + h;
}
// The bit of the word where that value's nibble starts.
MMSERVE_W4A16_HD int nibble_shift(int i, int h) {
  return 4 * (i + 4 * h);
}

// Index of the word of tile (nt, kt), lane, step s (0..3) in W4A16Packed::q; col_tiles = k / 64.
MMSERVE_W4A16_HD int64_t word_index(int64_t nt, int64_t kt, int64_t col_tiles, int lane, int s) {
  return ((nt * col_tiles + kt) * 32 + lane) * 4 + s;
}

// Index of the first of the four 16-bit values of (group, row strip nt, fragment row g) in W4A16Packed::sz.
MMSERVE_W4A16_HD int64_t sz_index(int64_t group, int64_t nt, int64_t row_tiles, int g) {
  return ((group * row_tiles + nt) * 8 + g) * 4;
}

// The group of input column `col` (< 2^21) without a division, as the mma kernel finds a tile's scales. Group sizes
// are multiples of 32, so col / gs = (col / 32) / d with d = gs / 32; for d >= 2 and a = col / 32 < 2^16,
// floor(a * (floor(2^32 / d) + 1) / 2^32) = floor(a / d) exactly (the multiplier exceeds 2^32 / d by less than 1,
// which adds less than a / 2^32 < 1 / d to a / d). d = 1 (group size 32) is the shift alone: group_magic is 0 there.
inline constexpr int64_t kMaxGroupedCols = int64_t{1} << 21;
inline uint32_t group_magic(int64_t group_size) {
  const uint64_t d = static_cast<uint64_t>(group_size / 32);
  return d <= 1 ? 0u : static_cast<uint32_t>((uint64_t{1} << 32) / d + 1);
}
MMSERVE_W4A16_HD uint32_t group_of(uint32_t col, uint32_t magic) {
  return magic == 0 ? col >> 5 : static_cast<uint32_t>((static_cast<uint64_t>(col >> 5) * magic) >> 32);
}

// base + zero is stored in place of the zero: base 1024 (f16) or 128 (bf16) as 16-bit patterns, doubled.
inline constexpr uint32_t kMagicF16x2 = 0x64006400u, kMagicBf16x2 = 0x43004300u;
inline constexpr float kBaseF16 = 1024.0f, kBaseBf16 = 128.0f;

}  // namespace mmserve::kernels::w4a16_layout
