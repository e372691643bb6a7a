// The pre-LN transformer encoder block shared by CLIP's towers (and later Whisper's encoder and SAM's ViT):
//
//   x = x + out_proj(attention(split_heads(qkv_proj(layer_norm1(x)))))
//   x = x + fc2(act(fc1(layer_norm2(x))))
//
// q, k and v are computed by one GEMM against the three projection matrices fused at load ([3H, H]), and
// both residual adds are folded into the output GEMMs (beta = 1), so a block is 4 GEMMs, 2 layer norms and
// one attention call. The optional `trace` callback sees every intermediate by name (as llama.cpp's cb()),
// which is how a mismatch against HF is localised.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/activation/activation.h"
#include "kernels/attention/attention.h"

namespace mmserve::models {

struct EncoderBlockWeights {
  Tensor ln1_weight, ln1_bias;
  Tensor qkv_weight, qkv_bias;  // [3H, H], [3H]: q rows, then k rows, then v rows
  Tensor out_weight, out_bias;  // [H, H], [H]
  Tensor ln2_weight, ln2_bias;
  Tensor fc1_weight, fc1_bias;  // [I, H], [I]
  Tensor fc2_weight, fc2_bias;  // [H, I], [H]
};

struct EncoderBlockConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t intermediate = 0;
  float layer_norm_eps = 1e-5f;
  kernels::Activation activation = kernels::Activation::kQuickGelu;
};

// Scratch for one block over `rows` = batch * seq tokens.
struct EncoderBlockScratch {
  Tensor normed;   // [rows, H]
  Tensor qkv;      // [rows, 3H]
  Tensor context;  // [rows, H]
  Tensor mlp;      // [rows, I]
};
int64_t encoder_block_scratch_floats(const EncoderBlockConfig& config, int64_t rows);
// Carves the scratch out of `floats` (encoder_block_scratch_floats() of them, 64-byte aligned).
EncoderBlockScratch make_encoder_block_scratch(const EncoderBlockConfig& config, int64_t rows, float* floats);

using TraceFn = std::function<void(const std::string& name, const Tensor& value)>;

// x: [batch, seq, H] f32 contiguous, updated in place.
void encoder_block_forward(const EncoderBlockConfig& config, const EncoderBlockWeights& w, Tensor& x,
                           const kernels::AttentionMask& mask, EncoderBlockScratch& scratch,
                           const TraceFn& trace = nullptr, const std::string& prefix = "");

}  // namespace mmserve::models
