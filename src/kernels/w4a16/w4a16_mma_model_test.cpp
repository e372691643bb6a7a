// A CPU model of w4a16_cuda.cu's mma_kernel (with its in-launch split-K reduction), run against the CPU twin where no
// GPU is at hand. The model executes the kernel's loops and index arithmetic as written there (chunks, x staging into
// shared memory, the weight ring's slots, ldmatrix addresses, the sz lookups, the per-group sums and
// their scaling, the epilogue's rows and columns, the split-K partials), over a modelled warp whose ldmatrix.x4 and
// mma.sync.m16n8k16 follow the PTX ISA's fragment tables, written here in their own (inverse) form rather than through
// w4a16_layout.h. Shared memory starts as NaN, so a read of anything the CTA did not load shows. What it cannot check:
// the hardware itself (timing, PDL, cp/ld cache hints, the half2/bf162 intrinsics' rounding; w4a16_cuda_test.cpp does
// that on the GPU). Keep it in step with mma_kernel when that changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/testing/kernel_test_util.h"
#include "kernels/w4a16/w4a16.h"
#include "kernels/w4a16/w4a16_layout.h"
#include "kernels/w4a16/w4a16_test_util.h"

namespace mmserve::kernels {
namespace {

// As in w4a16_cuda.cu.
constexpr int kWarps = 4, kChunkTiles = 4, kChunkCols = 256, kXStride = kChunkCols + 8;
constexpr int stage_chunks(int m_tiles) {
  return 24576 / (8 * m_tiles * kXStride * 2) > 0 ? 24576 / (8 * m_tiles * kXStride * 2) : 1;
}

float value_of(uint16_t bits, DType dtype) {
  return dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}
uint16_t bits_of(float v, DType dtype) {
  return dtype == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
}
uint16_t half_of(uint32_t word, int h) {
  return static_cast<uint16_t>(word >> (16 * h));
}

using Regs4 = std::vector<std::array<uint32_t, 4>>;  // [lane][register]

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (PTX ISA): lane l gives the address of row l % 8 of matrix l / 8; lane L
// receives in register q the elements 2 (L % 4) and 2 (L % 4) + 1 of row L / 4 of matrix q.
Regs4 ldmatrix_x4(const std::vector<uint16_t>& smem, const int64_t (&address)[32]) {
  Regs4 r(32);
  for (int lane = 0; lane < 32; ++lane) {
    for (int q = 0; q < 4; ++q) {
      const int64_t row = address[8 * q + lane / 4];
      r[lane][q] = uint32_t{smem.at(row + 2 * (lane % 4))} | uint32_t{smem.at(row + 2 * (lane % 4) + 1)} << 16;
    }
  }
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32 (PTX ISA fragment tables): A(row, k) in lane 4 (row % 8) + (k % 8) / 2,
// register row / 8 + 2 (k / 8), half k % 2; B(k, n) in lane 4 n + (k % 8) / 2, register k / 8 (of b0, b1), half
// k % 2; C(row, n) in lane 4 (row % 8) + n / 2, element 2 (row / 8) + n % 2.
void mma(std::vector<std::array<float, 4>>& c, const Regs4& a, const std::vector<std::array<uint32_t, 2>>& b,
         DType dtype) {
  for (int row = 0; row < 16; ++row) {
    for (int n = 0; n < 8; ++n) {
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) {
        const float av = value_of(half_of(a[4 * (row % 8) + (k % 8) / 2][row / 8 + 2 * (k / 8)], k % 2), dtype);
        const float bv = value_of(half_of(b[4 * n + (k % 8) / 2][k / 8], k % 2), dtype);
        sum += av * bv;
      }
      c[4 * (row % 8) + n / 2][2 * (row / 8) + n % 2] += sum;
    }
  }
}

// unscaled<T> of one lane: register i = ((word >> 4i) & 0x000f000f) | magic, then v - zb per half (q - zero: exact).
std::array<uint32_t, 4> unscaled(uint32_t word, const uint16_t* sz, DType dtype) {
  const uint32_t magic = dtype == DType::kF16 ? 0x64006400u : 0x43004300u;
  std::array<uint32_t, 4> a{};
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = ((word >> (4 * i)) & 0x000f000fu) | magic;
    const uint16_t* row = sz + 2 * (i & 1);  // {s, zb} of row g, then of row g + 8
    for (int h = 0; h < 2; ++h) {
      const float d = value_of(half_of(v, h), dtype) - value_of(row[1], dtype);
      a[i] |= uint32_t{bits_of(d, dtype)} << (16 * h);
    }
  }
  return a;
}

// flush_group: acc += scale of the C element's row (c0, c1: row g; c2, c3: row g + 8) * the group's sum; sum = 0.
void flush_group(std::vector<std::array<float, 4>>& acc, std::vector<std::array<float, 4>>& group,
                 const std::vector<uint16_t>& sz, const std::array<int64_t, 32>& at, DType dtype) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 4; ++e) {
      const float scale = value_of(sz.at(static_cast<size_t>(at[lane] + 2 * (e / 2))), dtype);
      acc[lane][e] = std::fma(scale, group[lane][e], acc[lane][e]);
      group[lane][e] = 0.0f;
    }
  }
}

