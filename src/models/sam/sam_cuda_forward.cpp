// SAM on an NVIDIA GPU (see sam_cuda.h): the forwards, step for step those of sam_vision.cpp (the image encoder,
// batched: the windows of every image are one list of sequences), sam_prompt.cpp's dense path and
// sam_mask_decoder.cpp; each step is one kernel or one cuBLASLt GEMM. Loading, graphs and the entry points are
// sam_cuda.cpp.
#include <cmath>

#include "core/cuda/cuda_status.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/attention/attention_kv_cuda.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "kernels/patch_embed/patch_embed_cuda.h"
#include "kernels/rel_pos_attention/rel_pos_attention_cuda.h"
#include "models/sam/sam_cuda_internal.h"
#include "models/sam/sam_cuda_kernels.h"

namespace mmserve::models {
namespace {

using kernels::GemmCudaArgs;

constexpr float kSamLayerNormEps = 1e-6f;  // SamLayerNorm's default (the neck, the upscaling norm)
constexpr float kFinalNormEps = 1e-5f;     // nn.LayerNorm's default (layer_norm_final_attn)

Status layer_norm(const float* x, int64_t rows, int64_t cols, const float* w, const float* b, float eps, void* y,
                  DType y_dtype, cudaStream_t s) {
  kernels::LayerNormCudaArgs ln;
  ln.x = x, ln.x_ld = cols, ln.weight = w, ln.bias = b, ln.eps = eps, ln.rows = rows, ln.cols = cols;
  ln.y = y, ln.y_dtype = y_dtype, ln.y_ld = cols;
  return kernels::layer_norm_cuda(ln, s);
}

}  // namespace

Status SamCudaModel::vision_forward(int64_t batch) {
  const SamVisionConfig& v = config_.vision;
  const DType dt = options_.dtype;
  const int eb = static_cast<int>(dtype_size(dt));
  Device& d = *dev_;
  const Activations& a = d.a;
  const Weights& w = d.w;
  cudaStream_t s = d.stream.get();
  kernels::CublasLtGemm& gemm = *d.gemm;
  const int64_t g = v.grid(), t = g * g, c = v.hidden_size, rows = batch * t, out = v.output_channels;
  const int64_t patch_cols = v.num_channels * v.patch_size * v.patch_size;

  // Patch embedding + absolute positions: x = pos_embed (per image), then x += patches @ W^T + b.
  RETURN_IF_ERROR(
      kernels::im2col_patches_cuda(a.pixels, batch, v.num_channels, v.image_size, v.patch_size, a.patches, dt, s));
  if (w.pos_embed != nullptr) {
    for (int64_t b = 0; b < batch; ++b) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(a.x + b * t * c, w.pos_embed, sizeof(float) * t * c, cudaMemcpyDeviceToDevice, s));
    }
  }
  GemmCudaArgs g0;
  g0.m = rows, g0.n = c, g0.k = patch_cols, g0.a = a.patches, g0.lda = patch_cols, g0.w = w.patch_w;
  g0.ldw = patch_cols, g0.in_dtype = dt, g0.d = a.x, g0.ldd = c, g0.out_dtype = DType::kF32, g0.bias = w.patch_b;
  g0.beta = w.pos_embed != nullptr ? 1.0f : 0.0f;
  RETURN_IF_ERROR(gemm.run(g0, s));

  const int64_t heads = v.num_attention_heads, hd = v.head_dim();
  for (const Weights::VisionLayer& l : w.vision) {
    // Attention half: layer_norm1 -> qkv -> (window partition) -> attention -> (unpartition) -> proj, residual.
    RETURN_IF_ERROR(layer_norm(a.x, rows, c, l.ln1_w, l.ln1_b, v.layer_norm_eps, a.normed, dt, s));
    GemmCudaArgs gq;
    gq.m = rows, gq.n = 3 * c, gq.k = c, gq.a = a.normed, gq.lda = c, gq.w = l.qkv_w, gq.ldw = c, gq.in_dtype = dt;
    gq.d = a.qkv, gq.ldd = 3 * c, gq.out_dtype = dt, gq.bias = l.qkv_b;
    RETURN_IF_ERROR(gemm.run(gq, s));
    kernels::RelPosAttentionArgs at;
    at.qkv_ld = 3 * c, at.out = a.context, at.out_ld = c, at.dtype = dt, at.heads = heads, at.head_dim = hd;
    at.scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));  // HF: head_dim**-0.5
    at.rel_pos_h = l.rel_h, at.rel_pos_w = l.rel_w, at.bias = a.bias;
    const void* attention_out = a.context;
    if (l.window > 0) {
      const int64_t side = (g + l.window - 1) / l.window;
      // Padding rows get qkv(0) = the qkv bias, what HF's zero-padded windows give (see sam_vision.cpp).
      RETURN_IF_ERROR(sam_window_partition_cuda(a.qkv, batch, g, l.window, 3 * c, l.qkv_b, a.window_qkv, eb, s));
      at.qkv = a.window_qkv, at.sequences = batch * side * side, at.height = at.width = l.window;
      RETURN_IF_ERROR(kernels::rel_pos_attention_cuda(at, s));
      RETURN_IF_ERROR(sam_window_unpartition_cuda(a.context, batch, g, l.window, c, a.normed, eb, s));
      attention_out = a.normed;
    } else {
      at.qkv = a.qkv, at.sequences = batch, at.height = at.width = g;
      RETURN_IF_ERROR(kernels::rel_pos_attention_cuda(at, s));
    }
    GemmCudaArgs gp;
    gp.m = rows, gp.n = c, gp.k = c, gp.a = attention_out, gp.lda = c, gp.w = l.proj_w, gp.ldw = c, gp.in_dtype = dt;
    gp.d = a.x, gp.ldd = c, gp.out_dtype = DType::kF32, gp.bias = l.proj_b, gp.beta = 1.0f;
    RETURN_IF_ERROR(gemm.run(gp, s));
    // MLP half.
    RETURN_IF_ERROR(layer_norm(a.x, rows, c, l.ln2_w, l.ln2_b, v.layer_norm_eps, a.normed, dt, s));
    GemmCudaArgs g1;
    g1.m = rows, g1.n = v.mlp_dim, g1.k = c, g1.a = a.normed, g1.lda = c, g1.w = l.fc1_w, g1.ldw = c;
    g1.in_dtype = dt, g1.d = a.mlp, g1.ldd = v.mlp_dim, g1.out_dtype = dt, g1.bias = l.fc1_b;
    RETURN_IF_ERROR(gemm.run(g1, s));
    RETURN_IF_ERROR(kernels::activation_cuda(v.hidden_act, a.mlp, dt, rows * v.mlp_dim, s));
    GemmCudaArgs g2;
    g2.m = rows, g2.n = c, g2.k = v.mlp_dim, g2.a = a.mlp, g2.lda = v.mlp_dim, g2.w = l.fc2_w, g2.ldw = v.mlp_dim;
    g2.in_dtype = dt, g2.d = a.x, g2.ldd = c, g2.out_dtype = DType::kF32, g2.bias = l.fc2_b, g2.beta = 1.0f;
    RETURN_IF_ERROR(gemm.run(g2, s));
  }

  // Neck: 1x1 conv, LN, 3x3 conv (im2col + GEMM), LN -> neck2, the channels-last embedding rows.
  RETURN_IF_ERROR(sam_convert_cuda(a.x, rows * c, a.normed, dt, s));
  GemmCudaArgs gn;
  gn.m = rows, gn.n = out, gn.k = c, gn.a = a.normed, gn.lda = c, gn.w = w.neck1_w, gn.ldw = c, gn.in_dtype = dt;
  gn.d = a.neck1, gn.ldd = out, gn.out_dtype = DType::kF32;
  RETURN_IF_ERROR(gemm.run(gn, s));
  RETURN_IF_ERROR(layer_norm(a.neck1, rows, out, w.neck_ln1_w, w.neck_ln1_b, kSamLayerNormEps, a.neck1_h, dt, s));
  RETURN_IF_ERROR(sam_im2col_3x3_cuda(a.neck1_h, batch, g, out, a.columns, eb, s));
  gn = GemmCudaArgs{};
  gn.m = rows, gn.n = out, gn.k = 9 * out, gn.a = a.columns, gn.lda = 9 * out, gn.w = w.neck2_w, gn.ldw = 9 * out;
  gn.in_dtype = dt, gn.d = a.neck2, gn.ldd = out, gn.out_dtype = DType::kF32;
  RETURN_IF_ERROR(gemm.run(gn, s));
  return layer_norm(a.neck2, rows, out, w.neck_ln2_w, w.neck_ln2_b, kSamLayerNormEps, a.neck2, DType::kF32, s);
}

