// SAM's image encoder (HF's SamVisionEncoder) for one image, following modeling_sam.py step by step:
//
//   patch_embed (Conv2d kernel = stride = patch) -> + pos_embed
//   N x SamVisionLayer:  x = x + proj(unpartition(attention(partition(layer_norm1(x)))))   (windowed layers;
//                            global layers: no partition, the whole grid is one sequence)
//                        x = x + lin2(gelu(lin1(layer_norm2(x))))
//   neck: conv1 1x1 -> SamLayerNorm -> conv2 3x3 (padding 1) -> SamLayerNorm   (channels_first, eps 1e-6)
//
// Tokens are channels-last rows [grid * grid, C] in (y, x) order, HF's [1, grid, grid, C]. Two equivalences keep
// the GEMMs on real tokens only: qkv is a per-token linear, so it is computed before the window partition and
// the partition copies qkv rows, the padding rows getting qkv(0) = the qkv bias, exactly what HF's zero-padded
// windows produce (padded tokens are keys and values in the border windows, unmasked, as in HF and the original
// SAM); and proj is applied after the unpartition, to the real tokens only. The neck's 3x3 convolution is im2col
// (columns in (ky, kx, channel) order, the weight permuted to match at load) and one GEMM.
// Tests: tests/conformance/sam_model_test.cpp (image_embeddings of both fixtures, windowed and global layers).
#include <algorithm>
#include <cstring>

#include "kernels/activation/activation.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/patch_embed/patch_embed.h"
#include "models/sam/sam_internal.h"

