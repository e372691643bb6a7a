// Tests of the patch-embedding kernels against the CPU, for every dtype, over odd geometries, misaligned
// pointers (the scalar path) and broken arguments (rejected before any launch). Skipped, with the reason,
// where no GPU is visible.
//
// im2col_patches_cuda is checked through its CPU twin patch_embed() run with an identity weight
// [K, channels, p, p] (K = channels * p * p): each output column is then one pixel times 1 plus exact
// zeros, so patch_embed's output is exactly the im2col matrix in the CPU's column order. The GPU's output
// must equal it rounded through the dtype, bit for bit (both round to nearest even).
// assemble_vision_embeddings_cuda is checked against the CPU's add() of [class; patch rows] and the position
// rows: one f32 addition of exactly converted values on both sides, so again bit for bit.
#include "kernels/patch_embed/patch_embed_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/patch_embed/patch_embed.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

using cuda_test::DeviceArray;
using cuda_test::kGuard;
using cuda_test::kSentinel;

// Number of positions where got and want differ; the first one is reported.
int64_t count_mismatches(const std::vector<float>& got, const std::vector<float>& want, int64_t row_length) {
  EXPECT_EQ(got.size(), want.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (mismatches++ == 0) {
      ADD_FAILURE() << "first mismatch at row " << i / row_length << " column " << i % row_length << ": got " << got[i]
                    << ", cpu " << want[i];
    }
  }
  return mismatches;
}

struct Im2colCase {
  DType dtype = DType::kBF16;
  int64_t batch = 0, channels = 0, size = 0, patch = 0;
  int64_t shift = 0;  // elements past 16-byte alignment, for pixels and patches
};

void check_im2col(const Im2colCase& c, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " batch=" + std::to_string(c.batch) +
               " channels=" + std::to_string(c.channels) + " size=" + std::to_string(c.size) +
               " patch=" + std::to_string(c.patch) + " shift=" + std::to_string(c.shift));
  const int64_t grid = c.size / c.patch, patches = grid * grid, patch_len = c.channels * c.patch * c.patch;
  const std::vector<float> pixels = random_floats(c.batch * c.channels * c.size * c.size, seed);

  // The CPU twin with an identity weight: its output is the im2col matrix.
  std::vector<float> identity(patch_len * patch_len, 0.0f);
  for (int64_t i = 0; i < patch_len; ++i) identity[i * patch_len + i] = 1.0f;
  std::vector<float> scratch(patch_embed_scratch_floats(c.batch, c.channels, c.size, c.size, c.patch));
  std::vector<float> columns(c.batch * patches * patch_len);
  {
    const Tensor pt(const_cast<float*>(pixels.data()), DType::kF32, {c.batch, c.channels, c.size, c.size});
    const Tensor wt(identity.data(), DType::kF32, {patch_len, c.channels, c.patch, c.patch});
    Tensor ot(columns.data(), DType::kF32, {c.batch, patches, patch_len});
    patch_embed(pt, wt, nullptr, c.patch, ot, scratch.data());
  }
  const std::vector<float> want = cuda_test::round_through(columns, c.dtype);

  const DeviceArray dpix(pixels, DType::kF32, c.shift);
  const DeviceArray dout(std::vector<float>(want.size(), kSentinel), c.dtype, c.shift);
  ASSERT_TRUE(dpix.allocated() && dout.allocated());
  const Status status = im2col_patches_cuda(static_cast<const float*>(dpix.data()), c.batch, c.channels, c.size,
                                            c.patch, dout.data(), c.dtype, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(count_mismatches(dout.download(), want, patch_len), 0);
}

TEST(PatchEmbedCudaTest, Im2colOddGeometriesEveryDtype) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  // (batch, channels, size, patch): packs of 4 (p = 32, 16, 4), of 2 (p = 14, 2), scalar (p = 7, 3, 1).
  const Im2colCase geometries[] = {
      {DType::kF32, 1, 1, 1, 1},   {DType::kF32, 2, 3, 8, 2},   {DType::kF32, 1, 3, 14, 7},
      {DType::kF32, 2, 3, 28, 14}, {DType::kF32, 2, 3, 32, 16}, {DType::kF32, 2, 3, 64, 32},
      {DType::kF32, 3, 1, 12, 4},  {DType::kF32, 1, 2, 9, 3},   {DType::kF32, 2, 3, 32, 32}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Im2colCase c : geometries) {
      c.dtype = dtype;
      check_im2col(c, seed += 3);
      c.shift = 1;  // misaligned pixels and patches: the scalar path
      check_im2col(c, seed += 3);
    }
  }
}

