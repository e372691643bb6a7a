// Tests of im2col_1d_cuda() against its CPU twin, bit for bit (a copy with one rounding): both input
// layouts, f32/f16/bf16 in and out, strides 1 and 2, odd frame counts (1, 2, 7), strided rows, Whisper's
// shapes (conv1: 80 mel bins x 3000 frames; conv2: 3000 frames x 384 channels, stride 2), a misaligned base
// pointer, and the argument checks. Every test skips, saying why, without a GPU.
#include "kernels/conv1d/im2col_1d_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/conv1d/im2col_1d.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

void check(bool channels_last, DType in_dtype, DType out_dtype, int64_t batch, int64_t channels, int64_t frames,
           int64_t stride, int64_t offset) {
  SCOPED_TRACE(std::string(channels_last ? "frames x channels " : "channels x frames ") + dtype_name(in_dtype) + "->" +
               dtype_name(out_dtype) + " b=" + std::to_string(batch) + " c=" + std::to_string(channels) +
               " f=" + std::to_string(frames) + " s=" + std::to_string(stride));
  const int64_t in_ld = channels + (channels_last ? 3 : 0);
  const int64_t out_frames = im2col_1d_out_frames(frames, 3, stride, 1);
  const int64_t out_ld = channels * 3 + 2;
  const std::vector<uint8_t> in =
      cuda_test::encode(random_floats(static_cast<size_t>(batch * frames * in_ld + offset), 21, -4.0f, 4.0f), in_dtype);
  const size_t in_elem = dtype_size(in_dtype), out_elem = dtype_size(out_dtype);
  std::vector<uint8_t> out(static_cast<size_t>(batch * out_frames * out_ld) * out_elem, 0x3C);
  Im2col1dArgs a;
  a.input = in.data() + offset * in_elem;
  a.in_dtype = in_dtype;
  a.channels_last = channels_last;
  a.in_ld = in_ld;
  a.out = out.data();
  a.out_dtype = out_dtype;
  a.out_ld = out_ld;
  a.batch = batch;
  a.channels = channels;
  a.frames = frames;
  a.stride = stride;
  ASSERT_TRUE(im2col_1d_cpu(a).ok());
  DeviceVector<uint8_t> din(in), dout(std::vector<uint8_t>(out.size(), 0x3C));
  a.input = din.get() + offset * in_elem;
  a.out = dout.get();
  ASSERT_TRUE(im2col_1d_cuda(a, nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dout.download(), out);
}

TEST(Im2col1dCuda, MatchesTwin) {
  MMSERVE_REQUIRE_GPU();
  for (bool channels_last : {false, true}) {
    for (DType in_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (DType out_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (int64_t stride : {1, 2}) {
          for (int64_t frames : {1, 2, 7}) check(channels_last, in_dtype, out_dtype, 3, 5, frames, stride, 0);
        }
      }
    }
  }
  check(false, DType::kF32, DType::kBF16, 2, 80, 3000, 1, 1);   // conv1 of tiny / large-v2
  check(false, DType::kF32, DType::kF16, 1, 128, 3000, 1, 0);   // conv1 of large-v3
  check(true, DType::kBF16, DType::kBF16, 2, 384, 3000, 2, 0);  // conv2 of tiny
}

TEST(Im2col1dCuda, RejectsBadArguments) {
  MMSERVE_REQUIRE_GPU();
  Im2col1dArgs a;
  a.batch = a.channels = 1;
  a.frames = 4;
  a.out_ld = 3;
  EXPECT_EQ(im2col_1d_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);  // null pointers
  a.frames = 0;
  EXPECT_TRUE(im2col_1d_cuda(a, nullptr).ok());  // empty
}

}  // namespace
}  // namespace mmserve::kernels
