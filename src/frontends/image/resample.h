// Internal: PIL's two-pass resampling evaluated on a window of the output (resample.cpp), shared by
// resize_pil() and resize_and_crop() (preprocess.cpp), and PIL's fixed-point coefficient tables, which the GPU
// path (kernels/pil_resize) takes as plain arrays so that it computes the very same pixels.
//
// Every output pixel of PIL's resize depends only on its own index, the input size and the output size, so
// computing just the columns/rows a centre crop keeps gives exactly the same values as resizing the whole
// image and cropping, at a fraction of the cost, and bounds the work for extreme aspect ratios (a 1x100000
// strip resized to shortest_edge 224 would otherwise allocate 224x22,400,000 pixels).
// Tests: tests/unit/frontends/image/resample_test.cpp (window == full resize then crop),
// tests/unit/frontends/image/resize_levels_test.cpp (kernels/pil_resize fed these tables == this file's path).
#pragma once

#include <cstdint>
#include <vector>

#include "frontends/image/image.h"

namespace mmserve::image::detail {

// A half-open range [start, start + count) of output indices along one axis.
struct Span1d {
  int start = 0;
  int count = 0;
};

// PIL's coefficients along one axis (Resample.c's precompute_coeffs + normalize_coeffs_8bpc), for the output
// indices of a span: output index span.start + i reads source indices [xmin[i], xmin[i] + count[i]) with the
// 22-bit fixed-point weights k[i * ksize + t], t < count[i] (zero up to ksize: PIL's layout). xmin and
// xmin + count never decrease with i, so the source indices a span reads are [xmin.front(), xmin.back() +
// count.back()).
struct ResampleCoeffs {
  int ksize = 0;               // ceil(filter support * max(in / out, 1)) * 2 + 1
  std::vector<int32_t> xmin;   // span.count entries
  std::vector<int32_t> count;  // span.count entries, each in [0, ksize]
  std::vector<int32_t> k;      // span.count * ksize entries
};

// The coefficients of an in_size -> out_size resize for output indices `span` (inside [0, out_size)).
// resample: 2 (BILINEAR) or 3 (BICUBIC). Precondition (checked, aborts): positive sizes, span inside.
ResampleCoeffs pil_resample_coeffs(int in_size, int out_size, int resample, Span1d span);

// PIL's Image.resize((out_width, out_height), resample) restricted to output columns `cols` and rows
// `rows` (each inside [0, out size)). resample: 2 (BILINEAR) or 3 (BICUBIC). Returns cols.count x rows.count.
RgbImage resize_window(const RgbImage& src, int out_width, int out_height, int resample, Span1d cols, Span1d rows);

}  // namespace mmserve::image::detail
