// Tests of token_position_embedding_cuda() against its CPU twin (embedding() then add() of the positions
// repeated over the batch) on the same table and positions (rounded through the dtype, as stored on the
// GPU), for every dtype, over odd hidden sizes (packs of 4 and the scalar path), misaligned pointers, a
// positions table longer than seq, ids outside [0, vocab) (which must read row 0, not crash), and broken
// arguments (rejected before any launch). Skipped, with the reason, where no GPU is visible.
//
// Tolerance: none. Both sides convert each stored value to f32 exactly and add two of them with one f32
// rounding, so the results must be bit-identical.
#include "kernels/embedding/embedding_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

using cuda_test::DeviceArray;
using cuda_test::kGuard;
using cuda_test::kSentinel;

struct EmbeddingCudaCase {
  DType dtype = DType::kBF16;
  int64_t batch = 0, seq = 0, vocab = 0, hidden = 0;
  int64_t shift = 0;  // elements past 16-byte alignment, for table, positions and x
};

void check_embedding(const EmbeddingCudaCase& c, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " batch=" + std::to_string(c.batch) +
               " seq=" + std::to_string(c.seq) + " vocab=" + std::to_string(c.vocab) +
               " hidden=" + std::to_string(c.hidden) + " shift=" + std::to_string(c.shift));
  const int64_t tokens = c.batch * c.seq, position_rows = c.seq + 2;  // only the first seq rows are read
  const std::vector<float> table = cuda_test::round_through(random_floats(c.vocab * c.hidden, seed), c.dtype);
  const std::vector<float> positions =
      cuda_test::round_through(random_floats(position_rows * c.hidden, seed + 1), c.dtype);
  std::vector<int32_t> ids(tokens);
  for (int64_t i = 0; i < tokens; ++i) ids[i] = static_cast<int32_t>((i * 7919 + seed) % c.vocab);
  // Out of range ids, which the kernel must map to row 0.
  const int32_t bad_ids[] = {-1, static_cast<int32_t>(c.vocab), std::numeric_limits<int32_t>::max(),
                             std::numeric_limits<int32_t>::min()};
  for (size_t k = 0; k < std::size(bad_ids) && k < ids.size(); ++k) ids[(k * 5 + 1) % ids.size()] = bad_ids[k];
  std::vector<int32_t> clamped = ids;
  for (int32_t& id : clamped) {
    if (id < 0 || id >= c.vocab) id = 0;
  }

  // The CPU twin: rows of the table, plus each token's position row.
  std::vector<float> want(tokens * c.hidden), position_of_token(tokens * c.hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(positions.begin() + (t % c.seq) * c.hidden, c.hidden, position_of_token.begin() + t * c.hidden);
  }
  {
    const Tensor tt(const_cast<float*>(table.data()), DType::kF32, {c.vocab, c.hidden});
    Tensor wt(want.data(), DType::kF32, {tokens, c.hidden});
    embedding(tt, clamped.data(), tokens, wt);
    const Tensor pt(position_of_token.data(), DType::kF32, {tokens, c.hidden});
    add(wt, pt, wt);
  }

  const DeviceArray dt(table, c.dtype, c.shift), dp(positions, c.dtype, c.shift);
  const DeviceArray dx(std::vector<float>(tokens * c.hidden, kSentinel), DType::kF32, c.shift);
  const DeviceVector<int32_t> di(ids);
  ASSERT_TRUE(dt.allocated() && dp.allocated() && dx.allocated() && di.get() != nullptr);
  const Status status = token_position_embedding_cuda(di.get(), c.batch, c.seq, dt.data(), dp.data(), c.dtype, c.vocab,
                                                      c.hidden, static_cast<float*>(dx.data()), nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dx.download();
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < tokens * c.hidden; ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first at token " << first / c.hidden << " (id "
                           << (first >= 0 ? ids[first / c.hidden] : 0) << ") column " << first % c.hidden << ": got "
                           << (first >= 0 ? got[first] : 0.0f) << ", cpu " << (first >= 0 ? want[first] : 0.0f);
}

TEST(EmbeddingCudaTest, OddShapesEveryDtype) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden : {1, 7, 64, 768, 1000, 3072}) {
      for (const auto& [batch, seq] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {2, 77}}) {
        check_embedding({dtype, batch, seq, /*vocab=*/37, hidden}, seed += 3);
      }
    }
  }
}

