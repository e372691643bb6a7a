// GPU memory and streams with owners: DeviceArena, PinnedBuffer, CudaStream, CudaEvent.
//
// DeviceArena is the CUDA twin of core/arena.h: one cudaMalloc of a planned size, bump-pointer
// sub-allocations (256-byte aligned, what cuBLASLt and 16-byte vector loads want), never freed one by one.
// An executor plans its weights and its largest bucket's activations up front and takes them from arenas,
// so nothing on the hot path allocates and a CUDA graph's pointers stay valid for the life of the executor.
// PinnedBuffer is page-locked host memory, the staging area that makes host<->device copies asynchronous.
// All of these report failures as Status (cuda_status.h); destructors never throw or abort.
// Tests: tests/unit/core/cuda_test.cpp (skipped, with the reason, where no GPU is visible).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cuda/cuda_status.h"
#include "core/status.h"

namespace mmserve {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // One cudaMalloc of `capacity_bytes` on the current device (frees an earlier one: earlier pointers die).
  Status init(size_t capacity_bytes);
  // A sub-allocation; kResourceExhausted (naming the sizes) when the plan was too small.
  StatusOr<void*> allocate(size_t bytes);
  template <typename T>
  StatusOr<T*> allocate_array(int64_t count) {
    ASSIGN_OR_RETURN(void* p, allocate(static_cast<size_t>(count) * sizeof(T)));
    return static_cast<T*>(p);
  }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  static size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status init(size_t bytes);
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  Status init();  // a non-blocking stream (does not synchronise with the legacy default stream)
  cudaStream_t get() const { return stream_; }
  Status synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  Status init();
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Selects `index` as the calling thread's device, with a clear error when it does not exist.
Status set_cuda_device(int index);

}  // namespace mmserve
