// SAM's mask decoder (HF's SamMaskDecoder + SamTwoWayTransformer), following modeling_sam.py step by step:
//
//   tokens = [iou_token; mask_tokens; sparse prompts]   (the caller builds them; they are also the query PE)
//   two-way layer l (keys = image embedding + dense prompt, key PE = the image-wide positional embedding):
//     l == 0 (skip_first_layer_pe): queries = self_attn(queries, queries, queries)         -- no residual
//     else:                         queries = queries + self_attn(q = queries + qpe, k = q, v = queries)
//     queries = LN1(queries)
//     queries = LN2(queries + cross_token_to_image(q = queries + qpe, k = keys + kpe, v = keys))
//     queries = LN3(queries + lin2(relu(lin1(queries))))
//     keys    = LN4(keys + cross_image_to_token(q = keys + kpe, k = queries + qpe, v = queries))
//   queries = LN_final(queries + final_attn_token_to_image(q = queries + qpe, k = keys + kpe, v = keys))
//   upscaled = gelu(ConvT2(gelu(SamLayerNorm(ConvT1(keys)))))          (ConvTranspose2d k2 s2, twice: 4x)
//   masks[i] = hypernetwork_i(queries[1 + i]) @ upscaled;  iou = iou_head(queries[0])   (ReLU MLPs)
//
// Attention (SamAttention) projects q, k, v to hidden / downsample_rate (self-attention: hidden), splits heads,
// softmax(q k^T / sqrt(head_dim)) v, out_proj; that is the kernels' attention between four linears. Layer norms
// use the decoder config's eps except layer_norm_final_attn (a bare nn.LayerNorm: 1e-5) and the upscaling
// SamLayerNorm (1e-6). A transposed convolution with kernel == stride == 2 is one GEMM per input pixel row,
// [pixels, c_in] @ W [c_in, (dy, dx, c_out)], whose four c_out blocks are scattered to the output pixels.
// Tests: tests/conformance/sam_model_test.cpp (iou_scores and pred_masks of every prompt case).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/activation/activation.h"
#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/layer_norm/layer_norm.h"
#include "models/sam/sam_internal.h"

namespace mmserve::models {
namespace {

constexpr float kFinalNormEps = 1e-5f;     // nn.LayerNorm(hidden_size): torch's default
constexpr float kSamLayerNormEps = 1e-6f;  // SamLayerNorm's default (upscale_layer_norm)

void relu(Tensor& x) {
  float* p = x.data_as<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

// The decoder's activations. The attention scratch is [rows, hidden]: the self-attention's width (downsample
// rate 1) is the widest.
struct DecoderBuffers {
  Tensor queries, keys, query_in, key_in;  // [tokens, hidden], [pixels, hidden], with the PE added: same shapes
  Tensor q, k, v, context;                 // attention scratch [max(tokens, pixels), hidden]
  Tensor mlp;                              // [tokens, mlp_dim]
  Tensor upscale1_tmp, upscaled1;          // [pixels, 4 * hidden / 4], [4 * pixels, hidden / 4]
  Tensor upscale2_tmp, upscaled2;          // [4 * pixels, 4 * hidden / 8], [16 * pixels, hidden / 8]
  Tensor feed_forward_a, feed_forward_b;   // [1, max(hidden, iou_head_hidden_dim)]
};

// Calls f(tensor, rows, cols) for every buffer: the one list that sizes the workspace and carves it.
template <typename F>
void for_each_buffer(const SamConfig& c, int64_t tokens, DecoderBuffers& b, F&& f) {
  const int64_t grid = c.prompt.image_embedding_size(), pixels = grid * grid, hidden = c.decoder.hidden_size;
  const int64_t rows = std::max(tokens, pixels), widest = std::max(hidden, c.decoder.iou_head_hidden_dim);
  f(b.queries, tokens, hidden);
  f(b.keys, pixels, hidden);
  f(b.query_in, tokens, hidden);
  f(b.key_in, pixels, hidden);
  for (Tensor* t : {&b.q, &b.k, &b.v, &b.context}) f(*t, rows, hidden);
  f(b.mlp, tokens, c.decoder.mlp_dim);
  f(b.upscale1_tmp, pixels, hidden);
  f(b.upscaled1, 4 * pixels, hidden / 4);
  f(b.upscale2_tmp, 4 * pixels, hidden / 2);
  f(b.upscaled2, 16 * pixels, hidden / 8);
  f(b.feed_forward_a, 1, widest);
  f(b.feed_forward_b, 1, widest);
}

struct AttentionScratch {
  Tensor q, k, v, context;  // [rows, >= internal]
};

// out (+)= out_proj(attention(q_proj(q_in), k_proj(k_in), v_proj(v_in))): SamAttention. out may alias q_in or
// v_in (their projections are done before out is written).
void sam_attention_block(const SamAttentionWeights& w, int64_t heads, const Tensor& q_in, const Tensor& k_in,
                         const Tensor& v_in, Tensor& out, bool residual, AttentionScratch& s) {
  const int64_t nq = q_in.size(0), nk = k_in.size(0), internal = w.q.weight.size(0);
  // Contiguous [1, n, internal] views into the scratch, as attention() takes them.
  Tensor q(s.q.data(), DType::kF32, {1, nq, internal}), k(s.k.data(), DType::kF32, {1, nk, internal});
  Tensor v(s.v.data(), DType::kF32, {1, nk, internal}), context(s.context.data(), DType::kF32, {1, nq, internal});
  Tensor q_rows = q.reshape({nq, internal}), k_rows = k.reshape({nk, internal}), v_rows = v.reshape({nk, internal});
  Tensor context_rows = context.reshape({nq, internal});
  kernels::linear(q_in, w.q.weight, &w.q.bias, q_rows);
  kernels::linear(k_in, w.k.weight, &w.k.bias, k_rows);
  kernels::linear(v_in, w.v.weight, &w.v.bias, v_rows);
  const int64_t head_dim = internal / heads;
  const float scale = static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5));  // HF: head_dim**-0.5
  kernels::attention(q, k, v, context, heads, scale, kernels::AttentionMask{});
  kernels::linear(context_rows, w.out.weight, &w.out.bias, out, kernels::Activation::kNone, residual);
}

// SamFeedForward: ReLU after every layer but the last (no sigmoid in SAM v1). x [1, in] -> out [1, out];
// a and b are [1, >= every hidden width] scratch.
void feed_forward(const std::vector<SamLinear>& layers, const Tensor& x, Tensor& out, Tensor& a, Tensor& b) {
  Tensor in = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    const SamLinear& l = layers[i];
    const bool last = i + 1 == layers.size();
    Tensor y = last ? out : (i % 2 == 0 ? a : b).slice_cols(0, l.weight.size(0));
    kernels::linear(in, l.weight, &l.bias, y);
    if (!last) relu(y);
    in = y;
  }
}

