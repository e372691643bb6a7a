// The logical form of one linear's 4-bit weight (W4A16, issue 17): what every checkpoint format unpacks into
// (models/quant/int4_checkpoint.h: AWQ GEMM, GPTQ v1/v2), what `mmserve quantize` writes from, and what the CUDA
// kernel's packer (kernels/w4a16) takes. Plain data on purpose: nothing here but <cstdint> and <vector>, so the
// kernel side can include it without the model library.
// Tests: tests/unit/models/quant_format_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace mmserve::models {

// One linear's 4-bit weight, HF orientation: out_features N rows, in_features K columns; W[n][k] = (q - zero) * scale
// with group g = perm.empty() ? k / group_size : group of k (act-order, see perm).
// (`perm` above is g_idx below: the group of input column k is g_idx[k] when g_idx is not empty.)
struct Int4Weight {
  int64_t n = 0, k = 0, group_size = 0;   // group_size == k for GPTQ's -1
  std::vector<uint8_t> q;                 // [n * k], 0..15, row n at q[n * k]
  std::vector<float> scales;              // [n * groups], groups = k / group_size
  std::vector<uint8_t> zeros;             // [n * groups], 0..15 (GPTQ v1 already +1; symmetric: 8)
  std::vector<int32_t> g_idx;             // empty, or [k]: group of input column k (GPTQ desc_act)
  int64_t groups() const { return k / group_size; }
};

}  // namespace mmserve::models
