// kernels_cuda_bench: every CUDA kernel's micro-benchmark in one run, as a markdown table (see cuda_bench.h).
//
//   kernels_cuda_bench [--json FILE]
// Ceilings printed for reference: dense bf16 GEMM measured on an H200 (~770 TFLOP/s on random data) and
// HBM3e ~4.8 TB/s (datasheet); achieved / ceiling is what docs/perf/clip_gpu.md reports per layer type.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {

double CudaBench::run(const std::string& op, const std::string& shape, double flops, double bytes,
                      const std::function<void()>& launch, int warmup, int iterations) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmup; ++i) launch();
  cudaStreamSynchronize(stream_);
  std::vector<float> ms(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    cudaEventRecord(start, stream_);
    launch();
    cudaEventRecord(stop, stream_);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[static_cast<size_t>(i)], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  const double us = 1e3 * ms[ms.size() / 2];
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s %s: %s\n", op.c_str(), shape.c_str(), cudaGetErrorString(error));
  }
  rows_.push_back({op, shape, us, flops, bytes});
  return us;
}

}  // namespace mmserve::kernels

int main(int argc, char** argv) {
  using namespace mmserve::kernels;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "kernels_cuda_bench: no CUDA device\n");
    return 1;
  }
  const char* json_path = nullptr;
  std::string only;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  CudaBench bench(stream);
  // --only gemm,rope runs those benches alone (the names below); default: all of them.
  const std::pair<const char*, void (*)(CudaBench&)> benches[] = {
      {"gemm", bench_gemm_cuda},
      {"attention", bench_attention_cuda},
      {"layer_norm", bench_layer_norm_cuda},
      {"activation", bench_activation_cuda},
      {"embedding", bench_embedding_cuda},
      {"patch_embed", bench_patch_embed_cuda},
      {"l2_normalize", bench_l2_normalize_cuda},
      {"attention_kv", bench_attention_kv_cuda},
      {"kv_cache", bench_kv_cache_cuda},
      {"im2col_1d", bench_im2col_1d_cuda},
      {"mask_resize", bench_mask_resize_cuda},
      {"pixel_levels", bench_pixel_levels_cuda},
      {"png_inflate", bench_png_inflate_cuda},
      {"pil_resize", bench_pil_resize_cuda},
      {"paged_attention", bench_paged_attention_cuda},
      {"rms_norm", bench_rms_norm_cuda},
      {"rope", bench_rope_cuda},
      {"swiglu", bench_swiglu_cuda},
      {"moe", bench_moe_cuda},
      {"lora", bench_lora_cuda},
      {"sampling", bench_sampling_cuda},
      {"fp8", bench_fp8_cuda},
      {"w4a16", bench_w4a16_cuda},
  };
  for (const auto& [name, run] : benches) {
    if (only.empty() || ("," + only + ",").find(std::string(",") + name + ",") != std::string::npos) run(bench);
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double kBf16Ceiling = 770e12, kHbm = 4.8e12;
  std::printf("\n%s: ceilings bf16 GEMM %.0f TFLOP/s (measured), HBM %.1f TB/s (datasheet)\n\n", prop.name,
              kBf16Ceiling * 1e-12, kHbm * 1e-12);
  std::printf("| op | shape | us | TFLOP/s | %% of bf16 ceiling | GB/s | %% of HBM |\n|---|---|---|---|---|---|---|\n");
  FILE* json = json_path ? std::fopen(json_path, "w") : nullptr;
  if (json) std::fprintf(json, "[\n");
  for (size_t i = 0; i < bench.rows().size(); ++i) {
    const CudaBenchRow& r = bench.rows()[i];
    const double s = r.us * 1e-6;
    const double tflops = r.flops > 0 ? r.flops / s * 1e-12 : 0, gbs = r.bytes > 0 ? r.bytes / s * 1e-9 : 0;
    std::printf("| %s | %s | %.1f | %s | %s | %s | %s |\n", r.op.c_str(), r.shape.c_str(), r.us,
                r.flops > 0 ? std::to_string(tflops).substr(0, 6).c_str() : "-",
                r.flops > 0 ? std::to_string(100 * tflops * 1e12 / kBf16Ceiling).substr(0, 5).c_str() : "-",
                r.bytes > 0 ? std::to_string(gbs).substr(0, 7).c_str() : "-",
                r.bytes > 0 ? std::to_string(100 * gbs * 1e9 / kHbm).substr(0, 5).c_str() : "-");
    if (json) {
      std::fprintf(json, "  {\"op\": \"%s\", \"shape\": \"%s\", \"us\": %.3f, \"tflops\": %.3f, \"gbs\": %.3f}%s\n",
                   r.op.c_str(), r.shape.c_str(), r.us, tflops, gbs, i + 1 < bench.rows().size() ? "," : "");
    }
  }
  if (json) {
    std::fprintf(json, "]\n");
    std::fclose(json);
  }
  cudaStreamDestroy(stream);
  return 0;
}
