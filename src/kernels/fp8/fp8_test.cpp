// FP8 codes against values worked out by hand from the OCP 8-bit floating point spec (E4M3: bias 7, no infinity,
// S.1111.111 NaN, max 448; E5M2: bias 15, IEEE-like, max 57344), rounding against a brute-force nearest search over
// all 256 codes, and the scaled GEMM against a double-precision loop.
#include "kernels/fp8/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

namespace mmserve::kernels {
namespace {

constexpr Fp8Format kE4M3 = Fp8Format::kE4M3, kE5M2 = Fp8Format::kE5M2;

TEST(Fp8, E4M3CodesOfHandWorkedValues) {
  EXPECT_EQ(fp8_encode(0.0f, kE4M3), 0x00);
  EXPECT_EQ(fp8_encode(-0.0f, kE4M3), 0x80);
  EXPECT_EQ(fp8_encode(1.0f, kE4M3), 0x38);     // field 7, mantissa 0
  EXPECT_EQ(fp8_encode(-2.0f, kE4M3), 0xC0);    // field 8
  EXPECT_EQ(fp8_encode(448.0f, kE4M3), 0x7E);   // 1.75 * 2^8, the largest
  EXPECT_EQ(fp8_encode(0.015625f, kE4M3), 0x08);  // 2^-6, the smallest normal
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -9), kE4M3), 0x01);   // the smallest subnormal
  EXPECT_EQ(fp8_encode(std::ldexp(7.0f, -9), kE4M3), 0x07);   // the largest subnormal
  EXPECT_EQ(fp8_encode(0.1f, kE4M3), 0x1D);      // 12.8 quanta of 2^-7 -> 13: 1.625 * 2^-4 = 0.1015625
  EXPECT_FLOAT_EQ(fp8_decode(0x1D, kE4M3), 0.1015625f);
  // Ties go to the even code.
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -10), kE4M3), 0x00);  // half the smallest subnormal
  EXPECT_EQ(fp8_encode(std::ldexp(3.0f, -10), kE4M3), 0x02);  // 1.5 quanta -> 2
  EXPECT_EQ(fp8_encode(1.0625f, kE4M3), 0x38);   // between 1.0 (0x38) and 1.125 (0x39)
  EXPECT_EQ(fp8_encode(1.1875f, kE4M3), 0x3A);   // between 1.125 (0x39) and 1.25 (0x3A)
  EXPECT_EQ(fp8_encode(1.07f, kE4M3), 0x39);     // past the tie
  // Saturation (finite and infinite), NaN.
  EXPECT_EQ(fp8_encode(464.0f, kE4M3), 0x7E);
  EXPECT_EQ(fp8_encode(1e30f, kE4M3), 0x7E);
  EXPECT_EQ(fp8_encode(-1e30f, kE4M3), 0xFE);
  EXPECT_EQ(fp8_encode(INFINITY, kE4M3), 0x7E);
  EXPECT_EQ(fp8_encode(-INFINITY, kE4M3), 0xFE);
  EXPECT_EQ(fp8_encode(std::nanf(""), kE4M3), 0x7F);
  EXPECT_EQ(fp8_encode(-std::nanf(""), kE4M3), 0x7F);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, kE4M3)));
  EXPECT_TRUE(std::isnan(fp8_decode(0xFF, kE4M3)));
  EXPECT_EQ(fp8_decode(0x7E, kE4M3), 448.0f);
  EXPECT_EQ(fp8_decode(0xFE, kE4M3), -448.0f);
}

TEST(Fp8, E5M2CodesOfHandWorkedValues) {
  EXPECT_EQ(fp8_encode(1.0f, kE5M2), 0x3C);       // field 15
  EXPECT_EQ(fp8_encode(57344.0f, kE5M2), 0x7B);   // 1.75 * 2^15
  EXPECT_EQ(fp8_encode(1e6f, kE5M2), 0x7B);
  EXPECT_EQ(fp8_encode(INFINITY, kE5M2), 0x7B);   // saturating, as cvt.rn.satfinite
  EXPECT_EQ(fp8_encode(-INFINITY, kE5M2), 0xFB);
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -14), kE5M2), 0x04);  // the smallest normal
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -16), kE5M2), 0x01);  // the smallest subnormal
  EXPECT_EQ(fp8_encode(1.125f, kE5M2), 0x3C);     // tie between 1.0 and 1.25
  EXPECT_EQ(fp8_encode(1.375f, kE5M2), 0x3E);     // tie between 1.25 and 1.5
  EXPECT_EQ(fp8_decode(0x7C, kE5M2), INFINITY);
  EXPECT_EQ(fp8_decode(0xFC, kE5M2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7D, kE5M2)));
  EXPECT_EQ(fp8_encode(std::nanf(""), kE5M2), 0x7F);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, kE5M2)));
}

