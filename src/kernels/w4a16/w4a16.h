// W4A16: 4-bit weights (AWQ / GPTQ, group-wise scales and zero points) with 16-bit activations (issue 17, item 2).
// This header is the host side: the logical weight a checkpoint reader hands over, its repacking into the layout
// the GPU kernel reads (w4a16_pack), and the CPU twin of the GEMM over that packed layout. The kernel is in
// w4a16_cuda.h; docs/perf/w4a16.md has the design and the figures.
//
// The logical weight (Int4WeightView, the same fields as models/quant/int4_weight.h, kept here as pointers so the
// kernels stay below models/): one linear of n output rows and k input columns,
//     W[r][c] = (q[r * k + c] - zeros[r * G + g]) * scales[r * G + g],   g = c / group_size, G = k / group_size,
// or g = g_idx[c] with act-order (GPTQ desc_act). group_size == k (or -1) is one group per row.
//
// The packed layout (W4A16Packed), built for mma.sync.m16n8k16 with the weights as the A operand (16 output rows x
// 16 input columns; the activations are the B operand, 8 tokens a fragment):
//   * perm [k] (act-order only; empty otherwise): the input columns sorted by group (stable), so every group is a
//     contiguous run of group_size packed columns; packed column j is logical column perm[j], and the kernel reads
//     x[:, perm[j]]. Left empty when it is the identity (g_idx already sorted).
//   * q: tiles of 16 rows x 64 packed columns, row-strip major (tile (nt, kt) at index nt * (k / 64) + kt), 512 bytes
//     each = one 16-byte load per lane of a warp. Lane L's 16 bytes are 4 words, one per 16-column step s; word s
//     holds the 8 values of lane L's A fragment of that step (w4a16_layout.h: fragment_row / fragment_col), placed so
//     that ((word >> 4i) & 0x000f000f) holds the two values of fragment register i in its two 16-bit halves.
//   * sz: per group, row strip and fragment row g (0..7) four 16-bit values of `dtype`: the scale and the zero of row
//     16 nt + g, then of row 16 nt + g + 8 (one 8-byte load gives a lane both of its rows). The zero is stored as
//     base + zero (base 1024 for f16, 128 for bf16: the magic-number dequantisation's offset, w4a16_layout.h).
// Rounding: scales are rounded to `dtype` (exact for f16, which is what checkpoints hold; bf16 keeps 8 bits). The
// GEMM (m <= 64: the tensor-core kernel, and its CPU twin) computes y = sum over groups g of scale_g * (sum over g's
// columns of (q - zero) * x) in f32: q - zero is exact in the dtype, the products are exact, and the scale multiplies
// the group's f32 sum once, so no weight is rounded (Marlin and vLLM round each (q - zero) * scale to the dtype; we
// did too until 2026-12-07: the per-group scale saves an instruction a weight pair and a rounding). A dequantised
// weight (w4a16_dequantize_cpu / _cuda, the m > 64 path that hands W to cuBLASLt) is round_dtype((q - zero) *
// scale): the product rounds once, so that path differs from the twin by each weight's rounding (<= 2^-8 of it in
// bf16, 2^-11 in f16), which its tests allow.
//
// Contract (w4a16_check): n % 16 == 0, k % 64 == 0, group_size a multiple of 32 that divides k (or k / -1),
// q in 0..15, zeros in 0..127 (GPTQ v1's stored + 1 may reach 16), finite scales, and with g_idx every group holds
// exactly group_size columns (what GPTQ's desc_act writes). Anything else is refused with a message.
// Tests: w4a16_test.cpp (round trip of the packing, the GEMM against a double-precision loop over the logical form,
// every refusal), w4a16_mma_model_test.cpp (a CPU model of the kernel's indexing), w4a16_cuda_test.cpp (the GPU).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

struct Int4WeightView {
  int64_t n = 0, k = 0, group_size = 0;  // group_size == k or -1: one group per row
  const uint8_t* q = nullptr;            // [n * k], one value 0..15 a byte
  const float* scales = nullptr;         // [n * G]
  const uint8_t* zeros = nullptr;        // [n * G]
  const int32_t* g_idx = nullptr;        // [k] group of each input column, or null
};

struct W4A16Packed {
  int64_t n = 0, k = 0, group_size = 0, groups = 0;
  DType dtype = DType::kBF16;  // of the activations, the scales and the dequantised weights: bf16 or f16
  std::vector<uint32_t> q;     // (n / 16) * (k / 64) tiles of 128 words
  std::vector<uint16_t> sz;    // [groups][n / 16][8][4]
  std::vector<int32_t> perm;   // [k], or empty (identity)
};

inline constexpr int64_t kW4A16RowTile = 16, kW4A16ColTile = 64, kW4A16MinGroup = 32;

Status w4a16_check(const Int4WeightView& w);

// The packed form of `w` for activations of `dtype` (bf16 or f16).
StatusOr<W4A16Packed> w4a16_pack(const Int4WeightView& w, DType dtype);

// The dequantised weight [n][k] (f32 values of `dtype`) read back from the packed layout, in logical column order
// (packed_order false) or in the packed (perm) order, which is what w4a16_dequantize_cuda writes.
std::vector<float> w4a16_dequantize_cpu(const W4A16Packed& w, bool packed_order = false);

// The CPU twin of w4a16_gemm_cuda at m <= 64: y[m][n] = sum_g scale[n][g] * sum_{c in g} (q - zero)[n][c] * x[m][c],
// groups in packed column order, f32 accumulation, x [m, k] and y [m, n] row-major f32.
void w4a16_gemm_cpu(const float* x, int64_t m, const W4A16Packed& w, float* y);

}  // namespace mmserve::kernels
