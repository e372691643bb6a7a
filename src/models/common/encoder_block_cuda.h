// The pre-LN transformer encoder block of CLIP's towers on the GPU (HF's CLIPEncoderLayer, encoder_block.h's CPU
// twin): x += out_proj(attention(qkv(layer_norm1(x)))); x += fc2(act(fc1(layer_norm2(x)))). Shared by ClipCudaModel
// (both towers, tensor and pipeline parallel) and LLaVA's vision tower (models/llava/llava_cuda.h).
//
// Precision: the residual stream x is f32; GEMM inputs and the qkv / context / mlp buffers are in `dtype`; the two
// GEMMs that write x do it with beta = residual_beta (1: the residual add is their epilogue; a tensor-parallel rank
// > 0 passes 0 and its partial sum is all-reduced by `after_residual`, called after each of the two).
// Tests: through tests/conformance/clip_cuda_test.cpp and tests/gpu/llava_cuda_test.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/activation/activation.h"
#include "kernels/gemm/gemm_cuda.h"

namespace mmserve::models {

// Device pointers. Norms f32; matrices and the biases of GEMMs with a 16-bit output in the compute dtype; the
// biases of GEMMs that write the f32 residual stream f32 (null: none, e.g. on tensor-parallel ranks > 0).
struct EncoderBlockCudaWeights {
  const float *ln1_w = nullptr, *ln1_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
  const void *qkv_w = nullptr, *qkv_b = nullptr;  // [3 inner, H], [3 inner] (dtype)
  const void* out_w = nullptr;                    // [H, inner] (dtype)
  const float* out_b = nullptr;                   // [H] f32
  const void *fc1_w = nullptr, *fc1_b = nullptr;  // [I, H], [I] (dtype)
  const void* fc2_w = nullptr;                    // [H, I] (dtype)
  const float* fc2_b = nullptr;                   // [H] f32
};

struct EncoderBlockCudaBuffers {
  float* x = nullptr;       // [rows, H] the residual stream
  void* normed = nullptr;   // [rows, H] (dtype)
  void* qkv = nullptr;      // [rows, 3 inner] (dtype)
  void* context = nullptr;  // [rows, inner] (dtype)
  void* mlp = nullptr;      // [rows, I] (dtype)
};

// heads and mlp are a tensor-parallel rank's share; inner = heads * head_dim.
struct EncoderBlockCudaShape {
  int64_t hidden = 0, heads = 0, head_dim = 0, mlp = 0;
  int64_t inner() const { return heads * head_dim; }
};

struct EncoderBlockCudaArgs {
  int64_t rows = 0, seq = 0, batch = 0;  // rows = batch * seq
  float eps = 1e-5f;
  kernels::Activation activation = kernels::Activation::kQuickGelu;
  bool causal = false;
  const int32_t* kv_lengths = nullptr;  // [batch] keys per row (padding masked), or null
  DType dtype = DType::kBF16;
  float residual_beta = 1.0f;
  std::function<Status()> after_residual;  // tensor parallel: the all-reduce of x
};

Status encoder_block_cuda(const EncoderBlockCudaWeights& w, const EncoderBlockCudaBuffers& a,
                          const EncoderBlockCudaShape& shape, const EncoderBlockCudaArgs& args,
                          kernels::CublasLtGemm& gemm, cudaStream_t stream);

}  // namespace mmserve::models