namespace mmserve::models {
namespace {

constexpr float kSamLayerNormEps = 1e-6f;  // SamLayerNorm's default: the neck does not pass the config's eps

int64_t windows_per_side(int64_t grid, int64_t window) {
  return (grid + window - 1) / window;
}

// The activations of one image.
struct VisionBuffers {
  Tensor x, normed;     // [tokens, C]: the residual stream, and layer norm outputs (also the unpartitioned context)
  Tensor qkv;           // [tokens, 3C]
  Tensor window_qkv;    // [window rows, 3C]: qkv partitioned into padded windows (0 rows when all layers are global)
  Tensor context;       // [max(tokens, window rows), C]
  Tensor mlp;           // [tokens, mlp_dim]
  Tensor attention;     // sam_attention's scratch for the largest kind of layer
  Tensor columns;       // im2col of the patch embedding, then of the neck's 3x3 convolution
  Tensor neck1, neck2;  // [tokens, output_channels]
};

// Calls f(tensor, rows, cols) for every buffer: the one list that sizes the workspace and carves it.
template <typename F>
void for_each_buffer(const SamVisionConfig& c, VisionBuffers& b, F&& f) {
  const int64_t grid = c.grid(), tokens = grid * grid, hidden = c.hidden_size;
  int64_t window_rows = 0, attention = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const int64_t window = c.layer_window(i), span = window > 0 ? window : grid;
    const int64_t side = window > 0 ? windows_per_side(grid, window) : 0;
    window_rows = std::max(window_rows, side * side * window * window);
    attention = std::max(attention, sam_attention_scratch_floats(span, span, kernels::cpu_threads()));
  }
  const int64_t columns =
      std::max(kernels::patch_embed_scratch_floats(1, c.num_channels, c.image_size, c.image_size, c.patch_size),
               tokens * 9 * c.output_channels);
  f(b.x, tokens, hidden);
  f(b.normed, tokens, hidden);
  f(b.qkv, tokens, 3 * hidden);
  f(b.window_qkv, window_rows, 3 * hidden);
  f(b.context, std::max(tokens, window_rows), hidden);
  f(b.mlp, tokens, c.mlp_dim);
  f(b.attention, attention, 1);
  f(b.columns, columns, 1);
  f(b.neck1, tokens, c.output_channels);
  f(b.neck2, tokens, c.output_channels);
}

// Copies token rows [grid * grid, cols] into padded windows [windows * window * window, cols], windows in (wy, wx)
// order and tokens in (iy, ix) order within each, as HF's window_partition; rows outside the grid get `pad`
// (cols floats) or zeros when pad is null.
void window_partition(const float* src, int64_t grid, int64_t window, int64_t cols, const float* pad, float* dst) {
  const int64_t side = windows_per_side(grid, window);
  for (int64_t wy = 0; wy < side; ++wy) {
    for (int64_t wx = 0; wx < side; ++wx) {
      for (int64_t iy = 0; iy < window; ++iy) {
        for (int64_t ix = 0; ix < window; ++ix) {
          const int64_t y = wy * window + iy, x = wx * window + ix;
          float* row = dst + (((wy * side + wx) * window + iy) * window + ix) * cols;
          if (y < grid && x < grid) {
            std::memcpy(row, src + (y * grid + x) * cols, cols * sizeof(float));
          } else if (pad != nullptr) {
            std::memcpy(row, pad, cols * sizeof(float));
          } else {
            std::fill(row, row + cols, 0.0f);
          }
        }
      }
    }
  }
}

// The inverse (HF's window_unpartition): window rows back to token rows, dropping the padding.
void window_unpartition(const float* src, int64_t grid, int64_t window, int64_t cols, float* dst) {
  const int64_t side = windows_per_side(grid, window);
  for (int64_t y = 0; y < grid; ++y) {
    for (int64_t x = 0; x < grid; ++x) {
      const int64_t wy = y / window, wx = x / window, iy = y % window, ix = x % window;
      std::memcpy(dst + (y * grid + x) * cols, src + (((wy * side + wx) * window + iy) * window + ix) * cols,
                  cols * sizeof(float));
    }
  }
}

// im2col of a 3x3 convolution with padding 1 over channels-last rows [grid * grid, channels]: row (y, x) of the
// result holds the 9 neighbours' channel vectors in (ky, kx) order, zeros outside the grid.
void im2col_3x3(const float* src, int64_t grid, int64_t channels, float* columns) {
  for (int64_t y = 0; y < grid; ++y) {
    for (int64_t x = 0; x < grid; ++x) {
      float* row = columns + (y * grid + x) * 9 * channels;
      for (int64_t ky = 0; ky < 3; ++ky) {
        for (int64_t kx = 0; kx < 3; ++kx) {
          const int64_t sy = y + ky - 1, sx = x + kx - 1;
          float* dst = row + (ky * 3 + kx) * channels;
          if (sy < 0 || sy >= grid || sx < 0 || sx >= grid) {
            std::fill(dst, dst + channels, 0.0f);
          } else {
            std::memcpy(dst, src + (sy * grid + sx) * channels, channels * sizeof(float));
          }
        }
      }
    }
  }
}

}  // namespace

size_t sam_vision_workspace_bytes(const SamVisionConfig& config) {
  VisionBuffers unused;
  return sam_buffer_bytes([&](auto&& f) { for_each_buffer(config, unused, f); });
}