// ConvTranspose2d(kernel 2, stride 2) over channels-last rows [h * w, c_in] -> [(2h) * (2w), c_out]; `weight` is
// [c_in, 4 * c_out] with (dy, dx, c_out) columns (permuted at load), `tmp` [h * w, 4 * c_out].
void conv_transpose_2x2(const Tensor& x, int64_t height, int64_t width, const Tensor& weight, const Tensor& bias,
                        Tensor& tmp, Tensor& out) {
  const int64_t c_in = x.size(1), c_out = bias.numel();
  kernels::gemm(false, false, height * width, 4 * c_out, c_in, 1.0f, x.data_as<float>(), c_in, weight.data_as<float>(),
                4 * c_out, 0.0f, tmp.data_as<float>(), 4 * c_out);
  const float* b = bias.data_as<float>();
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x0 = 0; x0 < width; ++x0) {
      const float* src = tmp.data_as<float>() + (y * width + x0) * 4 * c_out;
      for (int64_t dy = 0; dy < 2; ++dy) {
        for (int64_t dx = 0; dx < 2; ++dx) {
          float* dst = out.data_as<float>() + ((2 * y + dy) * 2 * width + 2 * x0 + dx) * c_out;
          const float* block = src + (dy * 2 + dx) * c_out;
          for (int64_t o = 0; o < c_out; ++o) dst[o] = block[o] + b[o];
        }
      }
    }
  }
}

}  // namespace

size_t sam_decoder_workspace_bytes(const SamConfig& config, int64_t tokens) {
  DecoderBuffers unused;
  return sam_buffer_bytes([&](auto&& f) { for_each_buffer(config, tokens, unused, f); });
}

