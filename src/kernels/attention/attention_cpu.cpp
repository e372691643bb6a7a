// Multi-head attention on CPU: one task per (batch, head), four query rows at a time.
//
// Per head, K is transposed and V copied into small zero-padded panels; then per block of four query
// rows: scores = scale * Q K^T against the keys the block can see, a softmax per row over that row's own
// visible prefix, and out = P V. Both products go through one register-blocked micro-kernel (4 rows x 16
// columns of accumulators, GCC vector extensions so each ISA clone gets full-width registers). The causal
// mask and kv_lengths both leave each query row a prefix [0, n) of visible keys, so masking is just a
// per-row length: keys past kv_lengths are never read (padding may hold anything, even NaN), and a row
// with n == 0 is written as zeros. Buffers are thread-local and only grow: no allocation in steady state.
// At CLIP's sizes everything fits in L1/L2, and OpenBLAS is not called here (its threads must stay out
// of an OpenMP region; see common/parallel.cpp).
// Tests: attention_test.cpp (heads {1,3,12} x head_dim {1,8,64}, seq_q != seq_kv, causal with offset,
// kv_lengths with 0, fused QKV column slices, vs a double reference under the 2x-naive-f32 error rule);
// bench: attention_bench.cpp (CLIP vision and causal text, batch 1 and 16).
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"
#include "kernels/softmax/softmax.h"

