// Benchmark of paged_attention_cuda() on Llama-3-8B's attention (32 heads, 8 KV heads, head_dim 128, bf16, blocks of
// 16 keys behind a shuffled block table): decode steps (batch 1, 8, 32, 64 x context 512, 2048, 8192), reported as
// achieved HBM GB/s with bytes = the K and V rows read once (q and out are noise), against the H200's ~4.8 TB/s
// datasheet (~4.2 TB/s reachable); two Llama-3.2-1B rows (head_dim 64); and the prefill of one 2,048-token prompt,
// reported as TFLOP/s with the causal FLOPs 2 * 2 * heads * head_dim * L^2 / 2. FP8 KV pools (kv=fp8_e4m3 /
// fp8_e5m2, scales 1.0) beside the bf16 pool at the same shapes (decode batch 32 x 2048 and 64 x 8192, the 2,048-token
// prefill), in the same run: GB/s count the pool's bytes (half as many), so compare the times.
// Run: kernels_cuda_bench (bench_paged_attention_cuda, see testing/cuda_bench_main.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

struct PagedShape {
  const char* what;
  int64_t batch, context, q_len, head_dim;
  PagedKvStorage storage = PagedKvStorage::kSame;
};

void bench_shape(CudaBench& bench, const PagedShape& s) {
  const int64_t heads = 32, kv_heads = 8, block = 16, width = kv_heads * s.head_dim;
  const DType dtype = DType::kBF16;
  const int64_t blocks_per_seq = (s.context + block - 1) / block, num_blocks = s.batch * blocks_per_seq;
  const int64_t element = paged_kv_element_bytes(s.storage, dtype);
  const size_t pool_bytes = static_cast<size_t>(num_blocks * block * width * element);
  const int64_t tokens = s.batch * s.q_len;
  const std::string kv = s.storage == PagedKvStorage::kSame ? "" : std::string("kv=") + paged_kv_storage_name(s.storage) + " ";
  const std::string shape = std::string("bf16 ") + kv + s.what + " b=" + std::to_string(s.batch) +
                            " ctx=" + std::to_string(s.context) + " q=" + std::to_string(s.q_len) +
                            " h=32/8 d=" + std::to_string(s.head_dim) + " bs=16";
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  std::vector<int32_t> lens(static_cast<size_t>(s.batch), static_cast<int32_t>(s.context)), starts;
  for (int64_t b = 0; b <= s.batch; ++b) starts.push_back(static_cast<int32_t>(b * s.q_len));
  void* q = device_random(dtype, tokens * heads * s.head_dim, 1);
  void *k = nullptr, *v = nullptr, *out = nullptr, *workspace = nullptr;
  int32_t *tables = nullptr, *d_lens = nullptr, *d_starts = nullptr;
  float* scales = nullptr;  // k_scale, v_scale = 1
  const float ones[2] = {1.0f, 1.0f};
  bool ok = cudaMalloc(reinterpret_cast<void**>(&scales), sizeof(ones)) == cudaSuccess &&
            cudaMemcpy(scales, ones, sizeof(ones), cudaMemcpyHostToDevice) == cudaSuccess;
  ok = ok && q != nullptr && cudaMalloc(&k, pool_bytes) == cudaSuccess && cudaMalloc(&v, pool_bytes) == cudaSuccess &&
            cudaMalloc(&out, static_cast<size_t>(tokens * heads * s.head_dim) * dtype_size(dtype)) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&tables), ids.size() * 4) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&d_lens), lens.size() * 4) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&d_starts), starts.size() * 4) == cudaSuccess;
  PagedAttentionArgs a;
  a.q_ld = a.out_ld = heads * s.head_dim;
  a.dtype = dtype;
  a.block_table_ld = blocks_per_seq;
  a.num_seqs = s.batch;
  a.num_tokens = tokens;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = s.head_dim;
  a.block_size = block;
  a.num_blocks = num_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.max_seq_len = s.context;
  a.max_query_len = s.q_len;
  a.kv_storage = s.storage;
  if (s.storage != PagedKvStorage::kSame) {
    a.k_scale = scales;
    a.v_scale = scales + 1;
  }
  const size_t ws = paged_attention_cuda_workspace_bytes(a);
  if (ok && ws > 0) ok = cudaMalloc(&workspace, ws) == cudaSuccess && cudaMemset(workspace, 0, ws) == cudaSuccess;
  Status status = resource_exhausted("cudaMalloc failed");
  if (ok) {
    cudaMemset(k, 0x3c, pool_bytes);  // 0.0115 in bf16, 1.5 in E4M3, 1.0 in E5M2: no zeros, no NaN
    cudaMemset(v, 0xbc, pool_bytes);
    cudaMemcpy(tables, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_starts, starts.data(), starts.size() * 4, cudaMemcpyHostToDevice);
    a.q = q;
    a.k_cache = k;
    a.v_cache = v;
    a.out = out;
    a.block_tables = tables;
    a.seq_lens = d_lens;
    a.query_start = d_starts;
    a.workspace = workspace;
    a.workspace_bytes = ws;
    status = paged_attention_cuda(a, bench.stream());
  }
  if (!status.ok()) {
    std::fprintf(stderr, "paged_attention %s: %s\n", shape.c_str(), status.to_string().c_str());
  } else {
    const bool decode = s.q_len == 1;
    const double flops = decode ? 0.0 : 2.0 * 2.0 * heads * s.head_dim * double(s.context) * s.context / 2.0;
    const double bytes = decode ? 2.0 * s.batch * s.context * width * element : 0.0;
    bench.run("paged_attention", shape, flops, bytes, [&] { (void)paged_attention_cuda(a, bench.stream()); });
  }
  cudaStreamSynchronize(bench.stream());
  for (void* p : {q, k, v, out, workspace, static_cast<void*>(tables), static_cast<void*>(d_lens),
                  static_cast<void*>(d_starts), static_cast<void*>(scales)}) {
    cudaFree(p);
  }
  cudaGetLastError();
}

}  // namespace

void bench_paged_attention_cuda(CudaBench& bench) {
  for (int64_t batch : {1, 8, 32, 64}) {
    for (int64_t context : {512, 2048, 8192}) bench_shape(bench, {"decode", batch, context, 1, 128});
  }
  bench_shape(bench, {"decode", 32, 2048, 1, 64});  // Llama-3.2-1B
  bench_shape(bench, {"decode", 64, 8192, 1, 64});
  bench_shape(bench, {"prefill", 1, 2048, 2048, 128});
  bench_shape(bench, {"prefill", 1, 2048, 2048, 64});
  // FP8 KV pools against the bf16 rows above (Llama-3-8B: 32 / 8 heads, head_dim 128).
  for (PagedKvStorage storage : {PagedKvStorage::kFp8E4M3, PagedKvStorage::kFp8E5M2}) {
    bench_shape(bench, {"decode", 32, 2048, 1, 128, storage});
    bench_shape(bench, {"decode", 64, 8192, 1, 128, storage});
    bench_shape(bench, {"decode", 32, 2048, 1, 64, storage});
  }
  bench_shape(bench, {"prefill", 1, 2048, 2048, 128, PagedKvStorage::kFp8E4M3});
}

}  // namespace mmserve::kernels
