// Test-only helpers for the CUDA kernels: skip (visibly) without a GPU, move vectors to and from the
// device, convert to and from the 16-bit types the kernels compute in.
//
// Every CUDA kernel test compares against the kernel's CPU twin on the same inputs, over odd shapes.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "core/dtype.h"

// First line of every GPU test: without a usable GPU the test is reported as SKIPPED with the reason (ctest
// counts it as skipped, never as passed).
#define MMSERVE_REQUIRE_GPU()                                                                               \
  do {                                                                                                      \
    std::string _mm_reason;                                                                                 \
    if (!::mmserve::cuda_device_available(&_mm_reason)) GTEST_SKIP() << "GPU test skipped: " << _mm_reason; \
  } while (0)

#define ASSERT_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace mmserve::kernels::cuda_test {

// A device allocation owned by a test; freed at scope exit.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(size_t count) : count_(count) {
    void* p = nullptr;
    if (count_ > 0 && cudaMalloc(&p, count_ * sizeof(T)) == cudaSuccess) data_ = static_cast<T*>(p);
  }
  explicit DeviceVector(const std::vector<T>& host) : DeviceVector(host.size()) { upload(host); }
  ~DeviceVector() {
    if (data_) cudaFree(data_);
  }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* get() const { return data_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    if (data_) cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (data_) cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// f32 values -> the bit patterns of `dtype` (f32, f16 or bf16) as raw 16/32-bit words in a byte vector.
inline std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The inverse of encode(): raw words of `dtype` -> f32.
inline std::vector<float> decode(const std::vector<uint8_t>& bytes, DType dtype) {
  const size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> out(n);
  convert_to_f32(dtype, bytes.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

// Values rounded through `dtype` (what the GPU sees when a test feeds it f32 data converted to dtype), so a
// CPU reference can be computed from exactly the same inputs.
inline std::vector<float> round_through(const std::vector<float>& values, DType dtype) {
  return decode(encode(values, dtype), dtype);
}


// Guards for out-of-bounds writes: the value sits around every test array (exact in f32, f16 and bf16, and far
// from anything the kernels under test produce from their inputs).
constexpr float kSentinel = 768.0f;
constexpr int64_t kGuard = 8;  // sentinel elements after each array

// `values` in `dtype` on the device, `shift` elements past the (256-byte aligned) start of the allocation,
// with sentinels before and kGuard after; download() checks them, so writes out of bounds show up.
class DeviceArray {
 public:
  DeviceArray(const std::vector<float>& values, DType dtype, int64_t shift)
      : dtype_(dtype),
        shift_(shift),
        count_(static_cast<int64_t>(values.size())),
        bytes_(padded(values, dtype, shift)) {}
  void* data() const { return bytes_.get() == nullptr ? nullptr : bytes_.get() + shift_ * dtype_size(dtype_); }
  bool allocated() const { return bytes_.get() != nullptr; }
  std::vector<float> download() const {
    const std::vector<float> all = cuda_test::decode(bytes_.download(), dtype_);
    for (int64_t i = 0; i < shift_; ++i) EXPECT_EQ(all[i], kSentinel) << "written before the start";
    for (int64_t i = shift_ + count_; i < static_cast<int64_t>(all.size()); ++i) {
      EXPECT_EQ(all[i], kSentinel) << "written past the end";
    }
    return {all.begin() + shift_, all.begin() + shift_ + count_};
  }

 private:
  static std::vector<uint8_t> padded(const std::vector<float>& values, DType dtype, int64_t shift) {
    std::vector<float> all(shift, kSentinel);
    all.insert(all.end(), values.begin(), values.end());
    all.insert(all.end(), kGuard, kSentinel);
    return cuda_test::encode(all, dtype);
  }

  DType dtype_;
  int64_t shift_, count_;
  DeviceVector<uint8_t> bytes_;
};

}  // namespace mmserve::kernels::cuda_test
