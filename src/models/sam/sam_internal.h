// Internal to src/models/sam: the bound weights of each part and the forward functions that sam_model.cpp calls.
//
// SamWeights holds Tensor views into the model's F32Weights (plus a few tensors derived at load: the image-wide
// positional embedding and convolution weights permuted for channels-last GEMMs), so the forwards read names
// once, at load. Activations are channels-last rows throughout ([pixels, channels]): every convolution becomes a
// GEMM over rows, and layer norms over channels (HF's SamLayerNorm "channels_first") are plain row layer norms.
// Tests: through tests/conformance/sam_model_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/common/encoder_block.h"
#include "models/sam/sam.h"

namespace mmserve::models {

// Bytes an Arena takes for `floats` floats (allocations are rounded up to its alignment).
inline size_t sam_padded_bytes(int64_t floats) {
  return (static_cast<size_t>(floats) * sizeof(float) + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment;
}

// Workspaces are described once, by a visitor: visit(f) calls f(tensor, rows, cols) for every [rows, cols] f32
// buffer. The same description sizes the arena (sam_buffer_bytes) and carves it (sam_take_buffers).
template <typename Visit>
size_t sam_buffer_bytes(Visit&& visit) {
  size_t bytes = 0;
  visit([&bytes](Tensor&, int64_t rows, int64_t cols) { bytes += sam_padded_bytes(rows * cols); });
  return bytes;
}
template <typename Visit>
Status sam_take_buffers(Arena& arena, Visit&& visit) {
  Status status = ok_status();
  visit([&](Tensor& t, int64_t rows, int64_t cols) {
    auto taken = arena.allocate_tensor(DType::kF32, {rows, cols});
    if (taken.ok()) t = *taken;
    if (status.ok() && !taken.ok()) status = taken.status();
  });
  return status;
}

struct SamNorm {
  Tensor weight, bias;
};

struct SamLinear {
  Tensor weight, bias;  // [out, in], [out] (bias may be empty)
};

struct SamVisionLayerWeights {
  EncoderBlockWeights block;    // ln1, qkv (HF's fused attn.qkv), out = attn.proj, ln2, fc1/fc2 = mlp.lin1/lin2
  Tensor rel_pos_h, rel_pos_w;  // [2 * span - 1, head_dim] or empty (use_rel_pos false)
  int64_t window = 0;           // 0: global attention
};

struct SamVisionWeights {
  Tensor patch_weight, patch_bias;  // [C, channels, p, p], [C]
  Tensor pos_embed;                 // [grid * grid, C] or empty
  std::vector<SamVisionLayerWeights> layers;
  Tensor neck_conv1;  // [out, C] (the 1x1 conv)
  SamNorm neck_norm1;
  Tensor neck_conv2;  // [out, 3 * 3 * out]: permuted at load to (ky, kx, c_in) columns
  SamNorm neck_norm2;
};

struct SamPromptWeights {
  Tensor positional_embedding;  // [2, num_pos_feats]: the shared random Fourier features
  Tensor image_pe;              // [grid * grid, hidden]: the image-wide positional embedding (computed at load)
  Tensor mask_conv1_weight, mask_conv1_bias;  // Conv2d k2 s2: [mic / 4, 1, 2, 2]
  Tensor mask_conv2_weight, mask_conv2_bias;  // Conv2d k2 s2: [mic, mic / 4, 2, 2]
  SamLinear mask_conv3;                       // 1x1 conv as [hidden, mic]
  SamNorm mask_norm1, mask_norm2;
  Tensor no_mask_embed;             // [hidden]
  std::vector<Tensor> point_embed;  // [hidden] each: negative, positive, box corner 1, box corner 2, ...
  Tensor not_a_point_embed;         // [hidden]
};

struct SamAttentionWeights {
  SamLinear q, k, v, out;  // q/k/v [internal, hidden], out [hidden, internal]
};

struct SamTwoWayLayerWeights {
  SamAttentionWeights self_attn, cross_token_to_image, cross_image_to_token;
  SamNorm norm1, norm2, norm3, norm4;
  SamLinear mlp1, mlp2;
};

struct SamDecoderWeights {
  Tensor output_tokens;  // [1 + num_mask_tokens, hidden]: iou_token then mask_tokens (concatenated at load)
  std::vector<SamTwoWayLayerWeights> layers;
  SamAttentionWeights final_attn;
  SamNorm final_norm;
  Tensor upscale1_weight, upscale1_bias;  // [hidden, 4 * hidden / 4]: (dy, dx, c_out) columns; [hidden / 4]
  SamNorm upscale_norm;
  Tensor upscale2_weight, upscale2_bias;              // [hidden / 4, 4 * hidden / 8]; [hidden / 8]
  std::vector<std::vector<SamLinear>> hypernetworks;  // per mask token: proj_in, layers..., proj_out
  std::vector<SamLinear> iou_head;                    // proj_in, layers..., proj_out
};

struct SamWeights {
  SamVisionWeights vision;
  SamPromptWeights prompt;
  SamDecoderWeights decoder;
};

// ---- sam_vision.cpp
// Activation bytes one image needs (the arena is reserved to this once).
size_t sam_vision_workspace_bytes(const SamVisionConfig& config);
// pixels [channels, S, S] of one image -> embedding [output_channels, grid, grid]. `arena` is reset and must hold
// sam_vision_workspace_bytes().
Status sam_vision_forward(const SamVisionConfig& config, const SamVisionWeights& w, const float* pixels,
                          float* embedding, Arena& arena, const TraceFn& trace);

// ---- sam_attention.cpp: ViT attention with the decomposed relative position bias (HF's SamVisionAttention)
struct SamAttentionArgs {
  const float* qkv = nullptr;  // rows [q | k | v] of 3 * hidden floats, sequences * tokens rows
  int64_t qkv_ld = 0;          // floats between rows (>= 3 * hidden)
  float* out = nullptr;        // context rows [hidden], sequences * tokens rows
  int64_t out_ld = 0;
  int64_t sequences = 0;          // windows (windowed layers) or images (global layers)
  int64_t height = 0, width = 0;  // the token grid of one sequence (tokens = height * width)
  int64_t heads = 0, head_dim = 0;
  const float* rel_pos_h = nullptr;  // [2 * height - 1, head_dim] or null (no relative position bias)
  const float* rel_pos_w = nullptr;  // [2 * width - 1, head_dim]
};
// Floats of scratch sam_attention() needs for sequences of `tokens` tokens on `threads` threads.
int64_t sam_attention_scratch_floats(int64_t height, int64_t width, int threads);
// out = softmax(scale * q k^T + rel_h + rel_w) v per sequence and head; `scratch` holds
// sam_attention_scratch_floats(height, width, kernels::cpu_threads()) floats.
void sam_attention(const SamAttentionArgs& args, float* scratch);

// ---- sam_prompt.cpp
// The image-wide positional embedding [grid * grid, hidden] (HF's get_image_wide_positional_embeddings,
// channels-last), computed at load into `out`.
void sam_image_positional_embedding(const Tensor& positional_embedding, int64_t grid, Tensor& out);
// Checks a prompt against the config (the errors SamModel::decode documents).
Status sam_check_prompt(const SamConfig& config, const SamPrompt& prompt);
// Sparse tokens of a prompt (HF's SamPromptEncoder: points, HF's pad point when there is no box, box corners),
// [count, hidden] rows appended to `tokens`.
void sam_sparse_embeddings(const SamPromptEncoderConfig& config, const SamPromptWeights& w, const SamPrompt& prompt,
                           std::vector<float>& tokens);
// Dense embedding [grid * grid, hidden] (channels-last): mask_embed(mask) or no_mask_embed broadcast.
// The mask path takes its buffers from `arena` (sam_dense_workspace_bytes() of them).
Status sam_dense_embedding(const SamConfig& config, const SamPromptWeights& w, const SamPrompt& prompt, Tensor& dense,
                           Arena& arena);
size_t sam_dense_workspace_bytes(const SamConfig& config);

// ---- sam_mask_decoder.cpp
size_t sam_decoder_workspace_bytes(const SamConfig& config, int64_t tokens);
// image [grid * grid, hidden] channels-last (embedding + dense prompt), tokens [T, hidden] (output tokens then
// sparse prompts) -> all num_mask_tokens masks [num_mask_tokens, 4 grid, 4 grid] and IoU scores
// [num_mask_tokens] (the multimask slicing is the caller's).
Status sam_mask_decoder_forward(const SamConfig& config, const SamWeights& w, const Tensor& image, const Tensor& tokens,
                                float* masks, float* iou, Arena& arena, const TraceFn& trace);

}  // namespace mmserve::models