// mma_kernel over every CTA, then the last split CTA of each column block's sum, y rounded to the dtype as write_output
// does (no bias, no accumulate).
std::vector<float> model_gemm(const W4A16Packed& w, const std::vector<uint16_t>& x, int64_t m, int64_t splits_wanted) {
  const int64_t row_tiles = w.n / 16, col_tiles = w.k / 64;
  const int64_t chunks = (col_tiles + kChunkTiles - 1) / kChunkTiles, ctas_n = (row_tiles + kWarps - 1) / kWarps;
  const int64_t want = std::clamp<int64_t>(splits_wanted, 1, std::min<int64_t>(16, chunks));
  const int64_t chunks_per_split = (chunks + want - 1) / want,
                splits = (chunks + chunks_per_split - 1) / chunks_per_split;
  const int m_tiles = m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8;
  const int rows = 8 * m_tiles, stage = stage_chunks(m_tiles);
  std::vector<float> partial(static_cast<size_t>(splits * m * w.n), std::nanf("")),
      y(static_cast<size_t>(m * w.n), std::nanf(""));  // an output nobody writes shows
  const std::vector<int32_t>& perm = w.perm;
  for (int64_t by = 0; by < splits; ++by) {
    for (int64_t bx = 0; bx < ctas_n; ++bx) {
      std::vector<uint16_t> xs(static_cast<size_t>(stage * rows * kXStride), 0xffff);  // NaN in f16 and bf16
      const int64_t c_begin = by * chunks_per_split, c_end = std::min(chunks, c_begin + chunks_per_split);
      // mma_kernel's weight ring of kStages = 4 slots: slot (c - c_begin) % 4 holds chunk c, requested 3 ahead.
      const int ahead = 3;
      using ChunkWords = std::vector<Regs4>;                                    // [tile j][lane][word]
      using ChunkScales = std::vector<std::array<std::array<int64_t, 32>, 2>>;  // [tile j][half][lane] -> w.sz index
      struct WarpState {
        int64_t nt;
        bool active;
        std::vector<ChunkWords> words;                              // [ring slot]
        std::vector<ChunkScales> scales;                            // [ring slot]: copy_chunk's {s, zb} entries
        std::vector<std::vector<std::array<float, 4>>> acc, group;  // [m-tile][lane][element]
        int left = 0;                                               // halves until the group ends
        std::array<int64_t, 32> last_sz{};
      };
      const int64_t halves_per_group = w.group_size / 32;
      std::vector<WarpState> warps(kWarps);
      const bool g32 = w.group_size % 64 != 0;  // launch_mma_tiles' kG32
      const uint32_t magic = w4a16_layout::group_magic(w.group_size);
      // copy_chunk: the words and, per tile and half (one half unless g32), the sz entry of group_of's group.
      // Tiles past the last one re-read the last tile, a warp without a strip the last strip's (never used).
      const auto load_weights = [&](const WarpState& ws, int64_t c, ChunkWords& dst, ChunkScales& sz_dst) {
        const int64_t nt = std::min(ws.nt, row_tiles - 1);
        for (int j = 0; j < kChunkTiles; ++j) {
          const int64_t kt = std::min(c * kChunkTiles + j, col_tiles - 1);
          for (int lane = 0; lane < 32; ++lane) {
            for (int s = 0; s < 4; ++s) dst[j][lane][s] = w.q[((nt * col_tiles + kt) * 32 + lane) * 4 + s];
            for (int h = 0; h < 2; ++h) {
              const int hh = g32 ? h : 0;  // compute_half's sz[kG32 ? half : 0]
              const int64_t group = w4a16_layout::group_of(static_cast<uint32_t>(kt * 64 + 32 * hh), magic);
              sz_dst[j][h][lane] = ((group * row_tiles * 8) + nt * 8 + lane / 4) * 4;
            }
          }
        }
      };
      for (int warp = 0; warp < kWarps; ++warp) {
        WarpState& ws = warps[warp];
        ws.nt = bx * kWarps + warp, ws.active = ws.nt < row_tiles;
        ws.words.assign(ahead + 1, ChunkWords(kChunkTiles, Regs4(32)));
        ws.scales.assign(ahead + 1, ChunkScales(kChunkTiles));
        ws.acc.assign(m_tiles, std::vector<std::array<float, 4>>(32, {0, 0, 0, 0}));
        ws.group = ws.acc;
        ws.left = static_cast<int>(halves_per_group - (c_begin * kChunkCols) % w.group_size / 32);
        for (int64_t c = c_begin; c < std::min(c_end, c_begin + ahead); ++c) {
          load_weights(ws, c, ws.words[(c - c_begin) % (ahead + 1)], ws.scales[(c - c_begin) % (ahead + 1)]);
        }
      }
      for (int64_t s0 = c_begin; s0 < c_end; s0 += stage) {
        const int64_t s1 = std::min(c_end, s0 + stage);
        for (int64_t c = s0; c < s1; ++c) {  // load_x<rows> into slot c - s0, by all 128 threads
          uint16_t* slot = xs.data() + (c - s0) * rows * kXStride;
          const int64_t k0 = c * kChunkCols, width = std::min<int64_t>(kChunkCols, w.k - k0);
          for (int idx = 0; idx < rows * kChunkCols; ++idx) {
            const int r = idx / kChunkCols, cc = idx % kChunkCols;
            if (cc >= width) continue;
            const int64_t col = perm.empty() ? k0 + cc : perm[k0 + cc];
            slot[r * kXStride + cc] = r < m ? x[r * w.k + col] : uint16_t{0};
          }
        }
        for (int64_t c = s0; c < s1; ++c) {
          for (WarpState& ws : warps) {
            if (c + ahead < c_end) {
              const int64_t set = (c + ahead - c_begin) % (ahead + 1);
              load_weights(ws, c + ahead, ws.words[set], ws.scales[set]);
            }
            const ChunkWords& cur = ws.words[(c - c_begin) % (ahead + 1)];
            const ChunkScales& cur_sz = ws.scales[(c - c_begin) % (ahead + 1)];
            if (ws.active) {
              const int64_t xc = (c - s0) * rows * kXStride;
              for (int j = 0; j < kChunkTiles; ++j) {
                const int64_t kt = c * kChunkTiles + j;
                if (kt >= col_tiles) break;
                for (int half = 0; half < 2; ++half) {
                  const std::array<int64_t, 32>& at = cur_sz[j][half];  // the half's {s, zb} entry per lane
                  Regs4 a[2] = {Regs4(32), Regs4(32)};
                  for (int step = 0; step < 2; ++step) {
                    for (int lane = 0; lane < 32; ++lane) {
                      a[step][lane] =
                          unscaled(cur[j][lane][2 * half + step], &w.sz.at(static_cast<size_t>(at[lane])), w.dtype);
                    }
                  }
                  for (int mt = 0; mt < m_tiles; ++mt) {
                    int64_t address[32];
                    for (int lane = 0; lane < 32; ++lane) {
                      address[lane] = xc + (mt * 8 + lane % 8) * kXStride + j * 64 + half * 32 + 8 * (lane / 8);
                    }
                    const Regs4 b = ldmatrix_x4(xs, address);
                    for (int step = 0; step < 2; ++step) {
                      std::vector<std::array<uint32_t, 2>> bb(32);
                      for (int lane = 0; lane < 32; ++lane) bb[lane] = {b[lane][2 * step], b[lane][2 * step + 1]};
                      mma(ws.group[mt], a[step], bb, w.dtype);
                    }
                  }
                  ws.last_sz = at;
                  if (--ws.left == 0) {
                    for (int mt = 0; mt < m_tiles; ++mt) flush_group(ws.acc[mt], ws.group[mt], w.sz, at, w.dtype);
                    ws.left = static_cast<int>(halves_per_group);
                  }
                }
              }
            }
          }
        }
      }
      for (WarpState& ws : warps) {  // a group cut by the split's range
        if (ws.left == halves_per_group) continue;
        for (int mt = 0; mt < m_tiles; ++mt) flush_group(ws.acc[mt], ws.group[mt], w.sz, ws.last_sz, w.dtype);
      }
      for (const WarpState& ws : warps) {  // the epilogue
        if (!ws.active) continue;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          for (int mt = 0; mt < m_tiles; ++mt) {
            for (int e = 0; e < 4; ++e) {
              const int64_t row = mt * 8 + 2 * t + (e & 1), col = ws.nt * 16 + g + (e < 2 ? 0 : 8);
              if (row >= m) continue;
              const float v = ws.acc[mt][lane][e];
              if (splits == 1) {
                y[row * w.n + col] = value_of(bits_of(v, w.dtype), w.dtype);
              } else {
                partial[(by * m + row) * w.n + col] = v;
              }
            }
          }
        }
      }
    }
  }
  if (splits > 1) {  // the last arrival of column block bx: its 64 columns, every row, splits in order
    for (int64_t bx = 0; bx < ctas_n; ++bx) {
      const int64_t col0 = bx * kWarps * 16, cols = std::min<int64_t>(kWarps * 16, w.n - col0);
      for (int64_t i = 0; i < m * cols; ++i) {
        const int64_t row = i / cols, col = col0 + i % cols;
        float v = 0.0f;
        for (int64_t s = 0; s < splits; ++s) v += partial[s * m * w.n + row * w.n + col];
        y[row * w.n + col] = value_of(bits_of(v, w.dtype), w.dtype);
      }
    }
  }
  return y;
}

