// Numerically stable softmax over the last dimension (max-subtracted), in place.
//
// Contract: x [rows, cols] f32 contiguous. A row whose entries are all -inf (fully masked) becomes all
// zeros rather than NaN, so callers never propagate NaN from masking.
// Tests: softmax_test.cpp; bench: softmax_bench.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmserve::kernels {

void softmax_rows(Tensor& x);
// Same on a raw row (used inside attention).
void softmax_row(float* row, int64_t cols);

}  // namespace mmserve::kernels
