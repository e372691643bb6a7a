// Tensor: a non-owning view of a strided array (data pointer, dtype, shape, strides in elements, device).
//
// Who owns the bytes is always someone else: an mmap'd safetensors file, an Arena, a std::vector in a test.
// Views are cheap to copy and never allocate, so kernels take them by value or const reference. Up to
// kMaxDims dimensions; strides default to contiguous row-major.
// Tests: tests/unit/core/tensor_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda", "cuda:N".
StatusOr<Device> parse_device(const std::string& text);

class Tensor {
 public:
  static constexpr int kMaxDims = 6;

  Tensor() = default;
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::cpu());
  Tensor(void* data, DType dtype, const std::vector<int64_t>& shape, Device device = Device::cpu());

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int dims() const { return dims_; }
  int64_t size(int dim) const { return shape_[normalize_dim(dim)]; }
  int64_t stride(int dim) const { return strides_[normalize_dim(dim)]; }
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + dims_}; }
  int64_t numel() const;
  size_t nbytes() const { return storage_bytes(dtype_, numel()); }
  bool is_contiguous() const;
  bool empty() const { return data_ == nullptr; }
  std::string shape_string() const;  // "[2, 3, 4]"

  // Same bytes, new shape (must be contiguous and have the same element count).
  Tensor reshape(std::initializer_list<int64_t> shape) const;
  Tensor reshape(const std::vector<int64_t>& shape) const;
  // Rows [begin, end) of dimension 0, still a view.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Columns [begin, end) of the last dimension, keeping the other strides (e.g. q, k, v as slices of one
  // fused [rows, 3 * hidden] projection).
  Tensor slice_cols(int64_t begin, int64_t end) const;

 private:
  int normalize_dim(int dim) const;
  void set_contiguous_strides();

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_;
  int dims_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

}  // namespace mmserve