// Every finite code decodes and encodes back to itself.
TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (Fp8Format f : {kE4M3, kE5M2}) {
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_decode(static_cast<uint8_t>(c), f);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(fp8_encode(v, f), c) << fp8_format_name(f) << " code " << c << " value " << v;
    }
  }
}

// The encoding is the nearest finite code (ties: the even one), found here by searching all 256, for values spread
// over every binade, the subnormals and just past the largest value.
TEST(Fp8, EncodingIsTheNearestCodeTiesToEven) {
  std::mt19937 rng(7);
  for (Fp8Format f : {kE4M3, kE5M2}) {
    std::vector<std::pair<float, int>> finite;
    for (int c = 0; c < 128; ++c) {
      const float v = fp8_decode(static_cast<uint8_t>(c), f);
      if (std::isfinite(v)) finite.push_back({v, c});
    }
    std::uniform_real_distribution<float> exponent(-20.0f, std::log2(fp8_max(f)) + 0.3f);
    for (int i = 0; i < 20000; ++i) {
      const float x = std::exp2(exponent(rng));
      int best = -1;
      double best_error = INFINITY;
      for (auto [v, c] : finite) {
        const double error = std::fabs(static_cast<double>(v) - x);
        if (error < best_error || (error == best_error && (c & 1) == 0)) best = c, best_error = error;
      }
      if (x > fp8_max(f)) best = fp8_encode(fp8_max(f), f);  // saturation
      ASSERT_EQ(fp8_encode(x, f), best) << fp8_format_name(f) << " x=" << x;
      ASSERT_EQ(fp8_encode(-x, f), best | 0x80) << fp8_format_name(f) << " x=" << -x;
    }
  }
}

TEST(Fp8, QuantizeDividesByTheScale) {
  const std::vector<float> x = {0.0f, 1.0f, -3.5f, 100.0f, 1e9f};
  std::vector<uint8_t> q(x.size());
  const float scale = fp8_scale_for_amax(100.0f, kE4M3);  // 100 -> 448
  fp8_quantize(x.data(), static_cast<int64_t>(x.size()), scale, kE4M3, q.data());
  EXPECT_EQ(q[0], 0x00);
  EXPECT_EQ(q[1], fp8_encode(1.0f / scale, kE4M3));
  EXPECT_EQ(q[3], 0x7E);
  EXPECT_EQ(q[4], 0x7E);
  EXPECT_NEAR(fp8_decode(q[2], kE4M3) * scale, -3.5f, 3.5f * 0.0625f);
  EXPECT_GT(fp8_scale_for_amax(0.0f, kE4M3), 0.0f);  // an all-zero tensor: no division by zero
}

TEST(Fp8, GemmMatchesADoubleLoopForEveryScaleMode) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> code(0, 255);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 5, 17}, {17, 9, 64}}) {
    for (bool a_rows : {false, true}) {
      for (bool w_rows : {false, true}) {
        for (Fp8Format wf : {kE4M3, kE5M2}) {
          const int64_t lda = k + 3, ldw = k + 1, ldd = n + 2;
          std::vector<uint8_t> a(m * lda), w(n * ldw);
          auto finite_code = [&](Fp8Format f) {
            for (;;) {
              const uint8_t c = static_cast<uint8_t>(code(rng));
              if (std::isfinite(fp8_decode(c, f))) return c;
            }
          };
          for (auto& c : a) c = finite_code(kE4M3);
          for (auto& c : w) c = finite_code(wf);
          std::vector<float> as(a_rows ? m : 1), ws(w_rows ? n : 1), bias(n), d(m * ldd, -7.0f);
          for (auto& s : as) s = 1e-3f * (1 + code(rng));
          for (auto& s : ws) s = 1e-4f * (1 + code(rng));
          for (auto& b : bias) b = 0.01f * (code(rng) - 128);
          Fp8GemmCpuArgs args;
          args.m = m, args.n = n, args.k = k, args.a = a.data(), args.lda = lda, args.w = w.data(), args.ldw = ldw;
          args.w_format = wf, args.a_scale = as.data(), args.a_scale_per_row = a_rows, args.w_scale = ws.data();
          args.w_scale_per_row = w_rows, args.bias = bias.data(), args.d = d.data(), args.ldd = ldd;
          fp8_gemm(args);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0, magnitude = 0;
              for (int64_t t = 0; t < k; ++t) {
                const double p = static_cast<double>(fp8_decode(a[i * lda + t], kE4M3)) * fp8_decode(w[j * ldw + t], wf);
                sum += p, magnitude += std::fabs(p);
              }
              const double scale = static_cast<double>(as[a_rows ? i : 0]) * ws[w_rows ? j : 0];
              const double want = sum * scale + bias[j];
              EXPECT_NEAR(d[i * ldd + j], want, 1e-5 * magnitude * scale + 1e-6) << i << "," << j;
            }
            for (int64_t j = n; j < ldd; ++j) EXPECT_EQ(d[i * ldd + j], -7.0f);  // past n: untouched
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
