// The CPU twin of SAM's mask post-processing (see mask_resize.h): for each mask, the width pass of the first
// resize over every input row (h x crop_w), its height pass (crop_h x crop_w), the width pass of the second
// resize (crop_h x out_w), then its height pass fused with the threshold. This order performs torch's operations
// (width blend inside, height blend outside) exactly; this file is compiled with -ffp-contract=off.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "kernels/mask_resize/mask_resize.h"

namespace mmserve::kernels {
namespace {

// Outputs per pass above which the passes split their rows over OpenMP threads: a click's three masks at 1024 px
// are ~5 M taps, ~5 ms on one core. Measured on the H200 host (16 cores), a served click's compute: 7.9 ms
// serial, 1.9 ms with OpenMP, 5.6 ms with core/ThreadPool::parallel_for (condition-variable wake-ups per pass).
// On the 2-core box OpenMP's spinning workers (GOMP's default wait policy) delayed the HTTP threads by 1-4 ms.
constexpr int64_t kParallelMin = 1 << 16;

// torch's linear taps for output indices [0, count) of an in -> out resize (align_corners=False).
struct LinearTaps {
  std::vector<int> i0, i1;
  std::vector<float> w0, w1;
};

LinearTaps linear_taps(int in, int out, int count) {
  LinearTaps taps;
  taps.i0.resize(count);
  taps.i1.resize(count);
  taps.w0.resize(count);
  taps.w1.resize(count);
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int dst = 0; dst < count; ++dst) {
    if (in == out) {  // torch copies (compute_source_index_and_lambda's special case)
      taps.i0[dst] = taps.i1[dst] = dst;
      taps.w0[dst] = 1.0f;
      taps.w1[dst] = 0.0f;
      continue;
    }
    float src = scale * (static_cast<float>(dst) + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    const int i = std::min(static_cast<int>(std::floor(src)), in - 1);
    const float lambda = std::min(std::max(src - static_cast<float>(i), 0.0f), 1.0f);
    taps.i0[dst] = i;
    taps.i1[dst] = i + (i < in - 1 ? 1 : 0);
    taps.w0[dst] = 1.0f - lambda;
    taps.w1[dst] = lambda;
  }
  return taps;
}

// Width pass: rows x in_w -> rows x taps.size(), row-major.
void width_pass(const float* src, int rows, int in_w, const LinearTaps& taps, std::vector<float>& dst) {
  const int out_w = static_cast<int>(taps.i0.size());
  dst.resize(static_cast<size_t>(rows) * out_w);
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(rows) * out_w >= kParallelMin)
  for (int y = 0; y < rows; ++y) {
    const float* s = src + static_cast<size_t>(y) * in_w;
    float* d = dst.data() + static_cast<size_t>(y) * out_w;
    for (int x = 0; x < out_w; ++x) d[x] = s[taps.i0[x]] * taps.w0[x] + s[taps.i1[x]] * taps.w1[x];
  }
}

// Height pass: picks and blends rows of `src` (width `width`) into taps.size() rows.
void height_pass(const std::vector<float>& src, int width, const LinearTaps& taps, std::vector<float>& dst) {
  const int out_h = static_cast<int>(taps.i0.size());
  dst.resize(static_cast<size_t>(out_h) * width);
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(out_h) * width >= kParallelMin)
  for (int y = 0; y < out_h; ++y) {
    const float* a = src.data() + static_cast<size_t>(taps.i0[y]) * width;
    const float* b = src.data() + static_cast<size_t>(taps.i1[y]) * width;
    const float w0 = taps.w0[y], w1 = taps.w1[y];
    float* d = dst.data() + static_cast<size_t>(y) * width;
    for (int x = 0; x < width; ++x) d[x] = a[x] * w0 + b[x] * w1;
  }
}

}  // namespace

bool mask_resize_shape_valid(const MaskResizeShape& s) {
  return s.k > 0 && s.in_h > 0 && s.in_w > 0 && s.pad_h > 0 && s.pad_w > 0 && s.crop_h > 0 && s.crop_w > 0 &&
         s.crop_h <= s.pad_h && s.crop_w <= s.pad_w && s.out_h > 0 && s.out_w > 0;
}

void mask_resize_threshold(const float* logits, const MaskResizeShape& s, float threshold, uint8_t* out) {
  MMSERVE_CHECK(logits != nullptr && out != nullptr && mask_resize_shape_valid(s),
                "mask_resize_threshold needs k x in_h x in_w logits and a crop inside the pad size");
  const int h = s.in_h, w = s.in_w, rw = s.crop_w, rh = s.crop_h, ow = s.out_w, oh = s.out_h;
  // First interpolation h x w -> pad size, evaluated only on the [0, rh) x [0, rw) window the crop keeps.
  const LinearTaps x1 = linear_taps(w, s.pad_w, rw);
  const LinearTaps y1 = linear_taps(h, s.pad_h, rh);
  // Second interpolation rh x rw -> oh x ow.
  const LinearTaps x2 = linear_taps(rw, ow, ow);
  const LinearTaps y2 = linear_taps(rh, oh, oh);

  std::vector<float> rows1, cropped, rows2;  // reused across masks
  for (int m = 0; m < s.k; ++m) {
    width_pass(logits + static_cast<size_t>(m) * h * w, h, w, x1, rows1);  // h x rw
    height_pass(rows1, rw, y1, cropped);                                   // rh x rw
    width_pass(cropped.data(), rh, rw, x2, rows2);                         // rh x ow
    uint8_t* dst = out + static_cast<size_t>(m) * oh * ow;
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(oh) * ow >= kParallelMin)
    for (int y = 0; y < oh; ++y) {
      const float* a = rows2.data() + static_cast<size_t>(y2.i0[y]) * ow;
      const float* b = rows2.data() + static_cast<size_t>(y2.i1[y]) * ow;
      const float w0 = y2.w0[y], w1 = y2.w1[y];
      uint8_t* d = dst + static_cast<size_t>(y) * ow;
      for (int x = 0; x < ow; ++x) d[x] = (a[x] * w0 + b[x] * w1) > threshold ? 1 : 0;
    }
  }
}

}  // namespace mmserve::kernels