TEST(PatchEmbedCudaTest, Im2colClipVitB32) {
  MMSERVE_REQUIRE_GPU();
  check_im2col({DType::kBF16, /*batch=*/4, /*channels=*/3, /*size=*/224, /*patch=*/32}, 101);
  check_im2col({DType::kF16, 2, 3, 224, 14}, 102);  // ViT-L/14 geometry: packs of 2
}

struct AssembleCase {
  DType dtype = DType::kBF16;
  int64_t batch = 0, patches = 0, hidden = 0;
  int64_t shift = 0;  // elements past 16-byte alignment, for every pointer
};

void check_assemble(const AssembleCase& c, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " batch=" + std::to_string(c.batch) + " patches=" +
               std::to_string(c.patches) + " hidden=" + std::to_string(c.hidden) + " shift=" + std::to_string(c.shift));
  const int64_t tokens = c.patches + 1, rows = c.batch * tokens;
  const std::vector<float> patch_out = random_floats(c.batch * c.patches * c.hidden, seed);
  const std::vector<float> class_embedding = cuda_test::round_through(random_floats(c.hidden, seed + 1), c.dtype);
  const std::vector<float> positions = cuda_test::round_through(random_floats(tokens * c.hidden, seed + 2), c.dtype);

  // The CPU: add() of the stacked [class; patch rows] per image and the position rows.
  std::vector<float> stacked(rows * c.hidden), position_rows(rows * c.hidden), want(rows * c.hidden);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = b * tokens + t;
      const auto source = t == 0 ? class_embedding.begin() : patch_out.begin() + (b * c.patches + t - 1) * c.hidden;
      std::copy_n(source, c.hidden, stacked.begin() + row * c.hidden);
      std::copy_n(positions.begin() + t * c.hidden, c.hidden, position_rows.begin() + row * c.hidden);
    }
  }
  {
    const Tensor st(stacked.data(), DType::kF32, {rows, c.hidden});
    const Tensor pt(position_rows.data(), DType::kF32, {rows, c.hidden});
    Tensor wt(want.data(), DType::kF32, {rows, c.hidden});
    add(st, pt, wt);
  }

  const DeviceArray dpatch(patch_out, DType::kF32, c.shift);
  const DeviceArray dclass(class_embedding, c.dtype, c.shift), dpos(positions, c.dtype, c.shift);
  const DeviceArray dx(std::vector<float>(want.size(), kSentinel), DType::kF32, c.shift);
  ASSERT_TRUE(dpatch.allocated() && dclass.allocated() && dpos.allocated() && dx.allocated());
  const Status status =
      assemble_vision_embeddings_cuda(static_cast<const float*>(dpatch.data()), dclass.data(), dpos.data(), c.dtype,
                                      c.batch, c.patches, c.hidden, static_cast<float*>(dx.data()), nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(count_mismatches(dx.download(), want, c.hidden), 0);
}

TEST(PatchEmbedCudaTest, AssembleOddShapesEveryDtype) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden : {1, 7, 64, 768, 1000, 3072}) {
      for (int64_t patches : {1, 4, 49}) {
        for (int64_t shift : {0, 1}) check_assemble({dtype, /*batch=*/3, patches, hidden, shift}, seed += 3);
      }
    }
    check_assemble({dtype, /*batch=*/2, /*patches=*/0, /*hidden=*/64}, seed += 3);  // class tokens only
  }
}

TEST(PatchEmbedCudaTest, AssembleClipVitB32) {
  MMSERVE_REQUIRE_GPU();
  check_assemble({DType::kBF16, /*batch=*/64, /*patches=*/49, /*hidden=*/768}, 301);
}

