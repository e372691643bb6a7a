// Small element-wise ops that the encoders need between the big kernels.
//
// Contract: f32; `a` and `b` of the same shape unless stated; y may alias a.
//   add(a, b, y):            y = a + b
//   add_row(x, row, y):      y[i, :] = x[i, :] + row[:]   (x [rows, cols], row [cols]; position embeddings)
//   gather_rows(x, idx, y):  y[i, :] = x[idx[i], :]       (pooling: class token, EOS token)
// Tests: elementwise_test.cpp; bench: elementwise_bench.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmserve::kernels {

void add(const Tensor& a, const Tensor& b, Tensor& y);
void add_row(const Tensor& x, const Tensor& row, Tensor& y);
void gather_rows(const Tensor& x, const int64_t* indices, int64_t n, Tensor& y);

}  // namespace mmserve::kernels
