// The device-side structures of ClipCudaModel (clip_cuda.h), shared by its two source files: clip_cuda.cpp (load:
// ranks, sharding and upload of the weights, the activation plan) and clip_cuda_forward.cpp (the forward of each
// tower, tensor-parallel all-reduces, CUDA graphs, the encode entry points and the pipeline). Internal to them.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "models/clip/clip_cuda.h"

namespace mmserve::models {

// Device pointers into weight_arena_ (the blocks' layout: models/common/encoder_block_cuda.h).
// Under tensor parallel a rank holds qkv [3H/T, H], out [H, H/T], fc1 [I_r, H], fc2 [H, I_r] (the shapes of
// TowerShape); everything outside the blocks is whole on every rank.

struct ClipCudaModel::Weights {
  std::vector<BlockWeights> text, vision;
  const void *token_embedding = nullptr, *text_positions = nullptr;
  const float *final_ln_w = nullptr, *final_ln_b = nullptr;
  const void *class_embedding = nullptr, *patch_weight = nullptr, *vision_positions = nullptr;
  const float *pre_ln_w = nullptr, *pre_ln_b = nullptr, *post_ln_w = nullptr, *post_ln_b = nullptr;
  const void *visual_projection = nullptr, *text_projection = nullptr;
};

// Activation buffers of one rank, sized for the largest bucket of either tower (they run one at a time).
struct ClipCudaModel::Activations {
  float* pixels = nullptr;        // [B, C, S, S]
  void* patches = nullptr;        // [B * P, C * p * p] (dtype)
  float* patch_out = nullptr;     // [B * P, H]
  float* x = nullptr;             // [rows, H] the residual stream
  void* normed = nullptr;         // [rows, H] (dtype)
  void* qkv = nullptr;            // [rows, 3H] (dtype)
  void* context = nullptr;        // [rows, H] (dtype)
  void* mlp = nullptr;            // [rows, I] (dtype)
  void* pooled = nullptr;         // [B, H] (dtype)
  float* embeds = nullptr;        // [B, projection_dim]
  int32_t* class_rows = nullptr;  // [B]: b * (P + 1), constant
  int32_t* text_ints = nullptr;   // [B * T ids | B lengths | B pooling rows], one copy per call
  void* workspace = nullptr;      // cuBLASLt
};

// What one GPU of the model holds: everything a forward touches, so ranks share nothing but the collective.
struct ClipCudaModel::Rank {
  int index = 0;   // rank in the tensor-parallel group (0 without one)
  int device = 0;  // CUDA ordinal
  CudaStream stream;
  DeviceArena weight_arena;
  DeviceArena activation_arena;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Activations> act;
  std::unique_ptr<kernels::CublasLtGemm> gemm;
  PinnedBuffer pinned_in, pinned_out;
  // Rank 0 of a single-rank model: the ring of pinned slots host pixels go through (stage_pixels), and per slot the
  // event after its last copy to the GPU (a slot is refilled only once that copy is done).
  PinnedBuffer pixel_staging;
  std::array<CudaEvent, kPixelStagingSlots> staging_copied;
  size_t staging_slot_bytes = 0;
  // ... and where 8-bit levels land before kernels/pixel_levels expands them into act->pixels (encode_image_levels):
  // max_batch images of levels, the level table on the device and the host copy it was uploaded from.
  DeviceArena level_arena;
  uint8_t* levels = nullptr;
  float* level_table = nullptr;
  std::vector<float> level_table_uploaded;
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs;  // (tower, bucket) -> graph
  size_t graph_bytes = 0;
  // Pipeline parallel: the blocks [begin, end) of each tower this stage holds, whether it embeds the inputs
  // (stage 0) and pools the outputs (the last stage). Without a pipeline: every block, both ends.
  int64_t vision_begin = 0, vision_end = 0, text_begin = 0, text_end = 0;
  bool first_stage = true, last_stage = true;
  CudaEvent done, copied;  // pipeline: this stage's micro-batch finished / its input was copied in
  ~Rank() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  }
};

}  // namespace mmserve::models
