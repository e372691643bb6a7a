// Test-only: the cases of the paged attention tests (paged_attention_test.cpp, paged_attention_cuda_test.cpp) and
// their reference, written from the contract in paged_attention.h independently of the twin.
//
// A case is a list of sequences (new tokens, length). Each sequence's keys and values are drawn as one contiguous
// [L, kv_heads * head_dim] panel, then scattered into a pool through a block table made from a shuffled list of
// block ids (so neighbouring blocks of a sequence are far apart in the pool); optionally sequence 1 starts with
// sequence 0's first full blocks, shared in place (a common prefix). Every slot no sequence reaches, the tail of
// each last block and the padding columns of q hold NaN: a kernel that reads them fails. The reference is a plain
// double loop over the contiguous panels, never over the pool. FP8 pools: each drawn value x is stored as the code
// fp8_encode(x / scale) (the scales small enough that some values saturate) and the panels hold its exact
// dequantised f32 value fp8_decode(code) * scale, so the reference sees what the contract says the kernels read;
// unreached slots hold the NaN code 0x7F.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/fp8/fp8.h"
#include "kernels/paged_attention/paged_attention.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels::paged_test {

struct Seq {
  int64_t q_len, length;
};

struct PagedCase {
  DType dtype = DType::kF32;
  int64_t heads = 4, kv_heads = 1, head_dim = 8, block_size = 16, window = 0;
  std::vector<Seq> seqs;
  int64_t q_pad = 0, out_pad = 0;  // extra columns of q and out rows
  int64_t shared_blocks = 0;       // sequence 1 starts with sequence 0's first blocks
  int64_t spare_blocks = 3;        // unreached blocks of the pool (NaN)
  int64_t table_pad = 1;           // block-table entries past the longest sequence (-1)
  PagedKvStorage kv_storage = PagedKvStorage::kSame;
  float k_scale = 1.0f, v_scale = 1.0f;  // FP8 pools

  std::string name() const {
    std::string s = std::string(dtype_name(dtype)) + " h=" + std::to_string(heads) + "/" + std::to_string(kv_heads) +
                    " d=" + std::to_string(head_dim) + " bs=" + std::to_string(block_size);
    for (const Seq& q : seqs) s += " (" + std::to_string(q.q_len) + "," + std::to_string(q.length) + ")";
    if (window) s += " window=" + std::to_string(window);
    if (q_pad || out_pad) s += " strided";
    if (shared_blocks) s += " shared=" + std::to_string(shared_blocks);
    if (kv_storage != PagedKvStorage::kSame) {
      s += std::string(" kv=") + paged_kv_storage_name(kv_storage) + " k_scale=" + std::to_string(k_scale) +
           " v_scale=" + std::to_string(v_scale);
    }
    return s;
  }
};

// Host data of a case; values already rounded through the dtype (f32 copies of what the kernels see).
struct PagedData {
  int64_t width = 0, num_tokens = 0, num_blocks = 0, table_ld = 0, q_ld = 0, out_ld = 0;
  int64_t max_seq_len = 1, max_query_len = 1;
  std::vector<float> q, k_cache, v_cache;  // k_cache, v_cache: the dequantised values for FP8 pools
  std::vector<uint8_t> k_codes, v_codes;   // FP8 pools: the pool's codes
  std::vector<int32_t> block_tables, seq_lens, query_start;
  std::vector<std::vector<float>> k_seq, v_seq;  // contiguous [L, width] panels, the reference's input
  double max_v = 0.0;
};

