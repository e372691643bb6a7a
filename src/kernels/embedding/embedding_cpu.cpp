// Embedding lookup on CPU: a row copy (or add) per id, rows in parallel.
//
// Ids are checked up front on the calling thread, so a bad id aborts with a clear message before any
// output is written (callers validate user-supplied token ids; here a bad one is a programmer error).
// Tests: embedding_test.cpp (copy, accumulate, strided out, bad id aborts); bench: embedding_bench.cpp.
#include <algorithm>
#include <string>

#include "kernels/common/parallel.h"
#include "kernels/embedding/embedding.h"

namespace mmserve::kernels {

void embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out, bool accumulate) {
  MMSERVE_CHECK(table.dtype() == DType::kF32 && out.dtype() == DType::kF32, "embedding: f32 only");
  MMSERVE_CHECK(table.dims() == 2 && table.is_contiguous(), "embedding: table must be [vocab, dim] contiguous");
  MMSERVE_CHECK(out.dims() == 2 && out.stride(1) == 1, "embedding: out must be [n, dim] with contiguous rows");
  const int64_t vocab = table.size(0), dim = table.size(1);
  MMSERVE_CHECK(out.size(0) == n && out.size(1) == dim, "embedding: out is " + out.shape_string());
  for (int64_t i = 0; i < n; ++i) {
    MMSERVE_CHECK(ids[i] >= 0 && ids[i] < vocab, "embedding: id " + std::to_string(ids[i]) + " at position " +
                                                     std::to_string(i) + " outside [0, " + std::to_string(vocab) + ")");
  }
  const float* rows = table.data_as<float>();
  float* dst = out.data_as<float>();
  const int64_t ldo = out.stride(0);
#pragma omp parallel for schedule(static) num_threads(parallel_threads(n* dim))
  for (int64_t i = 0; i < n; ++i) {
    const float* src = rows + static_cast<int64_t>(ids[i]) * dim;
    float* row = dst + i * ldo;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) row[j] += src[j];
    } else {
      std::copy(src, src + dim, row);
    }
  }
}

}  // namespace mmserve::kernels
