// The CUDA side of the topology (see topology.h): the GPUs CUDA sees, cudaDeviceCanAccessPeer for every ordered
// pair, and the measured copy bandwidth matrix. Compiled in every build; without MMSERVE_HAS_CUDA the functions
// only record why there is nothing. Nothing here enables peer access permanently or touches NVLink multicast:
// peer access is enabled for one copy and disabled again, so the engine's own choices are not changed.
// Tests: tests/unit/core/topology_gpu_test.cpp (skipped without a GPU), tests/unit/core/topology_test.cpp.
#include "core/cuda/topology.h"

#ifdef MMSERVE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_status.h"
#endif

namespace mmserve {

#ifndef MMSERVE_HAS_CUDA

void discover_cuda(Topology& t) {
  t.p2p_reason = "built without CUDA";
}

void measure_copy_bandwidth(Topology& t, uint64_t bandwidth_bytes) {
  t.bandwidth_bytes = bandwidth_bytes;
  t.bandwidth_reason = bandwidth_bytes == 0 ? "skipped (bandwidth measurement off)" : "built without CUDA";
}

#else

namespace {

std::string cuda_error_text(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

// One timed copy of `bytes` from GPU src to GPU dst (a device-local copy when equal), after one untimed warm-up.
StatusOr<double> copy_gbps(int src, int dst, uint64_t bytes) {
  void* from = nullptr;
  void* to = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  bool peer_enabled = false;
  auto cleanup = [&] {
    if (begin) cudaEventDestroy(begin);
    if (end) cudaEventDestroy(end);
    if (stream) cudaStreamDestroy(stream);
    if (from) {
      cudaSetDevice(src);
      cudaFree(from);
    }
    if (to) {
      cudaSetDevice(dst);
      cudaFree(to);
    }
    if (peer_enabled) {
      cudaSetDevice(src);
      cudaDeviceDisablePeerAccess(dst);
    }
    cudaGetLastError();  // leave no sticky-free error behind for the engine
  };
  auto fail = [&](const char* call, cudaError_t e) -> Status {
    cleanup();
    return internal_error("GPU " + std::to_string(src) + "->" + std::to_string(dst) + ": " + cuda_error_text(call, e));
  };
  cudaError_t e;
  if ((e = cudaSetDevice(dst)) != cudaSuccess) return fail("cudaSetDevice", e);
  if ((e = cudaMalloc(&to, bytes)) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaSetDevice(src)) != cudaSuccess) return fail("cudaSetDevice", e);
  if ((e = cudaMalloc(&from, bytes)) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaMemset(from, 1, bytes)) != cudaSuccess) return fail("cudaMemset", e);
  if (src != dst) {
    int can = 0;
    cudaDeviceCanAccessPeer(&can, src, dst);
    if (can) {
      e = cudaDeviceEnablePeerAccess(dst, 0);
      if (e == cudaSuccess) peer_enabled = true;                       // disabled again in cleanup
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();  // someone else's: leave it on
    }
  }
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) return fail("stream", e);
  if ((e = cudaEventCreate(&begin)) != cudaSuccess) return fail("cudaEventCreate", e);
  if ((e = cudaEventCreate(&end)) != cudaSuccess) return fail("cudaEventCreate", e);
  if ((e = cudaMemcpyPeerAsync(to, dst, from, src, bytes, stream)) != cudaSuccess) return fail("warm-up copy", e);
  if ((e = cudaEventRecord(begin, stream)) != cudaSuccess) return fail("cudaEventRecord", e);
  if ((e = cudaMemcpyPeerAsync(to, dst, from, src, bytes, stream)) != cudaSuccess) {
    return fail("cudaMemcpyPeerAsync", e);
  }
  if ((e = cudaEventRecord(end, stream)) != cudaSuccess) return fail("cudaEventRecord", e);
  if ((e = cudaEventSynchronize(end)) != cudaSuccess) return fail("cudaEventSynchronize", e);
  float ms = 0.0f;
  if ((e = cudaEventElapsedTime(&ms, begin, end)) != cudaSuccess) return fail("cudaEventElapsedTime", e);
  cleanup();
  if (!(ms > 0.0f)) return internal_error("copy time was not measurable");
  return static_cast<double>(bytes) / (ms / 1000.0) / (1024.0 * 1024.0 * 1024.0);
}

}  // namespace

void discover_cuda(Topology& t) {
  std::string reason;
  if (!cuda_device_available(&reason)) {
    t.p2p_reason = reason;
    t.gpus_reason = reason;
    return;
  }
  int count = 0;
  cudaGetDeviceCount(&count);
  int current = 0;
  cudaGetDevice(&current);
  for (int i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    cudaDeviceProp prop{};
    if (cudaError_t e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
      t.errors.push_back(cuda_error_text("cudaGetDeviceProperties", e));
      cudaGetLastError();
    } else {
      gpu.name = prop.name;
      gpu.memory_total_bytes = prop.totalGlobalMem;
    }
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) gpu.pci_bus_id = normalize_pci_bus_id(bus);
    t.gpus.push_back(gpu);
  }
  t.p2p.assign(static_cast<size_t>(count), std::vector<bool>(static_cast<size_t>(count), false));
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      int can = 0;
      if (i == j) {
        can = 1;
      } else if (cudaError_t e = cudaDeviceCanAccessPeer(&can, i, j); e != cudaSuccess) {
        t.errors.push_back(cuda_error_text("cudaDeviceCanAccessPeer", e));
        cudaGetLastError();
      }
      t.p2p[static_cast<size_t>(i)][static_cast<size_t>(j)] = can != 0;
    }
  }
  cudaSetDevice(current);
}

void measure_copy_bandwidth(Topology& t, uint64_t bandwidth_bytes) {
  t.bandwidth_bytes = bandwidth_bytes;
  if (bandwidth_bytes == 0) {
    t.bandwidth_reason = "skipped (bandwidth measurement off)";
    return;
  }
  if (t.p2p.empty()) {
    t.bandwidth_reason = t.p2p_reason.empty() ? "no GPU visible to CUDA" : t.p2p_reason;
    return;
  }
  int current = 0;
  cudaGetDevice(&current);
  const size_t n = t.p2p.size();
  t.bandwidth_gbps.assign(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      StatusOr<double> gbps = copy_gbps(static_cast<int>(i), static_cast<int>(j), bandwidth_bytes);
      if (gbps.ok()) {
        t.bandwidth_gbps[i][j] = *gbps;
      } else {
        t.errors.push_back("bandwidth " + gbps.status().message());
      }
    }
  }
  cudaSetDevice(current);
}

#endif

}  // namespace mmserve