Status sam_vision_forward(const SamVisionConfig& c, const SamVisionWeights& w, const float* pixels, float* embedding,
                          Arena& arena, const TraceFn& trace) {
  arena.reset();
  VisionBuffers b;
  RETURN_IF_ERROR(sam_take_buffers(arena, [&](auto&& f) { for_each_buffer(c, b, f); }));
  Tensor &x = b.x, &normed = b.normed, &qkv = b.qkv, &context = b.context;
  float* columns = b.columns.data_as<float>();
  const int64_t grid = c.grid(), tokens = grid * grid, hidden = c.hidden_size;
  auto dump = [&trace](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };

  // Patch embedding + absolute positions.
  const Tensor image(const_cast<float*>(pixels), DType::kF32, {1, c.num_channels, c.image_size, c.image_size});
  Tensor patches = x.reshape({1, tokens, hidden});
  kernels::patch_embed(image, w.patch_weight, &w.patch_bias, c.patch_size, patches, columns);
  if (!w.pos_embed.empty()) kernels::add(x, w.pos_embed, x);
  dump("vision.embeddings", x);

  for (size_t i = 0; i < w.layers.size(); ++i) {
    const SamVisionLayerWeights& layer = w.layers[i];
    const EncoderBlockWeights& blk = layer.block;
    const Tensor* qkv_bias = blk.qkv_bias.empty() ? nullptr : &blk.qkv_bias;
    const std::string prefix = "vision.layers." + std::to_string(i) + ".";

    // Attention half: layer_norm1 -> qkv -> (window partition) -> attention -> (unpartition) -> proj, residual.
    kernels::layer_norm(x, blk.ln1_weight, blk.ln1_bias, c.layer_norm_eps, normed);
    kernels::linear(normed, blk.qkv_weight, qkv_bias, qkv);
    SamAttentionArgs args;
    args.out = context.data_as<float>();
    args.out_ld = hidden;
    args.heads = c.num_attention_heads;
    args.head_dim = c.head_dim();
    args.qkv_ld = 3 * hidden;
    if (!layer.rel_pos_h.empty()) {
      args.rel_pos_h = layer.rel_pos_h.data_as<float>();
      args.rel_pos_w = layer.rel_pos_w.data_as<float>();
    }
    Tensor attention_out = context.slice_rows(0, tokens);
    if (layer.window > 0) {
      window_partition(qkv.data_as<float>(), grid, layer.window, 3 * hidden,
                       qkv_bias ? qkv_bias->data_as<float>() : nullptr, b.window_qkv.data_as<float>());
      const int64_t side = windows_per_side(grid, layer.window);
      args.qkv = b.window_qkv.data_as<float>();
      args.sequences = side * side;
      args.height = args.width = layer.window;
      sam_attention(args, b.attention.data_as<float>());
      window_unpartition(context.data_as<float>(), grid, layer.window, hidden, normed.data_as<float>());
      attention_out = normed;  // layer_norm1's output is no longer needed
    } else {
      args.qkv = qkv.data_as<float>();
      args.sequences = 1;
      args.height = args.width = grid;
      sam_attention(args, b.attention.data_as<float>());
    }
    dump(prefix + "attn_context", attention_out);
    kernels::linear(attention_out, blk.out_weight, &blk.out_bias, x, kernels::Activation::kNone, /*accumulate=*/true);

    // MLP half.
    kernels::layer_norm(x, blk.ln2_weight, blk.ln2_bias, c.layer_norm_eps, normed);
    kernels::linear(normed, blk.fc1_weight, &blk.fc1_bias, b.mlp, c.hidden_act);
    kernels::linear(b.mlp, blk.fc2_weight, &blk.fc2_bias, x, kernels::Activation::kNone, /*accumulate=*/true);
    dump(prefix + "out", x);
  }

  // Neck: 1x1 conv, LN, 3x3 conv, LN; then channels-first out, as HF's [1, out, grid, grid].
  Tensor &neck1 = b.neck1, &neck2 = b.neck2;
  kernels::linear(x, w.neck_conv1, nullptr, neck1);
  kernels::layer_norm(neck1, w.neck_norm1.weight, w.neck_norm1.bias, kSamLayerNormEps, neck1);
  im2col_3x3(neck1.data_as<float>(), grid, c.output_channels, columns);
  const Tensor column_rows(columns, DType::kF32, {tokens, 9 * c.output_channels});
  kernels::linear(column_rows, w.neck_conv2, nullptr, neck2);
  kernels::layer_norm(neck2, w.neck_norm2.weight, w.neck_norm2.bias, kSamLayerNormEps, neck2);
  dump("vision.neck", neck2);
  const float* rows = neck2.data_as<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t ch = 0; ch < c.output_channels; ++ch) embedding[ch * tokens + t] = rows[t * c.output_channels + ch];
  }
  return ok_status();
}

}  // namespace mmserve::models