Status sam_mask_decoder_forward(const SamConfig& config, const SamWeights& weights, const Tensor& image,
                                const Tensor& tokens, float* masks, float* iou, Arena& arena, const TraceFn& trace) {
  const SamMaskDecoderConfig& c = config.decoder;
  const SamDecoderWeights& w = weights.decoder;
  DecoderBuffers b;
  RETURN_IF_ERROR(sam_take_buffers(arena, [&](auto&& f) { for_each_buffer(config, tokens.size(0), b, f); }));
  Tensor &queries = b.queries, &keys = b.keys, &query_in = b.query_in, &key_in = b.key_in;
  AttentionScratch scratch{b.q, b.k, b.v, b.context};
  const Tensor& query_pe = tokens;  // HF passes point_embeddings as every layer's query_point_embedding
  const Tensor& key_pe = weights.prompt.image_pe;
  const int64_t heads = c.num_attention_heads, grid = config.prompt.image_embedding_size();
  auto dump = [&trace](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };
  std::memcpy(queries.data(), tokens.data(), tokens.nbytes());
  std::memcpy(keys.data(), image.data(), image.nbytes());

  for (size_t l = 0; l < w.layers.size(); ++l) {
    const SamTwoWayLayerWeights& layer = w.layers[l];
    const std::string prefix = "decoder.layers." + std::to_string(l) + ".";
    // Self-attention of the tokens.
    if (l == 0) {
      sam_attention_block(layer.self_attn, heads, queries, queries, queries, queries, /*residual=*/false, scratch);
    } else {
      kernels::add(queries, query_pe, query_in);
      sam_attention_block(layer.self_attn, heads, query_in, query_in, queries, queries, /*residual=*/true, scratch);
    }
    kernels::layer_norm(queries, layer.norm1.weight, layer.norm1.bias, c.layer_norm_eps, queries);
    // Tokens attend to the image.
    kernels::add(queries, query_pe, query_in);
    kernels::add(keys, key_pe, key_in);
    sam_attention_block(layer.cross_token_to_image, heads, query_in, key_in, keys, queries, true, scratch);
    kernels::layer_norm(queries, layer.norm2.weight, layer.norm2.bias, c.layer_norm_eps, queries);
    // MLP on the tokens.
    kernels::linear(queries, layer.mlp1.weight, &layer.mlp1.bias, b.mlp);
    relu(b.mlp);
    kernels::linear(b.mlp, layer.mlp2.weight, &layer.mlp2.bias, queries, kernels::Activation::kNone, true);
    kernels::layer_norm(queries, layer.norm3.weight, layer.norm3.bias, c.layer_norm_eps, queries);
    // The image attends to the tokens.
    kernels::add(queries, query_pe, query_in);
    kernels::add(keys, key_pe, key_in);
    sam_attention_block(layer.cross_image_to_token, heads, key_in, query_in, queries, keys, true, scratch);
    kernels::layer_norm(keys, layer.norm4.weight, layer.norm4.bias, c.layer_norm_eps, keys);
    dump(prefix + "queries", queries);
    dump(prefix + "keys", keys);
  }
  kernels::add(queries, query_pe, query_in);
  kernels::add(keys, key_pe, key_in);
  sam_attention_block(w.final_attn, heads, query_in, key_in, keys, queries, true, scratch);
  kernels::layer_norm(queries, w.final_norm.weight, w.final_norm.bias, kFinalNormEps, queries);
  dump("decoder.queries", queries);

  // Upscale the image embedding 4x.
  Tensor &up1 = b.upscaled1, &up2 = b.upscaled2;
  conv_transpose_2x2(keys, grid, grid, w.upscale1_weight, w.upscale1_bias, b.upscale1_tmp, up1);
  kernels::layer_norm(up1, w.upscale_norm.weight, w.upscale_norm.bias, kSamLayerNormEps, up1);
  kernels::activation(up1, up1, kernels::Activation::kGelu);
  conv_transpose_2x2(up1, 2 * grid, 2 * grid, w.upscale2_weight, w.upscale2_bias, b.upscale2_tmp, up2);
  kernels::activation(up2, up2, kernels::Activation::kGelu);
  dump("decoder.upscaled", up2);

  // One hypernetwork per mask token, then masks = hyper_in @ upscaled (up2 is [pixels, c] = the "weight" layout).
  const int64_t mask_tokens = c.num_mask_tokens(), channels = c.hidden_size / 8;
  std::vector<float> hyper_in(mask_tokens * channels);
  for (int64_t i = 0; i < mask_tokens; ++i) {
    Tensor token = queries.slice_rows(1 + i, 2 + i);
    Tensor out(hyper_in.data() + i * channels, DType::kF32, {1, channels});
    feed_forward(w.hypernetworks[i], token, out, b.feed_forward_a, b.feed_forward_b);
  }
  const Tensor hyper(hyper_in.data(), DType::kF32, {mask_tokens, channels});
  Tensor mask_rows(masks, DType::kF32, {mask_tokens, up2.size(0)});
  kernels::linear(hyper, up2, nullptr, mask_rows);

  // Mask quality from the IoU token.
  Tensor iou_token = queries.slice_rows(0, 1);
  Tensor iou_out(iou, DType::kF32, {1, mask_tokens});
  feed_forward(w.iou_head, iou_token, iou_out, b.feed_forward_a, b.feed_forward_b);
  return ok_status();
}

}  // namespace mmserve::models
