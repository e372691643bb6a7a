// SAM's prompt encoder (HF's SamPromptEncoder + SamPositionalEmbedding) and the image-wide positional embedding,
// following modeling_sam.py:
//
//   fourier(x, y) = [sin(2 pi ((2x - 1, 2y - 1) @ G)), cos(...)],  G = shared_image_embedding.positional_embedding
//   image PE at grid pixel (i, j): fourier((j + 0.5) / grid, (i + 0.5) / grid)
//   point (x, y) with label l: e = fourier((x + 0.5) / image_size, (y + 0.5) / image_size);
//     l == -1: e = not_a_point_embed (replaced, no positional part); l == 0 / 1: e += point_embed[0 / 1]
//   HF's pad rule: points without a box get one extra point labelled -1 (so one more not_a_point_embed token)
//   box (x1, y1, x2, y2): fourier of (x1, y1) + point_embed[2], fourier of (x2, y2) + point_embed[3]
//   sparse tokens: the points (+ the pad point), then the box corners; none at all for an empty prompt
//   dense: mask_embed(mask) = conv3(gelu(LN(conv2(gelu(LN(conv1(mask)))))))  (conv1, conv2: 2x2 stride 2;
//     conv3: 1x1; LN: SamLayerNorm over channels, the prompt config's eps), else no_mask_embed at every pixel
//
// The arithmetic follows torch's (prompt coordinates mapped in double, as the processor's float64 tensors are;
// the image grid in f32; the 2-term dot product, then 2 pi, in f32), since the arguments of sin/cos reach hundreds
// of radians and each rounding there shows in the embeddings.
// Tests: tests/conformance/sam_model_test.cpp (points, boxes, masks, their mixes; prompt errors).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/activation/activation.h"
#include "kernels/gemm/gemm.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/patch_embed/patch_embed.h"
#include "models/sam/sam_internal.h"

namespace mmserve::models {
namespace {

// HF: `2 * np.pi * coordinates` multiplies the f32 tensor by the f32-rounded scalar.
constexpr float kTwoPi = static_cast<float>(2.0 * M_PI);

// SamPositionalEmbedding on a coordinate pair already mapped to [-1, 1] (2c - 1): out [2 * feats] = [sin, cos].
void fourier_features(float x, float y, const Tensor& gaussian, float* out) {
  const int64_t feats = gaussian.size(1);
  const float* g0 = gaussian.data_as<float>();
  const float* g1 = g0 + feats;
  for (int64_t f = 0; f < feats; ++f) {
    const float projected = kTwoPi * (x * g0[f] + y * g1[f]);
    out[f] = std::sin(projected);
    out[feats + f] = std::cos(projected);
  }
}

// A prompt coordinate in input pixels: shifted to the pixel centre, normalised by the input size and mapped to
// [-1, 1] in double, then rounded to f32, as HF does it: the processor's coordinates are float64 tensors and
// SamPositionalEmbedding casts to the embedding's dtype only after `2 * coordinates - 1`.
void embed_coordinate(float x, float y, int64_t image_size, const Tensor& gaussian, float* out) {
  const double size = static_cast<double>(image_size);
  const double cx = (static_cast<double>(x) + 0.5) / size, cy = (static_cast<double>(y) + 0.5) / size;
  fourier_features(static_cast<float>(2.0 * cx - 1.0), static_cast<float>(2.0 * cy - 1.0), gaussian, out);
}

void add_row(float* row, const Tensor& embedding) {
  const float* e = embedding.data_as<float>();
  for (int64_t i = 0; i < embedding.numel(); ++i) row[i] = row[i] + e[i];
}

// [rows, channels] channels-last -> [channels, rows] (NCHW of one image), for the next strided convolution.
void to_channels_first(const Tensor& rows, float* out) {
  const int64_t n = rows.size(0), channels = rows.size(1);
  const float* src = rows.data_as<float>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t ch = 0; ch < channels; ++ch) out[ch * n + r] = src[r * channels + ch];
  }
}

}  // namespace