Status SamCudaModel::decoder_forward(int64_t tokens, bool dense_mask) {
  const SamMaskDecoderConfig& dc = config_.decoder;
  const SamPromptEncoderConfig& pc = config_.prompt;
  Device& d = *dev_;
  const Activations& a = d.a;
  const Weights& w = d.w;
  cudaStream_t s = d.stream.get();
  kernels::CublasLtGemm& gemm = *d.gemm;
  const int64_t grid = pc.image_embedding_size(), p = grid * grid, hid = dc.hidden_size;
  const int64_t heads = dc.num_attention_heads, mt = dc.num_mask_tokens();
  const DType f32 = DType::kF32;

  // out[m, l.out] (+)= x[m, l.in] @ W^T + b, f32.
  auto linear = [&](const float* x, int64_t m, const Weights::Linear& l, float* out, bool accumulate) {
    GemmCudaArgs g;
    g.m = m, g.n = l.out, g.k = l.in, g.a = x, g.lda = l.in, g.w = l.w, g.ldw = l.in, g.in_dtype = f32;
    g.d = out, g.ldd = l.out, g.out_dtype = f32, g.bias = l.b, g.beta = accumulate ? 1.0f : 0.0f;
    return gemm.run(g, s);
  };
  // SamAttention: out (+)= out_proj(attention(q_proj(q_in), k_proj(k_in), v_proj(v_in))); keys past *kv_lengths
  // hidden when given (the token bucket's padding). out may alias q_in or v_in (projected before out is written).
  // The tokens' attention to the image (a few queries, 4096 keys) runs each query as a batch row of q_len 1 over
  // shared K/V: the split-KV decode kernel spreads the keys over ~500 CTAs, where one CTA per head (the q_len > 1
  // kernel: 8 CTAs) took 316 us (ncu, H200, 2026-12-02).
  auto attention = [&](const Weights::Attention& l, const float* q_in, int64_t nq, const float* k_in,
                       const float* v_in, int64_t nk, float* out, bool residual,
                       const int32_t* kv_lengths) -> Status {
    const bool rows_as_batch = kv_lengths == nullptr && nk > nq;
    const int64_t internal = l.q.out;
    RETURN_IF_ERROR(linear(q_in, nq, l.q, a.q, false));
    RETURN_IF_ERROR(linear(k_in, nk, l.k, a.k, false));
    RETURN_IF_ERROR(linear(v_in, nk, l.v, a.v, false));
    kernels::AttentionKvArgs at;
    at.q = a.q, at.q_ld = internal, at.k = a.k, at.v = a.v, at.kv_ld = internal, at.kv_batch_stride = nk;
    at.out = a.ctx, at.out_ld = internal, at.dtype = f32, at.batch = 1, at.q_len = nq, at.kv_len = nk;
    if (rows_as_batch) at.batch = nq, at.q_len = 1, at.kv_shared = true;
    at.heads = heads, at.head_dim = internal / heads;
    at.scale = static_cast<float>(std::pow(static_cast<double>(internal / heads), -0.5));  // HF: head_dim**-0.5
    at.kv_lengths = kv_lengths, at.workspace = a.attention_workspace, at.workspace_bytes = a.attention_workspace_bytes;
    RETURN_IF_ERROR(kernels::attention_kv_cuda(at, s));
    return linear(a.ctx, nq, l.o, out, residual);
  };
  auto norm = [&](float* x, int64_t rows, int64_t cols, const float* nw, const float* nb, float eps) {
    return layer_norm(x, rows, cols, nw, nb, eps, x, f32, s);
  };
  // SamFeedForward on one row: ReLU after every layer but the last (no sigmoid in SAM v1).
  auto feed_forward = [&](const std::vector<Weights::Linear>& layers, const float* x, float* out) -> Status {
    const float* in = x;
    for (size_t i = 0; i < layers.size(); ++i) {
      const bool last = i + 1 == layers.size();
      float* y = last ? out : (i % 2 == 0 ? a.ff_a : a.ff_b);
      RETURN_IF_ERROR(linear(in, 1, layers[i], y, false));
      if (!last) RETURN_IF_ERROR(sam_relu_cuda(y, layers[i].out, s));
      in = y;
    }
    return ok_status();
  };

  // Keys: the embedding + the dense prompt (mask_embed(mask), else no_mask_embed at every pixel).
  if (dense_mask) {
    const int64_t mic = pc.mask_input_channels, half = 2 * grid;
    RETURN_IF_ERROR(sam_space_to_depth_cuda(a.mask_in, 2 * half, 2 * half, 1, a.s2d1, s));
    RETURN_IF_ERROR(linear(a.s2d1, half * half, w.mask_conv1, a.conv1, false));
    RETURN_IF_ERROR(norm(a.conv1, half * half, mic / 4, w.mask_ln1_w, w.mask_ln1_b, pc.layer_norm_eps));
    RETURN_IF_ERROR(kernels::activation_cuda(pc.hidden_act, a.conv1, f32, half * half * (mic / 4), s));
    RETURN_IF_ERROR(sam_space_to_depth_cuda(a.conv1, half, half, mic / 4, a.s2d2, s));
    RETURN_IF_ERROR(linear(a.s2d2, p, w.mask_conv2, a.conv2, false));
    RETURN_IF_ERROR(norm(a.conv2, p, mic, w.mask_ln2_w, w.mask_ln2_b, pc.layer_norm_eps));
    RETURN_IF_ERROR(kernels::activation_cuda(pc.hidden_act, a.conv2, f32, p * mic, s));
    RETURN_IF_ERROR(linear(a.conv2, p, w.mask_conv3, a.dense, false));
    RETURN_IF_ERROR(sam_add_cuda(a.image, a.dense, p, p, hid, a.keys, s));
  } else {
    RETURN_IF_ERROR(sam_add_cuda(a.image, w.no_mask, p, 1, hid, a.keys, s));
  }
  // Queries start as the tokens, which are also every layer's query PE.
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(a.queries, a.tokens, sizeof(float) * tokens * hid, cudaMemcpyDeviceToDevice, s));
  const int32_t* real = a.kv_len;
  for (size_t l = 0; l < w.two_way.size(); ++l) {
    const Weights::TwoWayLayer& layer = w.two_way[l];
    if (l == 0) {  // skip_first_layer_pe: no PE, no residual
      RETURN_IF_ERROR(
          attention(layer.self_attn, a.queries, tokens, a.queries, a.queries, tokens, a.queries, false, real));
    } else {
      RETURN_IF_ERROR(sam_add_cuda(a.queries, a.tokens, tokens, tokens, hid, a.query_in, s));
      RETURN_IF_ERROR(
          attention(layer.self_attn, a.query_in, tokens, a.query_in, a.queries, tokens, a.queries, true, real));
    }
    RETURN_IF_ERROR(norm(a.queries, tokens, hid, layer.norm_w[0], layer.norm_b[0], dc.layer_norm_eps));
    // Tokens attend to the image.
    RETURN_IF_ERROR(sam_add_cuda(a.queries, a.tokens, tokens, tokens, hid, a.query_in, s));
    RETURN_IF_ERROR(sam_add_cuda(a.keys, w.image_pe, p, p, hid, a.key_in, s));
    RETURN_IF_ERROR(
        attention(layer.token_to_image, a.query_in, tokens, a.key_in, a.keys, p, a.queries, true, nullptr));
    RETURN_IF_ERROR(norm(a.queries, tokens, hid, layer.norm_w[1], layer.norm_b[1], dc.layer_norm_eps));
    // MLP on the tokens.
    RETURN_IF_ERROR(linear(a.queries, tokens, layer.mlp1, a.mlp_d, false));
    RETURN_IF_ERROR(sam_relu_cuda(a.mlp_d, tokens * layer.mlp1.out, s));
    RETURN_IF_ERROR(linear(a.mlp_d, tokens, layer.mlp2, a.queries, true));
    RETURN_IF_ERROR(norm(a.queries, tokens, hid, layer.norm_w[2], layer.norm_b[2], dc.layer_norm_eps));
    // The image attends to the tokens (the padding tokens hidden).
    RETURN_IF_ERROR(sam_add_cuda(a.queries, a.tokens, tokens, tokens, hid, a.query_in, s));
    RETURN_IF_ERROR(sam_add_cuda(a.keys, w.image_pe, p, p, hid, a.key_in, s));
    RETURN_IF_ERROR(attention(layer.image_to_token, a.key_in, p, a.query_in, a.queries, tokens, a.keys, true, real));
    RETURN_IF_ERROR(norm(a.keys, p, hid, layer.norm_w[3], layer.norm_b[3], dc.layer_norm_eps));
  }
  RETURN_IF_ERROR(sam_add_cuda(a.queries, a.tokens, tokens, tokens, hid, a.query_in, s));
  RETURN_IF_ERROR(sam_add_cuda(a.keys, w.image_pe, p, p, hid, a.key_in, s));
  RETURN_IF_ERROR(attention(w.final_attn, a.query_in, tokens, a.key_in, a.keys, p, a.queries, true, nullptr));
  RETURN_IF_ERROR(norm(a.queries, tokens, hid, w.final_norm_w, w.final_norm_b, kFinalNormEps));

  // Upscale the image embedding 4x: ConvT -> SamLayerNorm -> GELU -> ConvT -> GELU (each ConvT a GEMM + scatter).
  const int64_t c1 = hid / 4, c2 = hid / 8;
  const Weights::Linear up1{w.upscale1.w, nullptr, w.upscale1.out, w.upscale1.in};
  const Weights::Linear up2{w.upscale2.w, nullptr, w.upscale2.out, w.upscale2.in};
  RETURN_IF_ERROR(linear(a.keys, p, up1, a.up1_tmp, false));
  RETURN_IF_ERROR(sam_conv_transpose_scatter_cuda(a.up1_tmp, w.upscale1.b, grid, grid, c1, a.up1, s));
  RETURN_IF_ERROR(norm(a.up1, 4 * p, c1, w.upscale_norm_w, w.upscale_norm_b, kSamLayerNormEps));
  RETURN_IF_ERROR(kernels::activation_cuda(kernels::Activation::kGelu, a.up1, f32, 4 * p * c1, s));
  RETURN_IF_ERROR(linear(a.up1, 4 * p, up2, a.up2_tmp, false));
  RETURN_IF_ERROR(sam_conv_transpose_scatter_cuda(a.up2_tmp, w.upscale2.b, 2 * grid, 2 * grid, c2, a.up2, s));
  RETURN_IF_ERROR(kernels::activation_cuda(kernels::Activation::kGelu, a.up2, f32, 16 * p * c2, s));

  // One hypernetwork per mask token, then masks = hyper_in @ upscaled^T; the IoU head on the IoU token.
  for (int64_t i = 0; i < mt; ++i) {
    RETURN_IF_ERROR(feed_forward(w.hypernetworks[i], a.queries + (1 + i) * hid, a.hyper + i * c2));
  }
  GemmCudaArgs gm;
  gm.m = mt, gm.n = 16 * p, gm.k = c2, gm.a = a.hyper, gm.lda = c2, gm.w = a.up2, gm.ldw = c2, gm.in_dtype = f32;
  gm.d = a.masks, gm.ldd = 16 * p, gm.out_dtype = f32;
  RETURN_IF_ERROR(gemm.run(gm, s));
  return feed_forward(w.iou_head, a.queries, a.iou);
}

}  // namespace mmserve::models