TEST(EmbeddingCudaTest, MisalignedPointersUseScalarPath) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden : {7, 64, 512, 1000}) check_embedding({dtype, 3, 17, 37, hidden, /*shift=*/1}, seed += 3);
  }
}

TEST(EmbeddingCudaTest, ClipTextShape) {
  MMSERVE_REQUIRE_GPU();
  check_embedding({DType::kBF16, /*batch=*/32, /*seq=*/77, /*vocab=*/4096, /*hidden=*/512}, 201);
  check_embedding({DType::kF16, 32, 77, 4096, 768}, 202);
}

TEST(EmbeddingCudaTest, EmptyBatchIsANoOp) {
  MMSERVE_REQUIRE_GPU();
  const Status status =
      token_position_embedding_cuda(nullptr, 0, 77, nullptr, nullptr, DType::kBF16, 49408, 512, nullptr, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(EmbeddingCudaTest, BrokenArgumentsAreRejectedWithoutLaunching) {
  MMSERVE_REQUIRE_GPU();
  const int64_t batch = 2, seq = 5, vocab = 11, hidden = 64;
  const DeviceArray dt(random_floats(vocab * hidden, 301), DType::kBF16, 0);
  const DeviceArray dp(random_floats(seq * hidden, 302), DType::kBF16, 0);
  const DeviceArray dx(std::vector<float>(batch * seq * hidden, kSentinel), DType::kF32, 0);
  const DeviceVector<int32_t> di(std::vector<int32_t>(batch * seq, 3));
  const int32_t* ids = di.get();
  const void* table = dt.data();
  const void* positions = dp.data();
  float* x = static_cast<float*>(dx.data());
  auto run = [&](const int32_t* i, int64_t b, int64_t s, const void* t, const void* p, DType d, int64_t v, int64_t h,
                 float* out) { return token_position_embedding_cuda(i, b, s, t, p, d, v, h, out, nullptr); };
  EXPECT_FALSE(run(nullptr, batch, seq, table, positions, DType::kBF16, vocab, hidden, x).ok()) << "null ids";
  EXPECT_FALSE(run(ids, batch, seq, nullptr, positions, DType::kBF16, vocab, hidden, x).ok()) << "null table";
  EXPECT_FALSE(run(ids, batch, seq, table, nullptr, DType::kBF16, vocab, hidden, x).ok()) << "null positions";
  EXPECT_FALSE(run(ids, batch, seq, table, positions, DType::kBF16, vocab, hidden, nullptr).ok()) << "null x";
  EXPECT_FALSE(run(ids, -1, seq, table, positions, DType::kBF16, vocab, hidden, x).ok()) << "negative batch";
  EXPECT_FALSE(run(ids, batch, seq, table, positions, DType::kBF16, 0, hidden, x).ok()) << "empty vocab";
  EXPECT_FALSE(run(ids, batch, seq, table, positions, DType::kBF16, vocab, 0, x).ok()) << "zero hidden";
  const Status bad_dtype = run(ids, batch, seq, table, positions, DType::kI32, vocab, hidden, x);
  EXPECT_EQ(bad_dtype.code(), StatusCode::kUnimplemented) << bad_dtype.to_string();
  const void* odd_table = static_cast<const char*>(table) + 1;  // not aligned to a 2-byte element
  EXPECT_FALSE(run(ids, batch, seq, odd_table, positions, DType::kBF16, vocab, hidden, x).ok()) << "misaligned";
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  for (float v : dx.download()) ASSERT_EQ(v, kSentinel) << "a rejected call wrote x";
}

}  // namespace
}  // namespace mmserve::kernels