namespace mmserve::kernels {
namespace {

// 16 floats: one AVX-512 register, two AVX2 or four SSE registers (GCC lowers the type per clone). Loads
// through it may be unaligned and may alias float.
typedef float Vec16 __attribute__((vector_size(64), aligned(4), may_alias));
constexpr int64_t kVec = 16;
constexpr int kRowBlock = 4;  // query rows per micro-kernel call

int64_t round_up_vec(int64_t n) {
  return (n + kVec - 1) / kVec * kVec;
}

// c[r][j] = alpha * sum_t a[r][t] * b[t][j] for r < rows (<= kRowBlock) and j < cols (a multiple of 16;
// b is padded to it). a rows are lda apart, b rows ldb apart, c rows ldc apart. Four rows x 16 columns of
// accumulators stay in registers through the whole t loop; rows past `rows` recompute row 0 and are
// dropped, which keeps the loop free of branches.
inline void small_gemm(const float* a, int64_t lda, int rows, const float* b, int64_t ldb, int64_t depth, int64_t cols,
                       float alpha, float* c, int64_t ldc) {
  const float* a_rows[kRowBlock];
  for (int r = 0; r < kRowBlock; ++r) a_rows[r] = a + std::min(r, rows - 1) * lda;
  for (int64_t j = 0; j < cols; j += kVec) {
    Vec16 acc[kRowBlock] = {};
    const float* b_col = b + j;
    for (int64_t t = 0; t < depth; ++t) {
      const Vec16 bv = *reinterpret_cast<const Vec16*>(b_col + t * ldb);
      for (int r = 0; r < kRowBlock; ++r) acc[r] += a_rows[r][t] * bv;
    }
    for (int r = 0; r < rows; ++r) *reinterpret_cast<Vec16*>(c + r * ldc + j) = acc[r] * alpha;
  }
}

struct HeadArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t ldq, ldk, ldv, ldo;
  int64_t seq_q, seq_kv, head_dim;
  int64_t kv_len;  // keys past this are padding
  bool causal;
  float scale;
};

// One (batch, head). K is transposed and V copied into padded thread-local panels (a few KB, ~5% of the
// head's flops) so that both products run through small_gemm with whole 16-wide vectors: scores =
// Q K^T over the visible keys, softmax per row over its own prefix (masked entries set to 0), out = P V.
MMSERVE_CPU_CLONES
void attend_one_head(const HeadArgs& a) {
  const int64_t kv_len = a.kv_len;
  const int64_t keys_padded = round_up_vec(std::max<int64_t>(kv_len, 1));
  const int64_t dim_padded = round_up_vec(a.head_dim);
  thread_local std::vector<float> buffer;
  const size_t needed = static_cast<size_t>(a.head_dim * keys_padded + kv_len * dim_padded + kRowBlock * keys_padded +
                                            kRowBlock * dim_padded);
  if (buffer.size() < needed) buffer.resize(needed);
  float* k_t = buffer.data();                   // [head_dim, keys_padded]
  float* v_p = k_t + a.head_dim * keys_padded;  // [kv_len, dim_padded]
  float* s = v_p + kv_len * dim_padded;         // [kRowBlock, keys_padded]
  float* o = s + kRowBlock * keys_padded;       // [kRowBlock, dim_padded]

  for (int64_t t = 0; t < a.head_dim; ++t) {
    float* row = k_t + t * keys_padded;
    for (int64_t j = 0; j < kv_len; ++j) row[j] = a.k[j * a.ldk + t];
    std::fill(row + kv_len, row + keys_padded, 0.0f);
  }
  for (int64_t j = 0; j < kv_len; ++j) {
    std::copy(a.v + j * a.ldv, a.v + j * a.ldv + a.head_dim, v_p + j * dim_padded);
    std::fill(v_p + j * dim_padded + a.head_dim, v_p + (j + 1) * dim_padded, 0.0f);
  }

  const int64_t causal_offset = a.seq_kv - a.seq_q;
  for (int64_t i0 = 0; i0 < a.seq_q; i0 += kRowBlock) {
    const int rows = static_cast<int>(std::min<int64_t>(kRowBlock, a.seq_q - i0));
    int64_t n_keys[kRowBlock] = {0, 0, 0, 0};
    int64_t n_max = 0;
    for (int r = 0; r < rows; ++r) {
      n_keys[r] = a.causal ? std::clamp<int64_t>(i0 + r + causal_offset + 1, 0, kv_len) : kv_len;
      n_max = std::max(n_max, n_keys[r]);
    }
    float* out_rows = a.out + i0 * a.ldo;
    if (n_max == 0) {
      for (int r = 0; r < rows; ++r) std::fill(out_rows + r * a.ldo, out_rows + r * a.ldo + a.head_dim, 0.0f);
      continue;
    }
    small_gemm(a.q + i0 * a.ldq, a.ldq, rows, k_t, keys_padded, a.head_dim, round_up_vec(n_max), a.scale, s,
               keys_padded);
    for (int r = 0; r < rows; ++r) {
      float* p = s + r * keys_padded;
      softmax_row(p, n_keys[r]);  // a row with n_keys == 0 is left alone and zeroed next
      std::fill(p + n_keys[r], p + n_max, 0.0f);
    }
    small_gemm(s, keys_padded, rows, v_p, dim_padded, n_max, dim_padded, 1.0f, o, dim_padded);
    for (int r = 0; r < rows; ++r) std::copy(o + r * dim_padded, o + r * dim_padded + a.head_dim, out_rows + r * a.ldo);
  }
}

void check_operand(const Tensor& t, const char* name, int64_t batch, int64_t hidden) {
  MMSERVE_CHECK(t.dtype() == DType::kF32, std::string("attention: ") + name + " must be f32");
  MMSERVE_CHECK(t.dims() == 3 && t.size(0) == batch && t.size(2) == hidden,
                std::string("attention: ") + name + " is " + t.shape_string());
  MMSERVE_CHECK(t.stride(2) == 1, std::string("attention: ") + name + " needs a contiguous last dimension");
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, int64_t heads, float scale,
               const AttentionMask& mask) {
  MMSERVE_CHECK(q.dims() == 3, "attention: q must be [batch, seq, hidden]");
  const int64_t batch = q.size(0), seq_q = q.size(1), hidden = q.size(2);
  MMSERVE_CHECK(heads > 0 && hidden % heads == 0, "attention: hidden not divisible by heads");
  check_operand(q, "q", batch, hidden);
  check_operand(k, "k", batch, hidden);
  check_operand(v, "v", batch, hidden);
  check_operand(out, "out", batch, hidden);
  const int64_t seq_kv = k.size(1);
  MMSERVE_CHECK(v.size(1) == seq_kv && out.size(1) == seq_q, "attention: sequence lengths disagree");
  if (mask.kv_lengths != nullptr) {
    for (int64_t b = 0; b < batch; ++b) {
      MMSERVE_CHECK(mask.kv_lengths[b] >= 0 && mask.kv_lengths[b] <= seq_kv,
                    "attention: kv_lengths[" + std::to_string(b) + "] = " + std::to_string(mask.kv_lengths[b]));
    }
  }
  const int64_t head_dim = hidden / heads;
  const int64_t work = batch * hidden * seq_q * std::max<int64_t>(seq_kv, 1);
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(parallel_threads(work))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      HeadArgs a{};
      a.q = q.data_as<float>() + b * q.stride(0) + h * head_dim;
      a.k = k.data_as<float>() + b * k.stride(0) + h * head_dim;
      a.v = v.data_as<float>() + b * v.stride(0) + h * head_dim;
      a.out = out.data_as<float>() + b * out.stride(0) + h * head_dim;
      a.ldq = q.stride(1);
      a.ldk = k.stride(1);
      a.ldv = v.stride(1);
      a.ldo = out.stride(1);
      a.seq_q = seq_q;
      a.seq_kv = seq_kv;
      a.head_dim = head_dim;
      a.kv_len = mask.kv_lengths != nullptr ? mask.kv_lengths[b] : seq_kv;
      a.causal = mask.causal;
      a.scale = scale;
      attend_one_head(a);
    }
  }
}

}  // namespace mmserve::kernels
