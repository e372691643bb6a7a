// Programmatic dependent launch (Hopper and later): a kernel started with launch_pdl may begin while the kernel
// before it on the stream is still finishing, so the launch, the ramp-up of its CTAs and whatever it does that
// depends on no earlier kernel (streaming its weights) overlap the tail of the one before. Inside a CUDA graph the
// edge is kept (captured as a programmatic edge). A decode step of a 16-32 layer decoder is ~10 short kernels per
// layer, each a few microseconds, where those gaps are a large share of the step.
//
// The contract a kernel launched with launch_pdl must keep: call pdl_wait() before it reads anything an earlier
// kernel of the stream wrote, and before it writes anything an earlier kernel reads; only immutable data (weights)
// may be touched before. pdl_wait() returns once the previous kernel has completed and its writes are visible
// (and that one waited for its own predecessor, so the chain is ordered transitively). pdl_trigger() tells the
// next PDL kernel it may start; without it, the next starts when this one exits. Both are no-ops for a kernel
// launched normally. Kernels that may run under launch_pdl call both, whichever way they are launched.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace mmserve::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap the previous kernel on `stream` as above.
// The legacy default stream (nullptr, the kernel tests) launches normally.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  if (stream == nullptr) {
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace mmserve::kernels
