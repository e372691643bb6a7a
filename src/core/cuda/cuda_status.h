// CUDA and cuBLAS errors as Status: every runtime and library call of the CUDA backend goes through these.
//
// A CUDA error is never something a request can cause (inputs are validated on the host before anything is
// launched), so every code maps to kInternal, except out-of-memory, which maps to kResourceExhausted so the
// server can refuse a model load that does not fit instead of crashing. The message names the call and the
// file:line, which is what one needs from a failure on a machine one cannot log into.
// Tests: tests/unit/core/cuda_test.cpp.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"

namespace mmserve {

Status cuda_status(cudaError_t error, const char* what, const char* file, int line);
Status cublas_status(cublasStatus_t status, const char* what, const char* file, int line);

// True when at least one CUDA device can be used (driver present, device visible). Cached after the first
// call. `reason` (optional) says why not, for the message of a skipped test or a refused `device: cuda`.
bool cuda_device_available(std::string* reason = nullptr);

}  // namespace mmserve

#define CUDA_RETURN_IF_ERROR(call)                                                                               \
  do {                                                                                                           \
    cudaError_t _mm_cuda_error = (call);                                                                         \
    if (_mm_cuda_error != cudaSuccess) return ::mmserve::cuda_status(_mm_cuda_error, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(call)                                                 \
  do {                                                                               \
    cublasStatus_t _mm_cublas_status = (call);                                       \
    if (_mm_cublas_status != CUBLAS_STATUS_SUCCESS)                                  \
      return ::mmserve::cublas_status(_mm_cublas_status, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad launch configuration is reported by cudaGetLastError.
#define CUDA_RETURN_IF_LAUNCH_ERROR() CUDA_RETURN_IF_ERROR(cudaGetLastError())