inline float round_to(float x, DType dtype) {
  if (dtype == DType::kF16) return f16_to_f32(f32_to_f16(x));
  if (dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

inline PagedData make_data(const PagedCase& c, uint32_t seed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t nseq = static_cast<int64_t>(c.seqs.size()), hidden = c.heads * c.head_dim;
  PagedData d;
  d.width = c.kv_heads * c.head_dim;
  d.q_ld = hidden + c.q_pad;
  d.out_ld = hidden + c.out_pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto draw = [&] { return round_to(dist(rng), c.dtype); };

  std::vector<int64_t> blocks_of(nseq);
  int64_t needed = 0;
  d.query_start.push_back(0);
  for (int64_t b = 0; b < nseq; ++b) {
    blocks_of[b] = (c.seqs[b].length + c.block_size - 1) / c.block_size;
    needed += blocks_of[b] - (b == 1 ? c.shared_blocks : 0);
    d.max_seq_len = std::max(d.max_seq_len, c.seqs[b].length);
    d.max_query_len = std::max(d.max_query_len, c.seqs[b].q_len);
    d.seq_lens.push_back(static_cast<int32_t>(c.seqs[b].length));
    d.query_start.push_back(static_cast<int32_t>(d.query_start.back() + c.seqs[b].q_len));
  }
  d.num_tokens = d.query_start.back();
  d.num_blocks = needed + c.spare_blocks;
  d.table_ld = (d.max_seq_len + c.block_size - 1) / c.block_size + c.table_pad;
  std::vector<int32_t> ids(static_cast<size_t>(d.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  d.block_tables.assign(static_cast<size_t>(nseq * d.table_ld), -1);
  size_t next = 0;
  for (int64_t b = 0; b < nseq; ++b) {
    for (int64_t i = 0; i < blocks_of[b]; ++i) {
      const bool shared = b == 1 && i < c.shared_blocks;
      d.block_tables[b * d.table_ld + i] = shared ? d.block_tables[i] : ids[next++];
    }
  }

  // Panels, then the pool through the tables (a shared prefix: sequence 1's first keys are sequence 0's).
  const size_t pool = static_cast<size_t>(d.num_blocks * c.block_size * d.width);
  d.k_cache.assign(pool, nan);
  d.v_cache.assign(pool, nan);
  const bool fp8 = c.kv_storage != PagedKvStorage::kSame;
  const Fp8Format format = c.kv_storage == PagedKvStorage::kFp8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  if (fp8) {
    d.k_codes.assign(pool, 0x7F);
    d.v_codes.assign(pool, 0x7F);
  }
  // An FP8 value is stored as its code; the panels get the code's value (shared slots keep their code).
  auto stored = [&](float x, float scale, uint8_t* code) {
    const uint8_t q = fp8_encode(x / scale, format);
    *code = q;
    return fp8_decode(q, format) * scale;
  };
  d.k_seq.resize(nseq);
  d.v_seq.resize(nseq);
  for (int64_t b = 0; b < nseq; ++b) {
    const int64_t L = c.seqs[b].length;
    for (int64_t j = 0; j < L; ++j) {
      for (int64_t col = 0; col < d.width; ++col) {
        const bool shared = b == 1 && j < c.shared_blocks * c.block_size;
        const int64_t slot = d.block_tables[b * d.table_ld + j / c.block_size] * c.block_size + j % c.block_size;
        float k = shared ? d.k_seq[0][j * d.width + col] : 2.0f * draw();
        float v = shared ? d.v_seq[0][j * d.width + col] : draw();
        if (fp8 && !shared) {
          k = stored(k, c.k_scale, &d.k_codes[slot * d.width + col]);
          v = stored(v, c.v_scale, &d.v_codes[slot * d.width + col]);
        }
        d.k_seq[b].push_back(k);
        d.v_seq[b].push_back(v);
        d.max_v = std::max(d.max_v, std::fabs(static_cast<double>(v)));
        d.k_cache[slot * d.width + col] = k;
        d.v_cache[slot * d.width + col] = v;
      }
    }
  }
  d.q.assign(static_cast<size_t>(std::max<int64_t>(d.num_tokens, 1) * d.q_ld), nan);
  for (int64_t r = 0; r < d.num_tokens; ++r) {
    for (int64_t col = 0; col < hidden; ++col) d.q[r * d.q_ld + col] = 2.0f * draw();
  }
  return d;
}

// Arguments of a case without its pointers.
inline PagedAttentionArgs make_args(const PagedCase& c, const PagedData& d) {
  PagedAttentionArgs a;
  a.q_ld = d.q_ld;
  a.out_ld = d.out_ld;
  a.dtype = c.dtype;
  a.block_table_ld = d.table_ld;
  a.num_seqs = static_cast<int64_t>(c.seqs.size());
  a.num_tokens = d.num_tokens;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.block_size = c.block_size;
  a.num_blocks = d.num_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.window = c.window;
  a.max_seq_len = d.max_seq_len;
  a.max_query_len = d.max_query_len;
  a.kv_storage = c.kv_storage;  // the scales' pointers are the caller's, as the others
  return a;
}

// The contract as a double loop over the panels: [num_tokens, heads * head_dim].
inline std::vector<double> reference(const PagedCase& c, const PagedData& d) {
  const int64_t hidden = c.heads * c.head_dim, group = c.heads / c.kv_heads;
  const double scale = static_cast<double>(1.0f / std::sqrt(static_cast<float>(c.head_dim)));  // make_args' float
  std::vector<double> out(static_cast<size_t>(d.num_tokens * hidden), 0.0);
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const int64_t q_len = c.seqs[b].q_len, L = c.seqs[b].length;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t row = d.query_start[b] + i, pos = L - q_len + i;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(pos - c.window + 1, 0) : 0;
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t col = (h / group) * c.head_dim;
        std::vector<double> s;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = lo; j <= pos; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < c.head_dim; ++e) {
            dot += static_cast<double>(d.q[row * d.q_ld + h * c.head_dim + e]) * d.k_seq[b][j * d.width + col + e];
          }
          s.push_back(scale * dot);
          mx = std::max(mx, s.back());
        }
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < c.head_dim; ++e) {
          double acc = 0.0;
          for (int64_t j = lo; j <= pos; ++j) acc += s[j - lo] * d.v_seq[b][j * d.width + col + e];
          out[row * hidden + h * c.head_dim + e] = acc / sum;
        }
      }
    }
  }
  return out;
}

// The columns [0, heads * head_dim) of rows of out_ld.
inline std::vector<float> dense(const std::vector<float>& out, int64_t rows, int64_t out_ld, int64_t hidden) {
  std::vector<float> v;
  for (int64_t r = 0; r < rows; ++r) v.insert(v.end(), out.begin() + r * out_ld, out.begin() + r * out_ld + hidden);
  return v;
}

}  // namespace mmserve::kernels::paged_test
