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
// log(sum_j exp(row[j])), max-subtracted, with the vectorised exp and a float sum (as torch's float32
// logsumexp): log_softmax(row)[j] = row[j] - log_sum_exp(row). -inf when every entry is -inf (or cols == 0);
// +inf entries give +inf; NaN propagates. Used per decoding step over a whole vocabulary row (51,866 floats for
// Whisper): ~39 us a row on one dev-box core where a scalar double exp loop takes ~181 us (softmax_bench.cpp).
float log_sum_exp(const float* row, int64_t cols);

}  // namespace mmserve::kernels
