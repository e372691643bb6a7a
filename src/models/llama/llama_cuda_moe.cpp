// LlamaCudaModel's Mixtral expert layer (see llama_cuda.h): routing, the experts' GEMMs (a GEMV at decode, a grouped
// GEMM over the tile map, or cuBLASLt per expert on padded row counts), the combine; and the routing trace.
#include <algorithm>

#include "core/cuda/cuda_status.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/swiglu/swiglu_cuda.h"
#include "models/llama/llama_cuda.h"

namespace mmserve::models {
namespace {

// Mixtral's expert GEMMs: M as it is up to 16 rows (decode: 16 shapes, the skinny ones cuBLASLt runs best exact),
// rounded up to 16 rows up to 64, then to 64 (at most LlamaCudaModel::kMoePadRows extra: plan_buffers' room).
int64_t padded_rows(int64_t rows) {
  if (rows <= 16) return std::max<int64_t>(rows, 0);
  const int64_t step = rows <= 64 ? 16 : 64;
  return (rows + step - 1) / step * step;
}

}  // namespace

Status LlamaCudaModel::moe_mlp(const Layer& w, int64_t layer, int64_t tokens) {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  cudaStream_t s = stream_.get();
  const int64_t h = c.hidden_size, i = c.intermediate_size, e_count = c.num_experts, k = c.experts_per_token;
  auto gemm = [&](const void* a, int64_t lda, const void* wt, int64_t n, int64_t kk, void* out, DType out_dtype,
                  int64_t m) {
    kernels::GemmCudaArgs g;
    g.m = m, g.n = n, g.k = kk, g.a = a, g.lda = lda, g.w = wt, g.ldw = kk, g.in_dtype = d;
    g.d = out, g.ldd = n, g.out_dtype = out_dtype;
    return gemm_->run(g, s);
  };
  auto at = [&](const void* p, DType dt, int64_t n) { return static_cast<const uint8_t*>(p) + storage_bytes(dt, n); };
  auto at_mut = [&](void* p, DType dt, int64_t n) { return static_cast<uint8_t*>(p) + storage_bytes(dt, n); };
  // Route: logits in f32 (HF's softmax runs in f32 on the router's output), top-k, then the pairs grouped by expert.
  RETURN_IF_ERROR(gemm(normed_, h, w.router, e_count, h, router_logits_, DType::kF32, tokens));
  int32_t* ids = moe_ids_ + layer * tokens * k;  // this layer's slice of the step's routing
  float* weights = moe_weights_ + layer * tokens * k;
  last_tokens_ = tokens;
  RETURN_IF_ERROR(kernels::moe_route_cuda(router_logits_, e_count, tokens, e_count, k, ids, weights, s));
  if (moe_gemv_path(tokens)) {
    // A few tokens (decode): every pair through its expert's weights by a GEMV that reads the expert id on the
    // device: no plan, no host round trip, so the step can replay as a CUDA graph.
    const int64_t pairs = tokens * k;
    RETURN_IF_ERROR(kernels::moe_gemv_cuda(normed_, h, k, w.w13, 2 * i * h, d, ids, pairs, 2 * i, h, moe_gate_up_, d,
                                           2 * i, s));
    kernels::SwigluArgs sw;
    sw.gate = moe_gate_up_, sw.up = at(moe_gate_up_, d, i), sw.in_dtype = d, sw.in_ld = 2 * i, sw.rows = pairs;
    sw.cols = i, sw.y = moe_act_, sw.y_dtype = d, sw.y_ld = i;
    RETURN_IF_ERROR(kernels::swiglu_cuda(sw, s));
    RETURN_IF_ERROR(kernels::moe_gemv_cuda(moe_act_, i, 1, w.w2, h * i, d, ids, pairs, h, i, moe_yp_, DType::kF32, h,
                                           s));
    return kernels::moe_combine_cuda(moe_yp_, h, /*row_of=*/nullptr, ids, weights, tokens, k, h, x_, h,
                                     /*accumulate=*/true, s);
  }
  RETURN_IF_ERROR(kernels::moe_plan_cuda(ids, tokens, e_count, k, moe_offsets_, moe_pair_, moe_row_of_, s));
  if (moe_grouped_path(tokens)) {
    // Every expert in one launch per matrix, the row counts read on the device: [w1; w3] over the pairs' rows
    // gathered from normed_ (row pair[r] / k) with SwiGLU in the epilogue, then w2 into f32 rows for the combine.
    const int64_t pairs = tokens * k, block_m = kernels::moe_grouped_gemm_block_m(pairs, e_count);
    RETURN_IF_ERROR(kernels::moe_tile_map_cuda(moe_offsets_, pairs, e_count, block_m, moe_tile_map_, s));
    kernels::MoeGroupedGemmArgs g;
    g.a = normed_, g.lda = h, g.a_rows = moe_pair_, g.a_div = k, g.w = w.w13, g.w_stride = 2 * i * h, g.dtype = d;
    g.offsets = moe_offsets_, g.experts = e_count, g.rows = pairs, g.n = i, g.k = h, g.swiglu = true;
    g.y = moe_act_, g.y_dtype = d, g.ldy = i, g.block_m = block_m, g.tile_map = moe_tile_map_;
    RETURN_IF_ERROR(kernels::moe_grouped_gemm_cuda(g, s));
    g.a = moe_act_, g.lda = i, g.a_rows = nullptr, g.w = w.w2, g.w_stride = h * i, g.n = h, g.k = i;
    g.swiglu = false, g.y = moe_yp_, g.y_dtype = DType::kF32, g.ldy = h;
    RETURN_IF_ERROR(kernels::moe_grouped_gemm_cuda(g, s));
    return kernels::moe_combine_cuda(moe_yp_, h, moe_row_of_, ids, weights, tokens, k, h, x_, h, /*accumulate=*/true,
                                     s);
  }
  RETURN_IF_ERROR(kernels::moe_permute_cuda(normed_, h, d, moe_pair_, tokens * k, k, h, moe_xp_, h, s));
  auto* offsets = moe_host_offsets_.data_as<int32_t>();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(offsets, moe_offsets_, (e_count + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  // Each expert over its rows: [w1; w3], then SwiGLU over every pair at once, then w2 (f32 out, for the combine).
  // A GEMM's M is rounded up (padded_rows) so that a few shapes serve every routing: cuBLASLt picks an algorithm
  // per new shape, which costs more than the padded rows' arithmetic (2.4x on the 2,048-token top-2 layer stack,
  // docs/perf/mixtral_gpu.md). The padding rows read the next expert's
  // inputs and write rows that expert (run later, in ascending order) overwrites, or the buffers' slack past the
  // last pair (moe_pad_rows); nothing reads them.
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t first = offsets[e], rows = padded_rows(offsets[e + 1] - offsets[e]);
    if (rows == 0) continue;
    RETURN_IF_ERROR(gemm(at(moe_xp_, d, first * h), h, at(w.w13, d, e * 2 * i * h), 2 * i, h,
                         at_mut(moe_gate_up_, d, first * 2 * i), d, rows));
  }
  kernels::SwigluArgs sw;
  sw.gate = moe_gate_up_, sw.up = at(moe_gate_up_, d, i), sw.in_dtype = d, sw.in_ld = 2 * i, sw.rows = tokens * k;
  sw.cols = i, sw.y = moe_act_, sw.y_dtype = d, sw.y_ld = i;
  RETURN_IF_ERROR(kernels::swiglu_cuda(sw, s));
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t first = offsets[e], rows = padded_rows(offsets[e + 1] - offsets[e]);
    if (rows == 0) continue;
    RETURN_IF_ERROR(gemm(at(moe_act_, d, first * i), i, at(w.w2, d, e * h * i), h, i, moe_yp_ + first * h,
                         DType::kF32, rows));
  }
  return kernels::moe_combine_cuda(moe_yp_, h, moe_row_of_, ids, weights, tokens, k, h, x_, h, /*accumulate=*/true, s);
}

Status LlamaCudaModel::copy_routing(MoeRoutingTrace& out) {
  const LlamaConfig& c = config_;
  if (c.num_experts <= 0) return failed_precondition("copy_routing on a model without experts");
  // The device holds [layers, last_tokens_, k] (a graph's bucket rows); the step's first routing_tokens_ are real.
  const int64_t k = c.experts_per_token, rows = last_tokens_, real = std::min(routing_tokens_, rows);
  out.layers = c.num_hidden_layers, out.tokens = real, out.k = k;
  out.experts.resize(static_cast<size_t>(out.layers * real * k));
  out.weights.resize(out.experts.size());
  const size_t pitch = static_cast<size_t>(rows * k), width = static_cast<size_t>(real * k);
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(out.experts.data(), width * sizeof(int32_t), moe_ids_, pitch * sizeof(int32_t),
                                         width * sizeof(int32_t), static_cast<size_t>(out.layers),
                                         cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(out.weights.data(), width * sizeof(float), moe_weights_, pitch * sizeof(float),
                                         width * sizeof(float), static_cast<size_t>(out.layers),
                                         cudaMemcpyDeviceToHost, stream_.get()));
  return stream_.synchronize();
}

bool LlamaCudaModel::moe_gemv_path(int64_t tokens) const {
  const LlamaConfig& c = config_;
  return c.num_experts > 0 && options_.dtype != DType::kF32 && tokens * c.experts_per_token <= c.num_experts &&
         tokens * c.experts_per_token <= kernels::kMoeGemvMaxPairs && c.hidden_size % 8 == 0 &&
         c.intermediate_size % 8 == 0;
}

bool LlamaCudaModel::moe_grouped_path(int64_t tokens) const {
  const LlamaConfig& c = config_;
  const int64_t pairs = tokens * c.experts_per_token;
  return c.num_experts > 0 && options_.dtype != DType::kF32 && pairs <= options_.moe_grouped_rows * c.num_experts &&
         c.hidden_size % 8 == 0 && c.intermediate_size % 8 == 0 &&
         kernels::moe_grouped_gemm_tiles(pairs, c.num_experts, 32) <= 65535;
}

}  // namespace mmserve::models
