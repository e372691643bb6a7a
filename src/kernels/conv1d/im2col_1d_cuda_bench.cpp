// Benchmark of im2col_1d_cuda() on Whisper large-v3's convolutions: conv1 (128 mel bins x 3000 frames, f32
// in, bf16 out) and conv2 (3000 frames x 1280 channels in bf16, stride 2), batch 1 and 16. Reported as
// achieved HBM GB/s (the input read once plus the [out_frames, channels * 3] matrix written).
// Run: kernels_cuda_bench (all CUDA kernels, see testing/cuda_bench_main.cpp).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "kernels/conv1d/im2col_1d_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {

void bench_im2col_1d_cuda(CudaBench& bench) {
  struct Shape {
    const char* what;
    bool channels_last;
    DType in_dtype;
    int64_t batch, channels, frames, stride;
  };
  const Shape shapes[] = {
      {"conv1", false, DType::kF32, 1, 128, 3000, 1},
      {"conv1", false, DType::kF32, 16, 128, 3000, 1},
      {"conv2", true, DType::kBF16, 1, 1280, 3000, 2},
      {"conv2", true, DType::kBF16, 16, 1280, 3000, 2},
  };
  for (const Shape& s : shapes) {
    const int64_t out_frames = im2col_1d_out_frames(s.frames, 3, s.stride, 1);
    void* in = device_random(s.in_dtype, s.batch * s.channels * s.frames, 7);
    void* out = nullptr;
    cudaMalloc(&out, static_cast<size_t>(s.batch * out_frames * s.channels * 3) * 2);
    Im2col1dArgs a;
    a.input = in;
    a.in_dtype = s.in_dtype;
    a.channels_last = s.channels_last;
    a.in_ld = s.channels;
    a.out = out;
    a.out_dtype = DType::kBF16;
    a.out_ld = s.channels * 3;
    a.batch = s.batch;
    a.channels = s.channels;
    a.frames = s.frames;
    a.stride = s.stride;
    const std::string shape = std::string(s.what) + " " + dtype_name(s.in_dtype) +
                              "->bf16 b=" + std::to_string(s.batch) + " c=" + std::to_string(s.channels) + " f=3000";
    if (in && out && im2col_1d_cuda(a, bench.stream()).ok()) {
      const double bytes = static_cast<double>(s.batch * s.channels * s.frames) * dtype_size(s.in_dtype) +
                           static_cast<double>(s.batch * out_frames * s.channels * 3) * 2;
      bench.run("im2col_1d", shape, 0, bytes, [&] { (void)im2col_1d_cuda(a, bench.stream()); });
    } else {
      std::fprintf(stderr, "im2col_1d %s: setup failed\n", shape.c_str());
    }
    cudaStreamSynchronize(bench.stream());
    cudaFree(in);
    cudaFree(out);
  }
  cudaGetLastError();
}

}  // namespace mmserve::kernels
