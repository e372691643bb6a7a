// GPU memory and streams with owners (see device_memory.h).
#include "core/cuda/device_memory.h"

#include <string>

namespace mmserve {

DeviceArena::~DeviceArena() {
  if (base_) cudaFree(base_);
}

Status DeviceArena::init(size_t capacity_bytes) {
  if (base_) {
    cudaFree(base_);
    base_ = nullptr;
  }
  capacity_ = 0;
  used_ = 0;
  if (capacity_bytes == 0) return ok_status();
  void* p = nullptr;
  const cudaError_t error = cudaMalloc(&p, capacity_bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(error, ("cudaMalloc(" + std::to_string(capacity_bytes) + " bytes)").c_str(), __FILE__, __LINE__);
  }
  base_ = static_cast<uint8_t*>(p);
  capacity_ = capacity_bytes;
  return ok_status();
}

StatusOr<void*> DeviceArena::allocate(size_t bytes) {
  const size_t need = aligned(bytes);
  if (used_ + need > capacity_) {
    return resource_exhausted("device arena: " + std::to_string(bytes) + " bytes requested, " +
                              std::to_string(capacity_ - used_) + " of " + std::to_string(capacity_) + " left");
  }
  void* p = base_ + used_;
  used_ += need;
  return p;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

Status PinnedBuffer::init(size_t bytes) {
  if (data_) {
    cudaFreeHost(data_);
    data_ = nullptr;
    size_ = 0;
  }
  if (bytes == 0) return ok_status();
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&data_, bytes));
  size_ = bytes;
  return ok_status();
}

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaStream::init() {
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  return ok_status();
}

Status CudaStream::synchronize() const {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return ok_status();
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

Status CudaEvent::init() {
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&event_));
  return ok_status();
}

Status set_cuda_device(int index) {
  std::string reason;
  if (!cuda_device_available(&reason))
    return failed_precondition("device cuda:" + std::to_string(index) + ": " + reason);
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (index < 0 || index >= count) {
    return invalid_argument("device cuda:" + std::to_string(index) + " does not exist (" + std::to_string(count) +
                            " CUDA device(s) visible)");
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  return ok_status();
}

}  // namespace mmserve
