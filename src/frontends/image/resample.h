// Internal: PIL's two-pass resampling evaluated on a window of the output (resample.cpp), shared by
// resize_pil() and resize_and_crop() (preprocess.cpp).
//
// Every output pixel of PIL's resize depends only on its own index, the input size and the output size, so
// computing just the columns/rows a centre crop keeps gives exactly the same values as resizing the whole
// image and cropping, at a fraction of the cost, and bounds the work for extreme aspect ratios (a 1x100000
// strip resized to shortest_edge 224 would otherwise allocate 224x22,400,000 pixels).
// Tests: tests/unit/frontends/image/resample_test.cpp (window == full resize then crop).
#pragma once

#include "frontends/image/image.h"

namespace mmserve::image::detail {

// A half-open range [start, start + count) of output indices along one axis.
struct Span1d {
  int start = 0;
  int count = 0;
};

// PIL's Image.resize((out_width, out_height), resample) restricted to output columns `cols` and rows
// `rows` (each inside [0, out size)). resample: 2 (BILINEAR) or 3 (BICUBIC). Returns cols.count x rows.count.
RgbImage resize_window(const RgbImage& src, int out_width, int out_height, int resample, Span1d cols, Span1d rows);

}  // namespace mmserve::image::detail