void sam_image_positional_embedding(const Tensor& gaussian, int64_t grid, Tensor& out) {
  const int64_t hidden = 2 * gaussian.size(1);
  MMSERVE_CHECK(out.size(0) == grid * grid && out.size(1) == hidden, "image PE is " + out.shape_string());
  const float size = static_cast<float>(grid);
  for (int64_t i = 0; i < grid; ++i) {
    for (int64_t j = 0; j < grid; ++j) {
      // (grid.cumsum(dim) - 0.5) / size, then 2c - 1, all in f32 here (the grid is built in the embedding's dtype).
      const float x = (static_cast<float>(j + 1) - 0.5f) / size, y = (static_cast<float>(i + 1) - 0.5f) / size;
      fourier_features(2.0f * x - 1.0f, 2.0f * y - 1.0f, gaussian, out.data_as<float>() + (i * grid + j) * hidden);
    }
  }
}

Status sam_check_prompt(const SamConfig& config, const SamPrompt& prompt) {
  if (prompt.labels.size() != prompt.points.size()) {
    return invalid_argument("prompt has " + std::to_string(prompt.points.size()) + " points but " +
                            std::to_string(prompt.labels.size()) + " labels");
  }
  if (static_cast<int64_t>(prompt.points.size()) > SamModel::kPointsMax) {
    return too_large("prompt has " + std::to_string(prompt.points.size()) + " points; at most " +
                     std::to_string(SamModel::kPointsMax) + " are accepted");
  }
  if (prompt.boxes.size() > 1) {
    return invalid_argument("prompt has " + std::to_string(prompt.boxes.size()) +
                            " boxes; SAM takes at most one box per prompt (send one prompt per box)");
  }
  for (size_t i = 0; i < prompt.points.size(); ++i) {
    if (prompt.labels[i] < -1 || prompt.labels[i] > 1) {
      return invalid_argument("label " + std::to_string(prompt.labels[i]) + " of point " + std::to_string(i) +
                              " is not one of -1 (not a point), 0 (negative), 1 (positive)");
    }
    if (!std::isfinite(prompt.points[i][0]) || !std::isfinite(prompt.points[i][1])) {
      return invalid_argument("point " + std::to_string(i) + " has a non-finite coordinate");
    }
  }
  for (const auto& box : prompt.boxes) {
    for (float v : box) {
      if (!std::isfinite(v)) return invalid_argument("the box has a non-finite coordinate");
    }
  }
  if (prompt.mask_input != nullptr) {
    const int64_t side = 4 * config.prompt.image_embedding_size();
    if (prompt.mask_height != side || prompt.mask_width != side) {
      return invalid_argument("mask_input is " + std::to_string(prompt.mask_height) + " x " +
                              std::to_string(prompt.mask_width) + "; the model takes " + std::to_string(side) + " x " +
                              std::to_string(side) + " (4x the embedding grid: the low-res logits of a previous mask)");
    }
  }
  return ok_status();
}

void sam_sparse_embeddings(const SamPromptEncoderConfig& c, const SamPromptWeights& w, const SamPrompt& prompt,
                           std::vector<float>& tokens) {
  const int64_t hidden = c.hidden_size;
  auto append = [&tokens, hidden]() {
    tokens.resize(tokens.size() + hidden);
    return tokens.data() + tokens.size() - hidden;
  };
  const bool pad = prompt.boxes.empty();  // HF: _embed_points(..., pad=(input_boxes is None))
  for (size_t i = 0; i < prompt.points.size() + (pad && !prompt.points.empty() ? 1 : 0); ++i) {
    const bool is_pad = i == prompt.points.size();
    const int32_t label = is_pad ? -1 : prompt.labels[i];
    float* e = append();
    if (label == -1) {  // torch.where(labels == -1, not_a_point_embed, ...): no positional part at all
      std::memcpy(e, w.not_a_point_embed.data(), hidden * sizeof(float));
      continue;
    }
    embed_coordinate(prompt.points[i][0], prompt.points[i][1], c.image_size, w.positional_embedding, e);
    add_row(e, w.point_embed[label]);  // label 0: point_embed[0], label 1: point_embed[1]
  }
  for (const auto& box : prompt.boxes) {
    float* corner1 = append();
    embed_coordinate(box[0], box[1], c.image_size, w.positional_embedding, corner1);
    add_row(corner1, w.point_embed[2]);
    float* corner2 = append();
    embed_coordinate(box[2], box[3], c.image_size, w.positional_embedding, corner2);
    add_row(corner2, w.point_embed[3]);
  }
}