TEST(W4A16MmaModel, TheKernelsIndexingComputesTheTwinsProduct) {
  struct Shape {
    int64_t n, k;
  };
  // 10 chunks of 256 columns at k = 2560: more than the 5 one stage holds at m <= 8. k = 768 with group size 96:
  // split ranges that start inside a group (column 256 is 64 columns into group 2), which the per-group scaling
  // must carry across (mma_kernel's `left`).
  const Shape shapes[] = {{16, 64}, {48, 192}, {80, 320}, {272, 640}, {32, 2560}, {48, 768}};
  uint32_t seed = 1;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape& s : shapes) {
      for (int64_t gs : {32, 64, 96, 128, -1}) {  // 64, 96: group_of's multiplier (d = 2, 3)
        if (gs != -1 && s.k % gs != 0) continue;
        for (bool act : {false, true}) {
          const w4a16_test::LogicalWeight logical = w4a16_test::random_weight(s.n, s.k, gs, act, seed++);
          auto packed = w4a16_pack(logical.view(), dtype);
          ASSERT_TRUE(packed.ok()) << packed.status().to_string();
          const std::vector<float> weight = w4a16_dequantize_cpu(*packed);
          for (int64_t m : {1, 9, 17, 64}) {
            for (int64_t splits : {1, 3}) {
              const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(s.n) +
                                       " k=" + std::to_string(s.k) + " group_size=" + std::to_string(gs) +
                                       (act ? " act-order" : "") + " m=" + std::to_string(m) +
                                       " splits=" + std::to_string(splits);
              std::vector<float> x = test_util::random_floats(static_cast<size_t>(m * s.k), seed++, -1, 1);
              std::vector<uint16_t> x_bits(x.size());
              for (size_t i = 0; i < x.size(); ++i) x_bits[i] = bits_of(x[i], dtype), x[i] = value_of(x_bits[i], dtype);
              std::vector<float> want(static_cast<size_t>(m * s.n));
              w4a16_gemm_cpu(x.data(), m, *packed, want.data());
              const std::vector<float> got = model_gemm(*packed, x_bits, m, splits);
              const double eps = dtype == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
              int64_t bad = 0;
              for (int64_t r = 0; r < m; ++r) {
                for (int64_t o = 0; o < s.n; ++o) {
                  double abs_sum = 0;
                  for (int64_t c = 0; c < s.k; ++c) abs_sum += std::fabs(double{x[r * s.k + c]} * weight[o * s.k + c]);
                  const double g = got[r * s.n + o], e = want[r * s.n + o];
                  if (!(std::fabs(g - e) <= eps * std::fabs(e) + abs_sum / 16384 + 1e-6) && bad++ < 4) {
                    ADD_FAILURE() << what << ": y[" << r << "][" << o << "] = " << g << ", twin " << e;
                  }
                }
              }
              ASSERT_EQ(bad, 0) << what << ": " << bad << " outputs wrong";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
