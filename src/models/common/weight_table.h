// The weight-name table of a model, checked at load, and the f32 copies the CPU path computes with.
//
// Each architecture lists every tensor it expects (name, shape, optional or not). check_weights() compares
// that list with the checkpoint and reports ALL problems in one Status: missing tensors, unexpected ones, and
// tensors whose shape differs, so a user fixing a broken conversion sees the whole picture at once.
// load_f32_weights() then copies the listed tensors into one 64-byte-aligned f32 buffer (upcasting f16 and
// bf16 exactly), so the mmap'd files can be closed and kernels see aligned, contiguous f32.
// Tests: tests/unit/models/weight_table_test.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mmserve::models {

struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool optional = false;
};

// Names matching one of these suffixes are tolerated when present but not listed (buffers that HF
// checkpoints sometimes carry, e.g. "position_ids").
struct WeightCheckOptions {
  std::vector<std::string> ignored_suffixes;
};

Status check_weights(const WeightStore& store, const std::vector<WeightSpec>& specs,
                     const WeightCheckOptions& options = {});

// f32 copies of the listed tensors, in one aligned allocation.
class F32Weights {
 public:
  // Copies every spec present in `store` (optional ones may be absent). Dtypes other than f32/f16/bf16 are
  // kUnimplemented, naming the tensor.
  static StatusOr<std::unique_ptr<F32Weights>> load(const WeightStore& store, const std::vector<WeightSpec>& specs);
  ~F32Weights();
  F32Weights(const F32Weights&) = delete;
  F32Weights& operator=(const F32Weights&) = delete;

  // The tensor, or an empty Tensor if it was optional and absent. Asking for an unlisted name is a bug.
  Tensor get(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  size_t bytes() const { return bytes_; }
  // Stores a derived tensor (e.g. q/k/v weights fused into one matrix) in memory owned by this object.
  Tensor add_owned(const std::string& name, const std::vector<int64_t>& shape);

 private:
  F32Weights() = default;
  float* buffer_ = nullptr;
  size_t bytes_ = 0;
  std::map<std::string, Tensor> index_;
  std::vector<std::unique_ptr<float[]>> owned_;
};

// "[2, 3]"
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace mmserve::models