size_t sam_dense_workspace_bytes(const SamConfig& c) {
  const int64_t grid = c.prompt.image_embedding_size(), mic = c.prompt.mask_input_channels, half = 2 * grid;
  // conv1's output and its NCHW copy, conv2's output, the im2col scratch of either convolution (as taken below).
  return 2 * sam_padded_bytes(half * half * (mic / 4)) + sam_padded_bytes(grid * grid * mic) +
         sam_padded_bytes(std::max(kernels::patch_embed_scratch_floats(1, 1, 2 * half, 2 * half, 2),
                                   kernels::patch_embed_scratch_floats(1, mic / 4, half, half, 2)));
}

Status sam_dense_embedding(const SamConfig& config, const SamPromptWeights& w, const SamPrompt& prompt, Tensor& dense,
                           Arena& arena) {
  const SamPromptEncoderConfig& c = config.prompt;
  const int64_t grid = c.image_embedding_size(), hidden = c.hidden_size, pixels = grid * grid;
  if (prompt.mask_input == nullptr) {
    // no_mask_embed.weight.reshape(1, -1, 1, 1).expand(...): the same vector at every pixel.
    for (int64_t p = 0; p < pixels; ++p) {
      std::memcpy(dense.data_as<float>() + p * hidden, w.no_mask_embed.data(), hidden * sizeof(float));
    }
    return ok_status();
  }
  const int64_t mic = c.mask_input_channels, half = 2 * grid;
  ASSIGN_OR_RETURN(Tensor conv1, arena.allocate_tensor(DType::kF32, {1, half * half, mic / 4}));
  ASSIGN_OR_RETURN(Tensor conv1_nchw, arena.allocate_tensor(DType::kF32, {1, mic / 4, half, half}));
  ASSIGN_OR_RETURN(Tensor conv2, arena.allocate_tensor(DType::kF32, {1, pixels, mic}));
  ASSIGN_OR_RETURN(
      Tensor columns,
      arena.allocate_tensor(DType::kF32, {std::max(kernels::patch_embed_scratch_floats(1, 1, 2 * half, 2 * half, 2),
                                                   kernels::patch_embed_scratch_floats(1, mic / 4, half, half, 2))}));
  const Tensor mask(const_cast<float*>(prompt.mask_input), DType::kF32, {1, 1, 2 * half, 2 * half});
  kernels::patch_embed(mask, w.mask_conv1_weight, &w.mask_conv1_bias, 2, conv1, columns.data_as<float>());
  Tensor conv1_rows = conv1.reshape({half * half, mic / 4});
  kernels::layer_norm(conv1_rows, w.mask_norm1.weight, w.mask_norm1.bias, c.layer_norm_eps, conv1_rows);
  kernels::activation(conv1_rows, conv1_rows, c.hidden_act);
  to_channels_first(conv1_rows, conv1_nchw.data_as<float>());
  kernels::patch_embed(conv1_nchw, w.mask_conv2_weight, &w.mask_conv2_bias, 2, conv2, columns.data_as<float>());
  Tensor conv2_rows = conv2.reshape({pixels, mic});
  kernels::layer_norm(conv2_rows, w.mask_norm2.weight, w.mask_norm2.bias, c.layer_norm_eps, conv2_rows);
  kernels::activation(conv2_rows, conv2_rows, c.hidden_act);
  kernels::linear(conv2_rows, w.mask_conv3.weight, &w.mask_conv3.bias, dense);
  return ok_status();
}

}  // namespace mmserve::models
