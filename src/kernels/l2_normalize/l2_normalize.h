// Row-wise L2 normalisation in place: x[i, :] /= ||x[i, :]||_2, as HF CLIP's `x / x.norm(dim=-1)`.
//
// Contract: x [rows, cols] f32 contiguous. A zero row stays zero (HF would produce NaN; we never emit NaN).
// The norm is accumulated in double so the result matches torch's f32 norm within 1 ulp-ish.
// Tests: l2_normalize_test.cpp; bench: l2_normalize_bench.cpp.
#pragma once

#include "core/tensor.h"

namespace mmserve::kernels {

void l2_normalize_rows(Tensor& x);

}  // namespace mmserve::kernels
