// W4A16 on the host (see w4a16.h): the shape checks, the packing into the GPU kernel's layout, and the CPU twin of
// the GEMM, which reads the packed layout back (so its test checks the packer as well).
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/parallel.h"
#include "kernels/w4a16/w4a16.h"
#include "kernels/w4a16/w4a16_layout.h"

namespace mmserve::kernels {

namespace {

namespace layout = w4a16_layout;

int64_t group_size_of(const Int4WeightView& w) {
  return w.group_size == -1 ? w.k : w.group_size;
}

uint16_t to_bits(float v, DType dtype) {
  return dtype == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
}

float from_bits(uint16_t h, DType dtype) {
  return dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
}

float base_of(DType dtype) {
  return dtype == DType::kF16 ? layout::kBaseF16 : layout::kBaseBf16;
}

}  // namespace

Status w4a16_check(const Int4WeightView& w) {
  const std::string shape =
      " (n=" + std::to_string(w.n) + " k=" + std::to_string(w.k) + " group_size=" + std::to_string(w.group_size) + ")";
  if (w.n <= 0 || w.k <= 0 || w.n % kW4A16RowTile != 0 || w.k % kW4A16ColTile != 0) {
    return invalid_argument("w4a16: n must be a positive multiple of 16 and k of 64" + shape);
  }
  if (w.k >= layout::kMaxGroupedCols) {
    return invalid_argument("w4a16: k must be below " + std::to_string(layout::kMaxGroupedCols) + shape);
  }
  const int64_t gs = group_size_of(w);
  if (gs <= 0 || gs % kW4A16MinGroup != 0 || w.k % gs != 0) {
    return invalid_argument("w4a16: group_size must be a multiple of 32 that divides k, or -1" + shape);
  }
  if (w.q == nullptr || w.scales == nullptr || w.zeros == nullptr) {
    return invalid_argument("w4a16: q, scales and zeros are required" + shape);
  }
  const int64_t groups = w.k / gs;
  for (int64_t i = 0; i < w.n * w.k; ++i) {
    if (w.q[i] > 15) return invalid_argument("w4a16: q[" + std::to_string(i) + "] is not a 4-bit value" + shape);
  }
  for (int64_t i = 0; i < w.n * groups; ++i) {
    if (w.zeros[i] > 127) {
      return invalid_argument("w4a16: zeros[" + std::to_string(i) + "] = " + std::to_string(w.zeros[i]) +
                              " is above 127" + shape);
    }
    if (!std::isfinite(w.scales[i])) {
      return invalid_argument("w4a16: scales[" + std::to_string(i) + "] is not finite" + shape);
    }
  }
  if (w.g_idx != nullptr) {
    std::vector<int64_t> count(static_cast<size_t>(groups), 0);
    for (int64_t c = 0; c < w.k; ++c) {
      if (w.g_idx[c] < 0 || w.g_idx[c] >= groups) {
        return invalid_argument("w4a16: g_idx[" + std::to_string(c) + "] = " + std::to_string(w.g_idx[c]) +
                                " is not a group below " + std::to_string(groups) + shape);
      }
      ++count[static_cast<size_t>(w.g_idx[c])];
    }
    for (int64_t g = 0; g < groups; ++g) {
      if (count[static_cast<size_t>(g)] != gs) {
        return invalid_argument("w4a16: g_idx gives group " + std::to_string(g) + " " +
                                std::to_string(count[static_cast<size_t>(g)]) +
                                " columns; act-order needs every group to hold group_size" + shape);
      }
    }
  }
  return ok_status();
}

StatusOr<W4A16Packed> w4a16_pack(const Int4WeightView& w, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return invalid_argument(std::string("w4a16: activations must be bf16 or f16, not ") + dtype_name(dtype));
  }
  RETURN_IF_ERROR(w4a16_check(w));
  W4A16Packed p;
  p.n = w.n, p.k = w.k, p.group_size = group_size_of(w), p.groups = w.k / p.group_size, p.dtype = dtype;
  // perm: columns sorted by group, stable (a counting sort); kept only when it is not the identity.
  std::vector<int32_t> perm(static_cast<size_t>(w.k));
  if (w.g_idx != nullptr) {
    std::vector<int64_t> next(static_cast<size_t>(p.groups));
    for (int64_t g = 0; g < p.groups; ++g) next[static_cast<size_t>(g)] = g * p.group_size;
    for (int64_t c = 0; c < w.k; ++c)
      perm[static_cast<size_t>(next[static_cast<size_t>(w.g_idx[c])]++)] = static_cast<int32_t>(c);
  } else {
    for (int64_t c = 0; c < w.k; ++c) perm[static_cast<size_t>(c)] = static_cast<int32_t>(c);
  }
  bool identity = true;
  for (int64_t c = 0; c < w.k && identity; ++c) identity = perm[static_cast<size_t>(c)] == c;
  if (!identity) p.perm = perm;

