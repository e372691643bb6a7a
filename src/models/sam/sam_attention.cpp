// SAM's ViT attention (HF's SamVisionAttention) with the decomposed relative position bias of MViTv2, as a plain
// CPU function over the kernels' GEMM and softmax (the attention kernel has no bias input).
//
// For one sequence (a window, or the whole grid in a global layer) of H x W tokens and one head, HF computes
//   attn[i, j] = (scale * q_i) . k_j + rel_h[i, ky(j)] + rel_w[i, kx(j)],   i, j in [0, H*W)
//   rel_h[i, ky] = q_i . rel_pos_h[qy(i) - ky + H - 1]     (get_rel_pos with q_size == k_size: no resampling)
//   rel_w[i, kx] = q_i . rel_pos_w[qx(i) - kx + W - 1]
//   out_i = softmax_j(attn[i, :]) v
// with the unscaled q in the bias terms. Here rel_h and rel_w come from two small GEMMs against the whole tables,
// P_h = Q rel_pos_h^T [rows, 2H - 1] and P_w likewise, and rel_h[i, ky] = P_h[i, qy(i) - ky + H - 1] is then a
// lookup (twice the multiply-adds of the exact terms, but two GEMM calls instead of H + W dot products per
// query). Work is split into tasks of (sequence, head, block of query rows): one parallel loop over every
// window of every image at once, each task running single-threaded sgemms on its own scratch, so the windows are
// batched the way torch's bmm batches them. Query blocks keep a task's score rows near 1 MB (64 rows of a
// 4096-token global layer at 1024 px, a whole 196-token window), so global layers never hold the full
// [tokens, tokens] matrix that HF's eager path materialises. The scratch is the caller's (an arena), one slice
// per thread.
// Tests: through tests/conformance/sam_model_test.cpp (windowed layers with padded windows and global layers).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/gemm/gemm.h"
#include "kernels/softmax/softmax.h"
#include "models/sam/sam_internal.h"

namespace mmserve::models {
namespace {

constexpr int64_t kScoreFloatsPerTask = 1 << 18;  // 1 MB of scores per task: stays in a core's L2

int64_t round_up_16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// Query rows per task: as many as keep the scores near kScoreFloatsPerTask, at least 16 (so the sgemms stay
// efficient), at most the whole sequence.
int64_t block_rows(int64_t tokens) {
  return std::min(tokens, std::max<int64_t>(16, kScoreFloatsPerTask / tokens));
}

int64_t floats_per_thread(int64_t height, int64_t width) {
  const int64_t tokens = height * width, rows = block_rows(tokens);
  return round_up_16(rows * tokens) + round_up_16(rows * (2 * height - 1)) + round_up_16(rows * (2 * width - 1));
}

// Adds the decomposed relative position bias to `rows` score rows starting at query row0 of the sequence.
// q rows are qkv_ld apart; ph, pw are scratch for the two projections.
void add_rel_pos_bias(const SamAttentionArgs& a, const float* q, int64_t row0, int64_t rows, float* scores, float* ph,
                      float* pw) {
  const int64_t height = a.height, width = a.width, tokens = height * width;
  const int64_t lh = 2 * height - 1, lw = 2 * width - 1;
  kernels::gemm(false, true, rows, lh, a.head_dim, 1.0f, q, a.qkv_ld, a.rel_pos_h, a.head_dim, 0.0f, ph, lh);
  kernels::gemm(false, true, rows, lw, a.head_dim, 1.0f, q, a.qkv_ld, a.rel_pos_w, a.head_dim, 0.0f, pw, lw);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t query = row0 + r, qy = query / width, qx = query % width;
    // rel_h[ky] = ph_row[qy - ky + height - 1]: pointers at ky = 0, read backwards.
    const float* ph_row = ph + r * lh + qy + height - 1;
    const float* pw_row = pw + r * lw + qx + width - 1;
    float* s = scores + r * tokens;
    for (int64_t ky = 0; ky < height; ++ky) {
      const float rel_h = ph_row[-ky];
      float* s_ky = s + ky * width;
      for (int64_t kx = 0; kx < width; ++kx) s_ky[kx] = s_ky[kx] + rel_h + pw_row[-kx];  // HF: (attn + rel_h) + rel_w
    }
  }
}

}  // namespace

int64_t sam_attention_scratch_floats(int64_t height, int64_t width, int threads) {
  return std::max(threads, 1) * floats_per_thread(height, width);
}

void sam_attention(const SamAttentionArgs& a, float* scratch) {
  const int64_t tokens = a.height * a.width, hidden = a.heads * a.head_dim;
  MMSERVE_CHECK(tokens > 0 && a.heads > 0 && a.head_dim > 0, "sam_attention: empty shape");
  MMSERVE_CHECK(a.qkv_ld >= 3 * hidden && a.out_ld >= hidden, "sam_attention: row strides too small");
  MMSERVE_CHECK((a.rel_pos_h == nullptr) == (a.rel_pos_w == nullptr), "sam_attention: one rel_pos table only");
  const int64_t rows_max = block_rows(tokens), blocks = (tokens + rows_max - 1) / rows_max;
  const int64_t per_thread = floats_per_thread(a.height, a.width);
  const int64_t tasks = a.sequences * a.heads * blocks;
  // HF: query * head_dim**-0.5 (a Python float, applied in f32).
  const float scale = static_cast<float>(std::pow(static_cast<double>(a.head_dim), -0.5));
  const int threads = kernels::cpu_threads();

  // Nested inside this region, kernels::gemm's own parallel region runs on one thread (OpenMP's default of one
  // active level), which is what we want: the tasks are the parallelism.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t seq = task / (a.heads * blocks), head = task / blocks % a.heads, block = task % blocks;
    const int64_t row0 = block * rows_max, rows = std::min(rows_max, tokens - row0);
    float* scores = scratch + omp_get_thread_num() * per_thread;  // [rows, tokens]
    float* ph = scores + round_up_16(rows_max * tokens);
    float* pw = ph + round_up_16(rows_max * (2 * a.height - 1));
    const float* seq_rows = a.qkv + seq * tokens * a.qkv_ld;
    const float* q = seq_rows + row0 * a.qkv_ld + head * a.head_dim;
    const float* k = seq_rows + hidden + head * a.head_dim;
    const float* v = seq_rows + 2 * hidden + head * a.head_dim;

    kernels::gemm(false, true, rows, tokens, a.head_dim, scale, q, a.qkv_ld, k, a.qkv_ld, 0.0f, scores, tokens);
    if (a.rel_pos_h != nullptr) add_rel_pos_bias(a, q, row0, rows, scores, ph, pw);
    for (int64_t r = 0; r < rows; ++r) kernels::softmax_row(scores + r * tokens, tokens);
    float* out = a.out + (seq * tokens + row0) * a.out_ld + head * a.head_dim;
    kernels::gemm(false, false, rows, a.head_dim, tokens, 1.0f, scores, tokens, v, a.qkv_ld, 0.0f, out, a.out_ld);
  }
}

}  // namespace mmserve::models
