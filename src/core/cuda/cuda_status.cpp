// CUDA errors as Status (see cuda_status.h).
#include "core/cuda/cuda_status.h"

#include <mutex>

namespace mmserve {

namespace {
std::string where(const char* what, const char* file, int line) {
  std::string f = file;
  const size_t slash = f.rfind("src/");
  if (slash != std::string::npos) f = f.substr(slash);
  return std::string(what) + " at " + f + ":" + std::to_string(line);
}
}  // namespace

Status cuda_status(cudaError_t error, const char* what, const char* file, int line) {
  if (error == cudaSuccess) return ok_status();
  const std::string message =
      where(what, file, line) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  if (error == cudaErrorMemoryAllocation) return resource_exhausted("GPU memory: " + message);
  return internal_error("CUDA: " + message);
}

// cublasGetStatusName lives in libcublas, which nothing else here needs: cuBLASLt's codes are named here.
const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

Status cublas_status(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return ok_status();
  const std::string message = where(what, file, line) + ": " + cublas_status_name(status) + " (" +
                              std::to_string(static_cast<int>(status)) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted("cuBLAS: " + message);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return unimplemented("cuBLAS: " + message);
  return internal_error("cuBLAS: " + message);
}

bool cuda_device_available(std::string* reason) {
  static std::once_flag once;
  static bool available = false;
  static std::string why;
  std::call_once(once, [] {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      why = std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(error) + ")";
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
    } else if (count == 0) {
      why = "no CUDA device visible";
    } else {
      available = true;
    }
  });
  if (reason) *reason = why;
  return available;
}

}  // namespace mmserve
