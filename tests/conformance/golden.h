// Helpers for conformance tests: read goldens (safetensors written by tools/reference/) and compare.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "test_paths.h"

namespace mmserve::testing {

inline std::string fixture(const std::string& relative) {
  return std::string(MMSERVE_FIXTURES_DIR) + "/" + relative;
}

class Golden {
 public:
  explicit Golden(const std::string& path) {
    auto file = SafetensorsFile::open(path);
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    if (file.ok()) file_ = std::move(*file);
  }
  bool ok() const { return file_ != nullptr; }
  std::vector<int64_t> shape(const std::string& name) const { return info(name).shape; }
  std::vector<float> f32(const std::string& name) const {
    const TensorInfo& t = info(name);
    EXPECT_EQ(t.dtype, DType::kF32) << name;
    std::vector<float> out(static_cast<size_t>(t.numel()));
    std::memcpy(out.data(), t.data, t.nbytes);
    return out;
  }
  std::vector<int64_t> i64(const std::string& name) const {
    const TensorInfo& t = info(name);
    EXPECT_EQ(t.dtype, DType::kI64) << name;
    std::vector<int64_t> out(static_cast<size_t>(t.numel()));
    std::memcpy(out.data(), t.data, t.nbytes);
    return out;
  }
  std::vector<uint8_t> u8(const std::string& name) const {
    const TensorInfo& t = info(name);
    return std::vector<uint8_t>(t.data, t.data + t.nbytes);
  }
  const SafetensorsFile& file() const { return *file_; }

  // The unpadded rows of HF's `input_ids` (its `attention_mask` marks the real tokens).
  std::vector<std::vector<int32_t>> unpadded_ids() const {
    const std::vector<int64_t> ids = i64("input_ids"), mask = i64("attention_mask");
    const std::vector<int64_t> dims = shape("input_ids");
    std::vector<std::vector<int32_t>> rows(static_cast<size_t>(dims[0]));
    for (int64_t r = 0; r < dims[0]; ++r) {
      for (int64_t c = 0; c < dims[1]; ++c) {
        if (mask[r * dims[1] + c]) rows[r].push_back(static_cast<int32_t>(ids[r * dims[1] + c]));
      }
    }
    return rows;
  }

 private:
  const TensorInfo& info(const std::string& name) const {
    const TensorInfo* t = file_->find(name);
    if (t == nullptr) {
      ADD_FAILURE() << "golden tensor " << name << " missing";
      static TensorInfo empty;
      return empty;
    }
    return *t;
  }
  std::unique_ptr<SafetensorsFile> file_;
};

// max |a - b| / max |b|: the error relative to the tensor's scale (robust to entries near zero).
// The smallest cosine similarity between matching rows of `dim` floats (1 for identical directions).
inline double min_row_cosine(const std::vector<float>& a, const std::vector<float>& b, int64_t dim) {
  double worst = 1.0;
  for (size_t r = 0; r + dim <= a.size() && r + dim <= b.size(); r += dim) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < dim; ++i) {
      dot += static_cast<double>(a[r + i]) * b[r + i];
      na += static_cast<double>(a[r + i]) * a[r + i];
      nb += static_cast<double>(b[r + i]) * b[r + i];
    }
    worst = std::min(worst, dot / std::sqrt(na * nb + 1e-30));
  }
  return worst;
}

inline double relative_error(const float* a, const float* b, size_t n) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
  }
  return max_ref == 0.0 ? max_diff : max_diff / max_ref;
}

inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return relative_error(a.data(), b.data(), std::min(a.size(), b.size()));
}

// max |got - want| over `rows` rows of `width`, each relative to its row's largest |want| (at least 1): the logit
// bound of the decoder conformance tests.
inline float worst_relative_error(const float* got, const float* want, int64_t rows, int64_t width) {
  float worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float scale = 1.0f, err = 0.0f;
    for (int64_t v = 0; v < width; ++v) scale = std::max(scale, std::fabs(want[r * width + v]));
    for (int64_t v = 0; v < width; ++v) err = std::max(err, std::fabs(got[r * width + v] - want[r * width + v]));
    worst = std::max(worst, err / scale);
  }
  return worst;
}

}  // namespace mmserve::testing
