// encoder_block_cuda (see encoder_block_cuda.h): each step one kernel or one cuBLASLt GEMM.
#include "models/common/encoder_block_cuda.h"

#include <cmath>

#include "kernels/activation/activation_cuda.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/layer_norm/layer_norm_cuda.h"

namespace mmserve::models {

Status encoder_block_cuda(const EncoderBlockCudaWeights& w, const EncoderBlockCudaBuffers& a,
                          const EncoderBlockCudaShape& shape, const EncoderBlockCudaArgs& args,
                          kernels::CublasLtGemm& gemm, cudaStream_t s) {
  const DType dt = args.dtype;
  const int64_t rows = args.rows, hidden = shape.hidden, inner = shape.inner(), mlp = shape.mlp;
  auto after = [&]() { return args.after_residual ? args.after_residual() : ok_status(); };
  // normed = layer_norm1(x)
  kernels::LayerNormCudaArgs ln;
  ln.x = a.x, ln.x_ld = hidden, ln.weight = w.ln1_w, ln.bias = w.ln1_b, ln.eps = args.eps, ln.rows = rows;
  ln.cols = hidden, ln.y = a.normed, ln.y_dtype = dt, ln.y_ld = hidden;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  // qkv = normed @ [Wq; Wk; Wv]^T + b
  kernels::GemmCudaArgs g;
  g.m = rows, g.n = 3 * inner, g.k = hidden, g.a = a.normed, g.lda = hidden, g.w = w.qkv_w, g.ldw = hidden;
  g.in_dtype = dt, g.d = a.qkv, g.ldd = 3 * inner, g.out_dtype = dt, g.bias = w.qkv_b;
  RETURN_IF_ERROR(gemm.run(g, s));
  // context = attention(q, k, v)
  kernels::AttentionCudaArgs at;
  at.qkv = a.qkv, at.qkv_ld = 3 * inner, at.out = a.context, at.out_ld = inner, at.dtype = dt;
  at.batch = args.batch, at.seq = args.seq, at.heads = shape.heads, at.head_dim = shape.head_dim;
  at.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim)), at.causal = args.causal;
  at.kv_lengths = args.kv_lengths;
  RETURN_IF_ERROR(kernels::attention_cuda(at, s));
  // x += context @ Wo^T + bo  (f32 output, beta = 1: the residual add)
  g = kernels::GemmCudaArgs{};
  g.m = rows, g.n = hidden, g.k = inner, g.a = a.context, g.lda = inner, g.w = w.out_w, g.ldw = inner;
  g.in_dtype = dt, g.d = a.x, g.ldd = hidden, g.out_dtype = DType::kF32, g.bias = w.out_b, g.beta = args.residual_beta;
  RETURN_IF_ERROR(gemm.run(g, s));
  RETURN_IF_ERROR(after());
  // normed = layer_norm2(x)
  ln.weight = w.ln2_w, ln.bias = w.ln2_b;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  // mlp = act(normed @ W1^T + b1)
  g = kernels::GemmCudaArgs{};
  g.m = rows, g.n = mlp, g.k = hidden, g.a = a.normed, g.lda = hidden, g.w = w.fc1_w, g.ldw = hidden;
  g.in_dtype = dt, g.d = a.mlp, g.ldd = mlp, g.out_dtype = dt, g.bias = w.fc1_b;
  RETURN_IF_ERROR(gemm.run(g, s));
  RETURN_IF_ERROR(kernels::activation_cuda(args.activation, a.mlp, dt, rows * mlp, s));
  // x += mlp @ W2^T + b2
  g = kernels::GemmCudaArgs{};
  g.m = rows, g.n = hidden, g.k = mlp, g.a = a.mlp, g.lda = mlp, g.w = w.fc2_w;
  g.ldw = mlp, g.in_dtype = dt, g.d = a.x, g.ldd = hidden, g.out_dtype = DType::kF32, g.bias = w.fc2_b;
  g.beta = args.residual_beta;
  RETURN_IF_ERROR(gemm.run(g, s));
  return after();
}

}  // namespace mmserve::models
