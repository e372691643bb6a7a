// The CUDA backend's core: errors as Status, the device arena, pinned buffers, streams. The error mapping
// runs everywhere (it needs no device); the rest skips, saying why, where no GPU is visible.
#include <gtest/gtest.h>

#include <cstring>

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_memory.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve {
namespace {

Status failing_call() {
  CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return ok_status();
}

TEST(CudaStatus, MapsErrorsToCodesAndNamesTheCall) {
  EXPECT_TRUE(cuda_status(cudaSuccess, "x", __FILE__, __LINE__).ok());
  const Status oom = cuda_status(cudaErrorMemoryAllocation, "cudaMalloc(big)", __FILE__, __LINE__);
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(oom.message().find("cudaMalloc(big)"), std::string::npos) << oom.message();
  const Status invalid = failing_call();
  EXPECT_EQ(invalid.code(), StatusCode::kInternal);
  EXPECT_NE(invalid.message().find("cudaErrorInvalidValue"), std::string::npos) << invalid.message();
  EXPECT_NE(invalid.message().find("cuda_test.cpp"), std::string::npos) << invalid.message();
  EXPECT_EQ(cublas_status(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul", __FILE__, __LINE__).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(cublas_status(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtCreate", __FILE__, __LINE__).code(),
            StatusCode::kResourceExhausted);
}

TEST(CudaDevice, AvailabilityHasAReason) {
  std::string reason;
  if (!cuda_device_available(&reason)) {
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(set_cuda_device(0).code(), StatusCode::kFailedPrecondition);
    GTEST_SKIP() << "GPU test skipped: " << reason;
  }
  EXPECT_TRUE(set_cuda_device(0).ok());
  EXPECT_EQ(set_cuda_device(4096).code(), StatusCode::kInvalidArgument);
}

TEST(DeviceArena, PlansAlignsAndRefusesOverflow) {
  MMSERVE_REQUIRE_GPU();
  DeviceArena arena;
  ASSERT_TRUE(arena.init(4096).ok());
  auto a = arena.allocate(10), b = arena.allocate(300);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % DeviceArena::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % DeviceArena::kAlignment, 0u);
  EXPECT_EQ(static_cast<char*>(*b) - static_cast<char*>(*a), 256);
  EXPECT_EQ(arena.used(), 256u + 512u);
  auto too_much = arena.allocate(4096);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.status().code(), StatusCode::kResourceExhausted);
  arena.reset();
  EXPECT_TRUE(arena.allocate(4096).ok());
  // A device allocation larger than any GPU is a Status, not a crash.
  DeviceArena huge;
  EXPECT_EQ(huge.init(size_t{1} << 50).code(), StatusCode::kResourceExhausted);
}

TEST(PinnedBufferAndStream, RoundTripAsynchronously) {
  MMSERVE_REQUIRE_GPU();
  CudaStream stream;
  ASSERT_TRUE(stream.init().ok());
  PinnedBuffer host;
  ASSERT_TRUE(host.init(1024 * sizeof(float)).ok());
  DeviceArena arena;
  ASSERT_TRUE(arena.init(1024 * sizeof(float)).ok());
  auto dev = arena.allocate_array<float>(1024);
  ASSERT_TRUE(dev.ok());
  for (int i = 0; i < 1024; ++i) host.data_as<float>()[i] = static_cast<float>(i);
  ASSERT_CUDA_OK(cudaMemcpyAsync(*dev, host.data(), 4096, cudaMemcpyHostToDevice, stream.get()));
  ASSERT_TRUE(stream.synchronize().ok());
  std::memset(host.data(), 0, 4096);
  ASSERT_CUDA_OK(cudaMemcpyAsync(host.data(), *dev, 4096, cudaMemcpyDeviceToHost, stream.get()));
  ASSERT_TRUE(stream.synchronize().ok());
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(host.data_as<float>()[i], static_cast<float>(i));
}

}  // namespace
}  // namespace mmserve