  const int64_t row_tiles = w.n / kW4A16RowTile, col_tiles = w.k / kW4A16ColTile;
  p.q.assign(static_cast<size_t>(row_tiles * col_tiles * 128), 0u);
  for (int64_t nt = 0; nt < row_tiles; ++nt) {
    for (int64_t kt = 0; kt < col_tiles; ++kt) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int s = 0; s < 4; ++s) {
          uint32_t word = 0;
          for (int i = 0; i < 4; ++i) {
            for (int h = 0; h < 2; ++h) {
              const int64_t row = nt * kW4A16RowTile + layout::fragment_row(lane, i);
              const int64_t col =
                  perm[static_cast<size_t>(kt * kW4A16ColTile + 16 * s + layout::fragment_col(lane, i, h))];
              word |= uint32_t{w.q[row * w.k + col]} << layout::nibble_shift(i, h);
            }
          }
          p.q[static_cast<size_t>(layout::word_index(nt, kt, col_tiles, lane, s))] = word;
        }
      }
    }
  }
  // Packed column j is in group j / group_size (perm made groups contiguous); sz in the checkpoint's group ids.
  p.sz.assign(static_cast<size_t>(p.groups * row_tiles * 32), 0);
  const float base = base_of(dtype);
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t nt = 0; nt < row_tiles; ++nt) {
      for (int fr = 0; fr < 8; ++fr) {
        uint16_t* at = p.sz.data() + layout::sz_index(g, nt, row_tiles, fr);
        for (int half = 0; half < 2; ++half) {
          const int64_t row = nt * kW4A16RowTile + fr + 8 * half;
          at[2 * half] = to_bits(w.scales[row * p.groups + g], dtype);
          at[2 * half + 1] = to_bits(base + static_cast<float>(w.zeros[row * p.groups + g]), dtype);  // exact
        }
      }
    }
  }
  return p;
}

namespace {

// What the packed weight holds, read back into plain arrays: q - zero [n][k] in packed column order (exact small
// integers) and the scales [n][groups] (values of the dtype). The one reader of the packed layout on the CPU: the
// dequantised weight and the GEMM twin are both built from it.
struct Unpacked {
  std::vector<float> q_minus_zero, scales;
};

Unpacked unpack(const W4A16Packed& w) {
  const int64_t row_tiles = w.n / kW4A16RowTile, col_tiles = w.k / kW4A16ColTile;
  const float base = base_of(w.dtype);
  Unpacked u;
  u.q_minus_zero.resize(static_cast<size_t>(w.n * w.k));
  u.scales.resize(static_cast<size_t>(w.n * w.groups));
  for (int64_t nt = 0; nt < row_tiles; ++nt) {
    for (int64_t kt = 0; kt < col_tiles; ++kt) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int s = 0; s < 4; ++s) {
          const uint32_t word = w.q[static_cast<size_t>(layout::word_index(nt, kt, col_tiles, lane, s))];
          for (int i = 0; i < 4; ++i) {
            for (int h = 0; h < 2; ++h) {
              const int fr = layout::fragment_row(lane, i);
              const int64_t row = nt * kW4A16RowTile + fr;
              const int64_t j = kt * kW4A16ColTile + 16 * s + layout::fragment_col(lane, i, h);
              const uint16_t* sz = w.sz.data() + layout::sz_index(j / w.group_size, nt, row_tiles, fr % 8);
              const float zero = from_bits(sz[2 * (fr / 8) + 1], w.dtype) - base;
              const float q = static_cast<float>((word >> layout::nibble_shift(i, h)) & 15u);
              u.q_minus_zero[static_cast<size_t>(row * w.k + j)] = q - zero;
              u.scales[static_cast<size_t>(row * w.groups + j / w.group_size)] = from_bits(sz[2 * (fr / 8)], w.dtype);
            }
          }
        }
      }
    }
  }
  return u;
}

}  // namespace

std::vector<float> w4a16_dequantize_cpu(const W4A16Packed& w, bool packed_order) {
  const Unpacked u = unpack(w);
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  for (int64_t row = 0; row < w.n; ++row) {
    for (int64_t j = 0; j < w.k; ++j) {
      const size_t at = static_cast<size_t>(row * w.k + j);
      const float scale = u.scales[static_cast<size_t>(row * w.groups + j / w.group_size)];
      const float value = from_bits(to_bits(u.q_minus_zero[at] * scale, w.dtype), w.dtype);  // exact in f32 first
      const int64_t col = packed_order || w.perm.empty() ? j : w.perm[static_cast<size_t>(j)];
      out[static_cast<size_t>(row * w.k + col)] = value;
    }
  }
  return out;
}

void w4a16_gemm_cpu(const float* x, int64_t m, const W4A16Packed& w, float* y) {
  const Unpacked u = unpack(w);
  const int64_t n = w.n, k = w.k, gs = w.group_size;
  std::vector<float> xp(static_cast<size_t>(m * k));  // x's columns in packed order
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < k; ++j) xp[r * k + j] = x[r * k + (w.perm.empty() ? j : w.perm[static_cast<size_t>(j)])];
  }
#pragma omp parallel for schedule(static) num_threads(parallel_threads(m* n* k))
  for (int64_t o = 0; o < n; ++o) {
    const float* qz = u.q_minus_zero.data() + o * k;
    const float* scales = u.scales.data() + o * w.groups;
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = xp.data() + r * k;
      float acc = 0.0f;
      for (int64_t g = 0; g < w.groups; ++g) {
        float sum = 0.0f;  // the group's unscaled sum, then scaled once (as the kernel's flush_group)
        for (int64_t j = g * gs; j < (g + 1) * gs; ++j) sum += xr[j] * qz[j];
        acc += scales[g] * sum;
      }
      y[r * n + o] = acc;
    }
  }
}

}  // namespace mmserve::kernels