TEST(PatchEmbedCudaTest, EmptyBatchIsANoOp) {
  MMSERVE_REQUIRE_GPU();
  Status status = im2col_patches_cuda(nullptr, 0, 3, 224, 32, nullptr, DType::kBF16, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
  status = assemble_vision_embeddings_cuda(nullptr, nullptr, nullptr, DType::kBF16, 0, 49, 768, nullptr, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(PatchEmbedCudaTest, BrokenArgumentsAreRejectedWithoutLaunching) {
  MMSERVE_REQUIRE_GPU();
  const int64_t batch = 2, channels = 3, size = 8, patch = 4, hidden = 16;
  const int64_t patches = (size / patch) * (size / patch), patch_len = channels * patch * patch;
  const DeviceArray dpix(random_floats(batch * channels * size * size, 401), DType::kF32, 0);
  const DeviceArray dcols(std::vector<float>(batch * patches * patch_len, kSentinel), DType::kBF16, 0);
  const auto* pixels = static_cast<const float*>(dpix.data());
  void* columns = dcols.data();
  auto im2col = [&](const float* p, int64_t b, int64_t c, int64_t s, int64_t k, void* out, DType d) {
    return im2col_patches_cuda(p, b, c, s, k, out, d, nullptr);
  };
  EXPECT_FALSE(im2col(nullptr, batch, channels, size, patch, columns, DType::kBF16).ok()) << "null pixels";
  EXPECT_FALSE(im2col(pixels, batch, channels, size, patch, nullptr, DType::kBF16).ok()) << "null patches";
  EXPECT_FALSE(im2col(pixels, batch, channels, size, 3, columns, DType::kBF16).ok()) << "size % patch != 0";
  EXPECT_FALSE(im2col(pixels, batch, channels, size, 0, columns, DType::kBF16).ok()) << "zero patch";
  EXPECT_FALSE(im2col(pixels, batch, 0, size, patch, columns, DType::kBF16).ok()) << "zero channels";
  EXPECT_FALSE(im2col(pixels, -1, channels, size, patch, columns, DType::kBF16).ok()) << "negative batch";
  EXPECT_EQ(im2col(pixels, batch, channels, size, patch, columns, DType::kU8).code(), StatusCode::kUnimplemented);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  for (float v : dcols.download()) ASSERT_EQ(v, kSentinel) << "a rejected im2col wrote patches";

  const DeviceArray dpatch(random_floats(batch * patches * hidden, 402), DType::kF32, 0);
  const DeviceArray dclass(random_floats(hidden, 403), DType::kBF16, 0);
  const DeviceArray dpos(random_floats((patches + 1) * hidden, 404), DType::kBF16, 0);
  const DeviceArray dx(std::vector<float>(batch * (patches + 1) * hidden, kSentinel), DType::kF32, 0);
  const auto* patch_out = static_cast<const float*>(dpatch.data());
  const void* class_embedding = dclass.data();
  const void* positions = dpos.data();
  auto* x = static_cast<float*>(dx.data());
  auto assemble = [&](const float* po, const void* ce, const void* pe, DType d, int64_t h, float* out) {
    return assemble_vision_embeddings_cuda(po, ce, pe, d, batch, patches, h, out, nullptr);
  };
  EXPECT_FALSE(assemble(nullptr, class_embedding, positions, DType::kBF16, hidden, x).ok()) << "null patch_out";
  EXPECT_FALSE(assemble(patch_out, nullptr, positions, DType::kBF16, hidden, x).ok()) << "null class";
  EXPECT_FALSE(assemble(patch_out, class_embedding, nullptr, DType::kBF16, hidden, x).ok()) << "null positions";
  EXPECT_FALSE(assemble(patch_out, class_embedding, positions, DType::kBF16, hidden, nullptr).ok()) << "null x";
  EXPECT_FALSE(assemble(patch_out, class_embedding, positions, DType::kBF16, 0, x).ok()) << "zero hidden";
  EXPECT_EQ(assemble(patch_out, class_embedding, positions, DType::kI64, hidden, x).code(), StatusCode::kUnimplemented);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  for (float v : dx.download()) ASSERT_EQ(v, kSentinel) << "a rejected assemble wrote x";
}

}  // namespace
}  // namespace mmserve::kernels
