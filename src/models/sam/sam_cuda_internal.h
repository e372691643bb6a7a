// The device-side structures of SamCudaModel (sam_cuda.h), shared by sam_cuda.cpp (load, upload, plan, graphs, entry
// points) and sam_cuda_forward.cpp (the forwards). Internal to them.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/cuda/device_memory.h"
#include "kernels/gemm/gemm_cuda.h"
#include "models/sam/sam_cuda.h"
#include "models/sam/sam_internal.h"

namespace mmserve::models {

// Device pointers into the weight arena. Encoder: norms f32; matrices and the biases of GEMMs with a 16-bit output
// in the dtype; biases of GEMMs that write the f32 residual stream f32; relative position tables f32. Decoder and
// prompt encoder: everything f32.
struct SamCudaModel::Weights {
  struct VisionLayer {
    const float *ln1_w = nullptr, *ln1_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
    const void *qkv_w = nullptr, *qkv_b = nullptr;  // [3C, C], [3C] or null (qkv_bias false)
    const void* proj_w = nullptr;                   // [C, C]
    const float* proj_b = nullptr;                  // [C]
    const void *fc1_w = nullptr, *fc1_b = nullptr;  // [mlp, C], [mlp]
    const void* fc2_w = nullptr;                    // [C, mlp]
    const float* fc2_b = nullptr;                   // [C]
    const float *rel_h = nullptr, *rel_w = nullptr;  // [2 span - 1, head_dim] or null
    int64_t window = 0;                             // 0: global
  };
  struct Linear {
    const float *w = nullptr, *b = nullptr;  // [out, in], [out]
    int64_t out = 0, in = 0;
  };
  struct Attention {
    Linear q, k, v, o;
  };
  struct TwoWayLayer {
    Attention self_attn, token_to_image, image_to_token;
    const float* norm_w[4] = {};
    const float* norm_b[4] = {};
    Linear mlp1, mlp2;
  };
  std::vector<VisionLayer> vision;
  const void* patch_w = nullptr;  // [C, channels * p * p]
  const float* patch_b = nullptr;
  const float* pos_embed = nullptr;  // [tokens, C] or null
  const void* neck1_w = nullptr;     // [out, C]
  const float *neck_ln1_w = nullptr, *neck_ln1_b = nullptr;
  const void* neck2_w = nullptr;  // [out, 9 out]: (ky, kx, c) columns
  const float *neck_ln2_w = nullptr, *neck_ln2_b = nullptr;

  const float* image_pe = nullptr;  // [pixels, hidden]
  const float* no_mask = nullptr;   // [hidden]
  Linear mask_conv1, mask_conv2, mask_conv3;  // [mic/4, 4], [mic, mic], [hidden, mic]: (c, ky, kx) columns
  const float *mask_ln1_w = nullptr, *mask_ln1_b = nullptr, *mask_ln2_w = nullptr, *mask_ln2_b = nullptr;
  std::vector<TwoWayLayer> two_way;
  Attention final_attn;
  const float *final_norm_w = nullptr, *final_norm_b = nullptr;
  Linear upscale1, upscale2;  // [4 c_out, c_in]: (dy, dx, c_out) rows
  const float *upscale_norm_w = nullptr, *upscale_norm_b = nullptr;
  std::vector<std::vector<Linear>> hypernetworks;
  std::vector<Linear> iou_head;
};

// Activation buffers: the encoder's sized for the largest bucket, the decoder's for the largest token bucket.
struct SamCudaModel::Activations {
  // encoder (e = dtype)
  float* pixels = nullptr;   // [B, channels, S, S]
  void* patches = nullptr;   // [B * T, channels * p * p] e
  float* x = nullptr;        // [B * T, C] the residual stream
  void* normed = nullptr;    // [B * T, C] e: layer norm outputs, the unpartitioned context, the neck's input
  void* qkv = nullptr;       // [B * T, 3C] e
  void* window_qkv = nullptr;  // [B * window rows, 3C] e
  void* context = nullptr;   // [B * max(T, window rows), C] e
  void* mlp = nullptr;       // [B * T, mlp] e
  float* bias = nullptr;     // rel_pos_attention's projections, the largest layer's
  float* neck1 = nullptr;    // [B * T, out]
  void* neck1_h = nullptr;   // [B * T, out] e
  void* columns = nullptr;   // [B * T, 9 out] e
  float* neck2 = nullptr;    // [B * T, out]: the embeddings, channels-last rows
  float* embed_t = nullptr;  // [B, out, T]: HF's layout, for host copies
  // decoder (f32), P = grid^2 pixels, N = the token bucket
  float *image = nullptr, *keys = nullptr, *key_in = nullptr, *dense = nullptr;  // [P, hidden]
  float *tokens = nullptr, *queries = nullptr, *query_in = nullptr;              // [N, hidden]
  float *q = nullptr, *k = nullptr, *v = nullptr, *ctx = nullptr;                // [max(N, P), hidden]
  float* mlp_d = nullptr;                                                        // [N, mlp_dim]
  float *up1_tmp = nullptr, *up1 = nullptr, *up2_tmp = nullptr, *up2 = nullptr;
  float *hyper = nullptr, *ff_a = nullptr, *ff_b = nullptr;
  float *masks = nullptr, *iou = nullptr;  // [mask tokens, 16 P], [mask tokens]
  int32_t* kv_len = nullptr;               // [1]: the real token count
  float *mask_in = nullptr, *s2d1 = nullptr, *conv1 = nullptr, *s2d2 = nullptr, *conv2 = nullptr;
  void* attention_workspace = nullptr;
  size_t attention_workspace_bytes = 0;
  void* gemm_workspace = nullptr;
};

struct SamCudaModel::Device {
  CudaStream stream;
  DeviceArena weight_arena, activation_arena;
  Weights w;
  Activations a;
  std::unique_ptr<kernels::CublasLtGemm> gemm;
  PinnedBuffer pinned_in, pinned_out;
  // Post-processed masks (decode_on_device with a geometry): sized by the largest original image seen so far,
  // grown (never per call) when a larger one comes.
  DeviceArena post_masks;
  PinnedBuffer post_pinned;
  std::map<int64_t, cudaGraphExec_t> encoder_graphs;                      // bucket -> graph
  std::map<std::pair<int64_t, bool>, cudaGraphExec_t> decoder_graphs;     // (token bucket, dense mask) -> graph
  // The prompt encoder's host-side tables (sparse tokens are built on the host): owned f32 copies and their views.
  std::vector<std::vector<float>> host_tables;
  SamPromptWeights host_prompt;
  std::vector<float> output_tokens;  // [1 + mask tokens, hidden]
  ~Device() {
    for (auto& [key, exec] : encoder_graphs) cudaGraphExecDestroy(exec);
    for (auto& [key, exec] : decoder_graphs) cudaGraphExecDestroy(exec);
  }
};

}  // namespace mmserve::models
