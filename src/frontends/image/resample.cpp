// PIL's Image.resize for 8-bit RGB with the BILINEAR and BICUBIC filters, bit for bit (Pillow's
// src/libImaging/Resample.c, unchanged in substance from Pillow 4.x to 12.x).
//
// Reproduced exactly:
//  - precompute_coeffs: scale = in / out; filterscale = max(scale, 1); support = filter.support *
//    filterscale; for output index xx: center = (xx + 0.5) * scale, xmin = max(0, (int)(center - support +
//    0.5)), xmax = min(in, (int)(center + support + 0.5)), weights w = filter((x + xmin - center + 0.5) /
//    filterscale) (multiplying by ss = 1 / filterscale, as PIL does), each divided by their sum;
//  - normalize_coeffs_8bpc: 22-bit fixed point (PRECISION_BITS = 32 - 8 - 2), (int)(k * 2^22 + 0.5) for
//    k >= 0 and (int)(k * 2^22 - 0.5) for k < 0 (C truncation toward zero);
//  - the passes: int32 accumulator starting at 1 << 21, sum of uint8 * coefficient, clip8 = clamp(acc >> 22,
//    0, 255); the horizontal pass first into an 8-bit temporary, then the vertical pass; a pass is skipped
//    when its dimension is unchanged; the identity resize is a copy (Image.resize returns self.copy()).
//  - filters: bilinear = max(0, 1 - |x|), support 1; bicubic with a = -0.5, support 2.
// PIL's box/ybox cropping (only the source rows the vertical pass reads are resampled horizontally) is
// applied too; it never changes a value (each row of the temporary depends on its source row alone). The GPU
// path (kernels/pil_resize) does the same from the vertical table: its horizontal pass covers only the source
// rows [xmin.front(), xmin.back() + count.back()) of the kept output rows (PilResizeAxis::src_start/src_count),
// again the same values, and it bounds the scratch buffer for extreme aspect ratios. -ffp-contract=off
// (CMakeLists.txt) keeps the double arithmetic of the weights identical to PIL's x86-64 build (no FMA).
// pil_resample_coeffs exposes the tables so the GPU computes from the very same integers.
// Tests: tests/unit/frontends/image/resample_test.cpp (hand-computed cases), resize_levels_test.cpp (the
// kernels/pil_resize twin fed these tables equals resize_and_crop / SAM's resize); conformance against PIL:
// tests/conformance/clip_pixels_test.cpp.
#include "frontends/image/resample.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "frontends/image/preprocess.h"

