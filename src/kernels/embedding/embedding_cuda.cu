// Token + position embeddings on the GPU (embedding_cuda.h): x[t, :] = f32(table[id, :]) + f32(pos[s, :]).
//
// One warp per token, 8 tokens to a 256-thread block; the lanes walk the hidden dimension in packs of 4
// elements (a 16-byte float4 store; 16-byte f32 or 8-byte f16/bf16 loads) when hidden % 4 == 0 and the
// three pointers are aligned for it, checked at run time, else one element at a time. The sum is one f32
// addition of two exactly converted values, so the result is bit-identical to the CPU twin's. An id outside
// [0, vocab) reads row 0. No allocation, sync or host reads: graph-capturable.
// Tests: embedding_cuda_test.cpp; bench: embedding_cuda_bench.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "core/cuda/cuda_status.h"
#include "kernels/embedding/embedding_cuda.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int kBlockThreads = kWarp * kRowsPerBlock;

// blockDim = (32, kRowsPerBlock): threadIdx.y picks the token, threadIdx.x is the lane.
template <typename T, int kVec>
__global__ void __launch_bounds__(kBlockThreads)
    token_position_kernel(const int32_t* ids, int64_t tokens, int64_t seq, const T* table, const T* positions,
                          int64_t vocab, int64_t hidden, float* x) {
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (token >= tokens) return;
  int64_t id = ids[token];
  if (id < 0 || id >= vocab) id = 0;
  const T* table_row = table + id * hidden;
  const T* position_row = positions + (token % seq) * hidden;
  float* out = x + token * hidden;
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * kVec; j < hidden; j += kWarp * kVec) {
    const Pack<T, kVec> a = *reinterpret_cast<const Pack<T, kVec>*>(table_row + j);
    const Pack<T, kVec> b = *reinterpret_cast<const Pack<T, kVec>*>(position_row + j);
    Pack<float, kVec> sum;
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum.v[k] = to_f32(a.v[k]) + to_f32(b.v[k]);
    *reinterpret_cast<Pack<float, kVec>*>(out + j) = sum;
  }
}

bool aligned_to(const void* pointer, size_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

template <typename T>
Status launch(const int32_t* ids, int64_t tokens, int64_t seq, const void* table, const void* positions, int64_t vocab,
              int64_t hidden, float* x, cudaStream_t stream) {
  constexpr int kVec = 4;
  const T* table_t = static_cast<const T*>(table);
  const T* positions_t = static_cast<const T*>(positions);
  const dim3 block(kWarp, kRowsPerBlock);
  const auto blocks = static_cast<unsigned>((tokens + kRowsPerBlock - 1) / kRowsPerBlock);
  const bool vectorised = hidden % kVec == 0 && aligned_to(table, kVec * sizeof(T)) &&
                          aligned_to(positions, kVec * sizeof(T)) && aligned_to(x, kVec * sizeof(float));
  if (vectorised) {
    token_position_kernel<T, kVec>
        <<<blocks, block, 0, stream>>>(ids, tokens, seq, table_t, positions_t, vocab, hidden, x);
  } else {
    token_position_kernel<T, 1><<<blocks, block, 0, stream>>>(ids, tokens, seq, table_t, positions_t, vocab, hidden, x);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace

Status token_position_embedding_cuda(const int32_t* ids, int64_t batch, int64_t seq, const void* table,
                                     const void* positions, DType dtype, int64_t vocab, int64_t hidden, float* x,
                                     cudaStream_t stream) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return unimplemented("token_position_embedding_cuda: dtype must be f32, f16 or bf16");
  }
  if (batch < 0 || seq < 0 || vocab <= 0 || hidden <= 0) {
    return invalid_argument("token_position_embedding_cuda: need batch, seq >= 0 and vocab, hidden > 0");
  }
  if (batch == 0 || seq == 0) return ok_status();
  if (batch > std::numeric_limits<int32_t>::max() / seq) {
    return invalid_argument("token_position_embedding_cuda: batch * seq too large");
  }
  if (ids == nullptr || table == nullptr || positions == nullptr || x == nullptr) {
    return invalid_argument("token_position_embedding_cuda: null ids, table, positions or x");
  }
  const size_t size = dtype_size(dtype);
  if (!aligned_to(ids, 4) || !aligned_to(table, size) || !aligned_to(positions, size) || !aligned_to(x, 4)) {
    return invalid_argument("token_position_embedding_cuda: a pointer is not aligned to its element size");
  }
  const int64_t tokens = batch * seq;
  switch (dtype) {
    case DType::kF32: return launch<float>(ids, tokens, seq, table, positions, vocab, hidden, x, stream);
    case DType::kF16: return launch<__half>(ids, tokens, seq, table, positions, vocab, hidden, x, stream);
    case DType::kBF16: return launch<__nv_bfloat16>(ids, tokens, seq, table, positions, vocab, hidden, x, stream);
    default: break;
  }
  return unimplemented("token_position_embedding_cuda: dtype must be f32, f16 or bf16");
}

}  // namespace mmserve::kernels
