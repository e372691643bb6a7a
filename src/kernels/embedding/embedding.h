// Embedding lookup: out[i, :] = table[ids[i], :] (+ out[i, :] when accumulate, for adding positions).
//
// Contract: table [vocab, dim] f32 contiguous, ids [n] int32 with 0 <= id < vocab (callers validate ids
// that come from users; out-of-range here is a programmer error and aborts), out [n, dim] f32.
// Tests: embedding_test.cpp; bench: embedding_bench.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmserve::kernels {

void embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out, bool accumulate = false);

}  // namespace mmserve::kernels