namespace mmserve::image {
namespace detail {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

struct Filter {
  double (*weight)(double);
  double support;
};

double bilinear_weight(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

double bicubic_weight(double x) {
  constexpr double kA = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((kA + 2.0) * x - (kA + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * kA;
  return 0.0;
}

Filter filter_for(int resample) {
  MMSERVE_CHECK(resample == 2 || resample == 3, "only BILINEAR (2) and BICUBIC (3) are implemented");
  return resample == 3 ? Filter{bicubic_weight, 2.0} : Filter{bilinear_weight, 1.0};
}

// Resample.c's precompute_coeffs and normalize_coeffs_8bpc for the output indices of `span`.
ResampleCoeffs precompute_coeffs(int in_size, int out_size, const Filter& filter, Span1d span) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;  // (double)(in1 - in0) / out
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  ResampleCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.xmin.resize(span.count);
  c.count.resize(span.count);
  c.k.assign(static_cast<size_t>(span.count) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int i = 0; i < span.count; ++i) {
    const int xx = span.start + i;
    const double center = 0.0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // NOLINTBEGIN(bugprone-incorrect-roundings): PIL's own rounding (truncation toward zero), on purpose.
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = filter.weight((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double kx = ww != 0.0 ? w[x] / ww : w[x];
      c.k[static_cast<size_t>(i) * c.ksize + x] = kx < 0 ? static_cast<int32_t>(-0.5 + kx * (1 << kPrecisionBits))
                                                         : static_cast<int32_t>(0.5 + kx * (1 << kPrecisionBits));
      // NOLINTEND(bugprone-incorrect-roundings)
    }
    c.xmin[i] = xmin;
    c.count[i] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift, as PIL's lookup table index
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Horizontal pass over source rows [row_first, row_first + row_count) -> cols.count x row_count image.
RgbImage horizontal_pass(const RgbImage& src, const ResampleCoeffs& c, int row_first, int row_count) {
  const int out_width = static_cast<int>(c.xmin.size());
  RgbImage out;
  out.width = out_width;
  out.height = row_count;
  out.pixels.resize(static_cast<size_t>(out_width) * row_count * 3);
  for (int y = 0; y < row_count; ++y) {
    const uint8_t* in = src.pixels.data() + static_cast<size_t>(row_first + y) * src.width * 3;
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * out_width * 3;
    for (size_t i = 0; i < static_cast<size_t>(out_width); ++i) {
      const int32_t* k = c.k.data() + i * c.ksize;
      const uint8_t* p = in + static_cast<size_t>(c.xmin[i]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[i]; ++x, p += 3) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      dst[3 * i] = clip8(s0);
      dst[3 * i + 1] = clip8(s1);
      dst[3 * i + 2] = clip8(s2);
    }
  }
  return out;
}

// Vertical pass; `c.xmin` is relative to the first row of `src`. Integer sums, so accumulating row by row
// (cache friendly) gives exactly PIL's per-pixel loop.
RgbImage vertical_pass(const RgbImage& src, const ResampleCoeffs& c, int row_offset) {
  const int out_height = static_cast<int>(c.xmin.size());
  const size_t stride = static_cast<size_t>(src.width) * 3;
  RgbImage out;
  out.width = src.width;
  out.height = out_height;
  out.pixels.resize(stride * out_height);
  std::vector<int32_t> acc(stride);
  for (int j = 0; j < out_height; ++j) {
    const int32_t* k = c.k.data() + static_cast<size_t>(j) * c.ksize;
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[j]; ++y) {
      const uint8_t* in = src.pixels.data() + static_cast<size_t>(c.xmin[j] - row_offset + y) * stride;
      const int32_t ky = k[y];
      for (size_t i = 0; i < stride; ++i) acc[i] += in[i] * ky;
    }
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(j) * stride;
    for (size_t i = 0; i < stride; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

RgbImage copy_window(const RgbImage& src, Span1d cols, Span1d rows) {
  RgbImage out;
  out.width = cols.count;
  out.height = rows.count;
  out.pixels.resize(static_cast<size_t>(cols.count) * rows.count * 3);
  for (int y = 0; y < rows.count; ++y) {
    std::memcpy(out.pixels.data() + static_cast<size_t>(y) * cols.count * 3,
                src.pixels.data() + (static_cast<size_t>(rows.start + y) * src.width + cols.start) * 3,
                static_cast<size_t>(cols.count) * 3);
  }
  return out;
}

}  // namespace

ResampleCoeffs pil_resample_coeffs(int in_size, int out_size, int resample, Span1d span) {
  MMSERVE_CHECK(in_size > 0 && out_size > 0, "pil_resample_coeffs: empty resize");
  MMSERVE_CHECK(span.start >= 0 && span.count >= 0 && span.start + span.count <= out_size,
                "pil_resample_coeffs: span outside the output");
  return precompute_coeffs(in_size, out_size, filter_for(resample), span);
}

RgbImage resize_window(const RgbImage& src, int out_width, int out_height, int resample, Span1d cols, Span1d rows) {
  MMSERVE_CHECK(src.width > 0 && src.height > 0 && out_width > 0 && out_height > 0, "empty resize");
  MMSERVE_CHECK(cols.start >= 0 && cols.count >= 0 && cols.start + cols.count <= out_width, "bad columns");
  MMSERVE_CHECK(rows.start >= 0 && rows.count >= 0 && rows.start + rows.count <= out_height, "bad rows");
  MMSERVE_CHECK(src.pixels.size() == static_cast<size_t>(src.width) * src.height * 3, "bad RgbImage");
  (void)filter_for(resample);  // refuses other filters even where no pass runs
  const bool need_horizontal = out_width != src.width;
  const bool need_vertical = out_height != src.height;
  if (cols.count == 0 || rows.count == 0) return RgbImage{cols.count, rows.count, {}};

  // Source rows the output rows read (all of `rows` itself when there is no vertical pass).
  ResampleCoeffs vertical;
  int row_first = rows.start;
  int row_end = rows.start + rows.count;
  if (need_vertical) {
    vertical = pil_resample_coeffs(src.height, out_height, resample, rows);
    row_first = vertical.xmin.front();
    row_end = vertical.xmin.back() + vertical.count.back();
  }
  RgbImage temp;
  if (need_horizontal) {
    temp =
        horizontal_pass(src, pil_resample_coeffs(src.width, out_width, resample, cols), row_first, row_end - row_first);
  } else {
    temp = copy_window(src, cols, Span1d{row_first, row_end - row_first});
  }
  if (!need_vertical) return temp;
  return vertical_pass(temp, vertical, row_first);
}

}  // namespace detail

RgbImage resize_pil(const RgbImage& src, int width, int height, int resample) {
  if (width == src.width && height == src.height) return src;  // Image.resize: return self.copy()
  return detail::resize_window(src, width, height, resample, detail::Span1d{0, width}, detail::Span1d{0, height});
}

}  // namespace mmserve::image
