// Tests of the Tensor view (src/core/tensor.h): contiguous strides, element counts, reshape and row slices
// that keep pointing into the caller's buffer, device parsing, and the aborts on programmer errors.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace mmserve {
namespace {

TEST(TensorTest, DefaultIsEmpty) {
  Tensor t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.dims(), 0);
  EXPECT_EQ(t.numel(), 1);  // a 0-d tensor is a scalar
}

TEST(TensorTest, ContiguousStridesAndSizes) {
  std::vector<float> buf(24);
  Tensor t(buf.data(), DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.dims(), 3);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t.data_as<float>(), buf.data());
  EXPECT_TRUE(t.device().is_cpu());
}

TEST(TensorTest, ZeroSizedDimension) {
  std::vector<uint16_t> buf(1);
  Tensor t(buf.data(), DType::kBF16, {0, 5});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
}

TEST(TensorTest, ReshapeKeepsData) {
  std::vector<float> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0f);
  Tensor t(buf.data(), DType::kF32, {3, 4});
  Tensor r = t.reshape({2, 6});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(r.size(0), 2);
  EXPECT_EQ(r.stride(0), 6);
  EXPECT_EQ(r.data_as<float>()[7], 7.0f);
}

TEST(TensorTest, SliceRowsOffsetsPointer) {
  std::vector<float> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0f);
  Tensor t(buf.data(), DType::kF32, {3, 4});
  Tensor s = t.slice_rows(1, 3);
  EXPECT_EQ(s.size(0), 2);
  EXPECT_EQ(s.size(1), 4);
  EXPECT_EQ(s.data_as<float>(), buf.data() + 4);
  EXPECT_EQ(s.data_as<float>()[0], 4.0f);
  EXPECT_TRUE(s.is_contiguous());
  Tensor none = t.slice_rows(3, 3);
  EXPECT_EQ(none.numel(), 0);
}

TEST(TensorTest, SliceRowsOfHalfTypeUsesTwoBytesPerElement) {
  std::vector<uint16_t> buf(6);
  Tensor t(buf.data(), DType::kF16, {3, 2});
  EXPECT_EQ(t.slice_rows(2, 3).data(), static_cast<void*>(buf.data() + 4));
}

TEST(TensorTest, SliceColsIsAStridedView) {
  std::vector<float> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0f);
  Tensor t(buf.data(), DType::kF32, {3, 4});
  Tensor s = t.slice_cols(1, 3);
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(s.stride(0), 4);  // rows keep the parent's stride
  EXPECT_EQ(s.stride(1), 1);
  EXPECT_EQ(s.data_as<float>(), buf.data() + 1);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data_as<float>()[s.stride(0) * 2 + 1], 10.0f);  // element (2, 1) of the slice = (2, 2)
}

TEST(DeviceTest, ParseAndPrint) {
  auto cpu = parse_device("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->is_cpu());
  auto cuda = parse_device("cuda:3");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(*cuda, Device::cuda(3));
  EXPECT_EQ(cuda->to_string(), "cuda:3");
  EXPECT_EQ(parse_device("cuda")->to_string(), "cuda:0");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:12345", ""}) {
    auto d = parse_device(bad);
    EXPECT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(TensorDeathTest, ProgrammerErrorsAbort) {
  std::vector<float> buf(12);
  Tensor t(buf.data(), DType::kF32, {3, 4});
  EXPECT_DEATH(t.reshape({5, 2}), "element count");
  EXPECT_DEATH(t.slice_rows(2, 4), "bad row slice");
  EXPECT_DEATH(t.size(2), "dimension out of range");
  EXPECT_DEATH(Tensor(buf.data(), DType::kF32, {1, 1, 1, 1, 1, 1, 1}), "too many dimensions");
}

}  // namespace
}  // namespace mmserve
