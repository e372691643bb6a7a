// Tensor view bookkeeping: shapes, strides, reshapes and slices.
#include "core/tensor.h"

#include <cstdlib>

namespace mmserve {

std::string Device::to_string() const {
  return kind == DeviceKind::kCpu ? "cpu" : "cuda:" + std::to_string(index);
}

StatusOr<Device> parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    const std::string digits = text.substr(5);
    if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 4) {
      return Device::cuda(std::atoi(digits.c_str()));
    }
  }
  return invalid_argument("unknown device '" + text + "' (expected cpu, cuda or cuda:N)");
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : Tensor(data, dtype, std::vector<int64_t>(shape), device) {}

Tensor::Tensor(void* data, DType dtype, const std::vector<int64_t>& shape, Device device)
    : data_(data), dtype_(dtype), device_(device), dims_(static_cast<int>(shape.size())) {
  MMSERVE_CHECK(dims_ <= kMaxDims, "too many dimensions");
  for (int i = 0; i < dims_; ++i) {
    MMSERVE_CHECK(shape[i] >= 0, "negative dimension");
    shape_[i] = shape[i];
  }
  set_contiguous_strides();
}

void Tensor::set_contiguous_strides() {
  int64_t stride = 1;
  for (int i = dims_ - 1; i >= 0; --i) {
    strides_[i] = stride;
    stride *= shape_[i];
  }
}

int Tensor::normalize_dim(int dim) const {
  if (dim < 0) dim += dims_;
  MMSERVE_CHECK(dim >= 0 && dim < dims_, "dimension out of range");
  return dim;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < dims_; ++i) n *= shape_[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t stride = 1;
  for (int i = dims_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != stride) return false;
    stride *= shape_[i];
  }
  return true;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < dims_; ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  return reshape(std::vector<int64_t>(shape));
}

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const {
  MMSERVE_CHECK(is_contiguous(), "reshape of a non-contiguous view");
  Tensor t(data_, dtype_, shape, device_);
  MMSERVE_CHECK(t.numel() == numel(), "reshape changes the element count");
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  MMSERVE_CHECK(dims_ >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "bad row slice");
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + storage_bytes(dtype_, begin * strides_[0]);
  return t;
}

Tensor Tensor::slice_cols(int64_t begin, int64_t end) const {
  MMSERVE_CHECK(dims_ >= 1 && begin >= 0 && begin <= end && end <= shape_[dims_ - 1], "bad column slice");
  Tensor t = *this;
  t.shape_[dims_ - 1] = end - begin;
  t.data_ = static_cast<char*>(data_) + storage_bytes(dtype_, begin * strides_[dims_ - 1]);
  return t;
}

}  // namespace mmserve
