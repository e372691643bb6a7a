// Benchmark of the KV-cache kernels on Whisper large-v3's sizes (width 1280 = 20 heads x 64, bf16):
// appending one decode step's K and V for 16 requests into caches of 448 rows, reordering 5 beams' caches
// of 448 rows in place, and quantising one request's cross-attention K (1500 rows) to FP8. Reported as
// achieved HBM GB/s (bytes read + written).
// Run: kernels_cuda_bench (all CUDA kernels, see testing/cuda_bench_main.cpp).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "kernels/kv_cache/kv_cache_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {

void bench_kv_cache_cuda(CudaBench& bench) {
  const int64_t width = 1280, capacity = 448;
  {  // append: batch 16, one row each of k and v (columns of a fused QKV output: src_ld 3 * width)
    const int64_t batch = 16;
    void* qkv = device_random(DType::kBF16, batch * 3 * width, 1);
    void* kc = device_random(DType::kBF16, batch * capacity * width, 2);
    void* vc = device_random(DType::kBF16, batch * capacity * width, 3);
    int32_t* pos = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&pos), batch * sizeof(int32_t));
    if (pos) cudaMemset(pos, 0, batch * sizeof(int32_t));
    KvCacheAppendArgs a;
    a.k = static_cast<const uint16_t*>(qkv) + width;
    a.v = static_cast<const uint16_t*>(qkv) + 2 * width;
    a.src_ld = 3 * width;
    a.k_cache = kc;
    a.v_cache = vc;
    a.dtype = DType::kBF16;
    a.batch = batch;
    a.n = 1;
    a.capacity = capacity;
    a.width = width;
    a.positions = pos;
    if (qkv && kc && vc && pos && kv_cache_append(a, bench.stream()).ok()) {
      bench.run("kv_cache_append", "bf16 b=16 n=1 w=1280 cap=448", 0, 4.0 * batch * width * 2,
                [&] { (void)kv_cache_append(a, bench.stream()); });
    } else {
      std::fprintf(stderr, "kv_cache_append: setup failed\n");
    }
    cudaStreamSynchronize(bench.stream());
    cudaFree(qkv);
    cudaFree(kc);
    cudaFree(vc);
    cudaFree(pos);
  }
  {  // gather in place: 5 beams, 448 rows
    const int64_t beams = 5;
    void* cache = device_random(DType::kBF16, beams * capacity * width, 4);
    void* scratch = nullptr;
    int32_t* index = nullptr;
    const std::vector<int32_t> host_index = {1, 1, 0, 3, 2};
    cudaMalloc(&scratch, static_cast<size_t>(beams * capacity * width) * 2);
    cudaMalloc(reinterpret_cast<void**>(&index), beams * sizeof(int32_t));
    if (index) cudaMemcpy(index, host_index.data(), beams * sizeof(int32_t), cudaMemcpyHostToDevice);
    KvCacheGatherArgs g;
    g.src = cache;
    g.dst = cache;
    g.scratch = scratch;
    g.scratch_bytes = static_cast<size_t>(beams * capacity * width) * 2;
    g.element_bytes = 2;
    g.batch = beams;
    g.batch_src = beams;
    g.capacity = capacity;
    g.rows = capacity;
    g.width = width;
    g.src_index = index;
    if (cache && scratch && index && kv_cache_gather(g, bench.stream()).ok()) {
      // identity copy, gather and copy back: three passes of read + write
      bench.run("kv_cache_gather", "bf16 in place beams=5 rows=448 w=1280", 0, 6.0 * beams * capacity * width * 2,
                [&] { (void)kv_cache_gather(g, bench.stream()); });
    } else {
      std::fprintf(stderr, "kv_cache_gather: setup failed\n");
    }
    cudaStreamSynchronize(bench.stream());
    cudaFree(cache);
    cudaFree(scratch);
    cudaFree(index);
  }
  {  // quantize one request's cross-attention K (1500 rows) to FP8
    const int64_t rows = 1500;
    void* src = device_random(DType::kBF16, rows * width, 5);
    void* dst = nullptr;
    float* scale = nullptr;
    cudaMalloc(&dst, static_cast<size_t>(rows * width));
    cudaMalloc(reinterpret_cast<void**>(&scale), 20 * sizeof(float));
    QuantizeKvArgs q;
    q.src = src;
    q.src_ld = width;
    q.dtype = DType::kBF16;
    q.dst = dst;
    q.dst_ld = width;
    q.dst_batch_stride = rows;
    q.storage = KvStorage::kFp8E4M3;
    q.scale = scale;
    q.batch = 1;
    q.rows = rows;
    q.heads = 20;
    q.head_dim = 64;
    if (src && dst && scale && quantize_kv(q, bench.stream()).ok()) {
      bench.run("quantize_kv", "bf16->fp8 b=1 rows=1500 h=20 d=64", 0, rows * width * (2.0 * 2 + 1),
                [&] { (void)quantize_kv(q, bench.stream()); });
    } else {
      std::fprintf(stderr, "quantize_kv: setup failed\n");
    }
    cudaStreamSynchronize(bench.stream());
    cudaFree(src);
    cudaFree(dst);
    cudaFree(scale);
  }
  cudaGetLastError();
}

}  // namespace mmserve::kernels
