// Tests of im2col_1d_cpu (conv1d/im2col_1d.h) against a naive loop and, through a naive GEMM with the
// conv weight [out, in, kernel], against a direct 1-D convolution in double (Whisper's conv1: stride 1,
// conv2: stride 2, kernel 3, padding 1), for both input layouts, odd frame counts, f32/f16/bf16 out, strided
// rows, and the argument checks.
#include "kernels/conv1d/im2col_1d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(Im2col1dCpu, MatchesDirectConvolution) {
  for (bool channels_last : {false, true}) {
    for (int64_t stride : {1, 2}) {
      for (int64_t frames : {1, 2, 7, 30}) {
        SCOPED_TRACE(std::string(channels_last ? "frames x channels" : "channels x frames") +
                     " stride=" + std::to_string(stride) + " frames=" + std::to_string(frames));
        const int64_t batch = 2, channels = 5, out_ch = 4, kernel = 3, padding = 1;
        const int64_t in_ld = channels + (channels_last ? 2 : 0);
        const std::vector<float> x = random_floats(static_cast<size_t>(batch * frames * in_ld), 7);
        const std::vector<float> w = random_floats(static_cast<size_t>(out_ch * channels * kernel), 8);
        auto x_at = [&](int64_t b, int64_t c, int64_t f) {
          return channels_last ? x[(b * frames + f) * in_ld + c] : x[(b * channels + c) * frames + f];
        };
        const int64_t out_frames = im2col_1d_out_frames(frames, kernel, stride, padding);
        ASSERT_EQ(out_frames, (frames + 2 - 3) / stride + 1);
        const int64_t cols = channels * kernel, out_ld = cols + 1;
        std::vector<float> col(static_cast<size_t>(batch * out_frames * out_ld), 99.0f);
        Im2col1dArgs a;
        a.input = x.data();
        a.channels_last = channels_last;
        a.in_ld = in_ld;
        a.out = col.data();
        a.out_ld = out_ld;
        a.batch = batch;
        a.channels = channels;
        a.frames = frames;
        a.stride = stride;
        ASSERT_TRUE(im2col_1d_cpu(a).ok());
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t t = 0; t < out_frames; ++t) {
            const float* row = col.data() + (b * out_frames + t) * out_ld;
            EXPECT_EQ(row[cols], 99.0f) << "padding column written";
            for (int64_t o = 0; o < out_ch; ++o) {
              double gemm = 0.0, direct = 0.0;
              for (int64_t j = 0; j < cols; ++j) gemm += static_cast<double>(row[j]) * w[o * cols + j];
              for (int64_t c = 0; c < channels; ++c) {
                for (int64_t k = 0; k < kernel; ++k) {
                  const int64_t f = t * stride + k - padding;
                  if (f >= 0 && f < frames)
                    direct += static_cast<double>(x_at(b, c, f)) * w[(o * channels + c) * kernel + k];
                }
              }
              EXPECT_NEAR(gemm, direct, 1e-12) << "b=" << b << " t=" << t << " o=" << o;
            }
          }
        }
      }
    }
  }
}

TEST(Im2col1dCpu, OutputDtypesRoundToNearestEven) {
  const std::vector<float> x = random_floats(3 * 11, 9);
  for (DType out_dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> out(static_cast<size_t>(11 * 9));
    Im2col1dArgs a;
    a.input = x.data();
    a.out = out.data();
    a.out_dtype = out_dtype;
    a.out_ld = 9;
    a.batch = 1;
    a.channels = 3;
    a.frames = 11;
    ASSERT_TRUE(im2col_1d_cpu(a).ok());
    for (int64_t t = 0; t < 11; ++t) {
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t k = 0; k < 3; ++k) {
          const int64_t f = t + k - 1;
          const float v = f >= 0 && f < 11 ? x[c * 11 + f] : 0.0f;
          const uint16_t expected = out_dtype == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
          ASSERT_EQ(out[t * 9 + c * 3 + k], expected);
        }
      }
    }
  }
}

TEST(Im2col1dCpu, RejectsBadArguments) {
  float buf[16] = {};
  Im2col1dArgs a;
  a.input = buf;
  a.out = buf;
  a.batch = 1;
  a.channels = 1;
  a.frames = 2;
  a.out_ld = 3;
  EXPECT_TRUE(im2col_1d_cpu(a).ok());
  Im2col1dArgs bad = a;
  bad.out_ld = 2;
  EXPECT_EQ(im2col_1d_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.stride = 0;
  EXPECT_EQ(im2col_1d_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.channels_last = true;
  bad.in_ld = 0;
  EXPECT_EQ(im2col_1d_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.in_dtype = DType::kI8;
  EXPECT_EQ(im2col_1d_cpu(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(im2col_1d_out_frames(3000, 3, 2, 1), 1500);  // Whisper's conv2
  EXPECT_EQ(im2col_1d_out_frames(3000, 3, 1, 1), 3000);  // conv1
}

}  // namespace
}  // namespace mmserve::kernels
