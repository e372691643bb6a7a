// Tests of embedding(): exact row copies, accumulation onto existing rows (token + position), strided
// output rows, and the abort on an id outside the table.
#include "kernels/embedding/embedding.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(EmbeddingTest, LookupCopiesRowsExactly) {
  const int64_t vocab = 101, dim = 33, n = 77;
  std::vector<float> table = random_floats(vocab * dim, 1);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % vocab);
  ids[3] = 0;
  ids[4] = vocab - 1;
  std::vector<float> out(n * dim, -1.0f);
  const Tensor tt(table.data(), DType::kF32, {vocab, dim});
  Tensor ot(out.data(), DType::kF32, {n, dim});
  embedding(tt, ids.data(), n, ot);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) ASSERT_EQ(out[i * dim + j], table[ids[i] * dim + j]);
  }
}

TEST(EmbeddingTest, AccumulateAddsToOut) {
  const int64_t vocab = 50, dim = 512, n = 77;  // parallel path
  std::vector<float> table = random_floats(vocab * dim, 11);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7) % vocab);
  std::vector<float> out = random_floats(n * dim, 12);
  const std::vector<float> before = out;
  const Tensor tt(table.data(), DType::kF32, {vocab, dim});
  Tensor ot(out.data(), DType::kF32, {n, dim});
  embedding(tt, ids.data(), n, ot, /*accumulate=*/true);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) ASSERT_EQ(out[i * dim + j], before[i * dim + j] + table[ids[i] * dim + j]);
  }
}

TEST(EmbeddingTest, StridedOutputRows) {
  const int64_t vocab = 9, dim = 5, n = 4, ld = 8;
  std::vector<float> table = random_floats(vocab * dim, 21);
  std::vector<int32_t> ids = {8, 0, 3, 3};
  std::vector<float> out(n * ld, 42.0f);
  const Tensor tt(table.data(), DType::kF32, {vocab, dim});
  Tensor ot = Tensor(out.data(), DType::kF32, {n, ld}).slice_cols(0, dim);
  embedding(tt, ids.data(), n, ot);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(out[i * ld + j], table[ids[i] * dim + j]);
    for (int64_t j = dim; j < ld; ++j) EXPECT_EQ(out[i * ld + j], 42.0f);
  }
}

TEST(EmbeddingTest, IdOutsideTheTableAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> table(size_t{4} * 3, 0.0f), out(size_t{2} * 3);
  const Tensor tt(table.data(), DType::kF32, {4, 3});
  Tensor ot(out.data(), DType::kF32, {2, 3});
  const std::vector<int32_t> too_big = {1, 4};
  EXPECT_DEATH(embedding(tt, too_big.data(), 2, ot), "id 4 at position 1");
  const std::vector<int32_t> negative = {-1, 0};
  EXPECT_DEATH(embedding(tt, negative.data(), 2, ot), "id -1");
}

}  // namespace
}  // namespace mmserve::kernels
