// Test-only: building pil_resize batches (pil_resize.h) from image geometry, shared by pil_resize_test.cpp,
// pil_resize_cuda_test.cpp, pil_resize_cuda_bench.cpp and tests/unit/frontends/image/resize_levels_test.cpp.
//
// The plan itself is pil_resize_plan.h (production code); this adds synthetic tables and pixels. The coefficient
// tables come from a callback: the kernel tests use pil_like_table() below (PIL's tap geometry,
// jittered weights that overshoot so the clamps run; any table is a valid input), the frontends test the image
// frontend's own pil_resample_coeffs (the real thing, so its twin must give the frontend's levels exactly).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "kernels/pil_resize/pil_resize.h"
#include "kernels/pil_resize/pil_resize_plan.h"

namespace mmserve::kernels::pil_resize_test {

using AxisTable = PilAxisTable;
using TableFn = PilTableFn;

// PIL's geometry (support widened by the scale when shrinking, taps clipped to the image) with weights of a
// triangle of that support, jittered by +-`jitter` of 2^22 and not renormalised, so sums run a little over and
// under 2^22 and both clamps are hit. |sum of a row's weights| stays below 2^23: no int32 overflow.
inline AxisTable pil_like_table(int in_size, int out_size, int start, int count, double support_base, uint32_t seed,
                                double jitter = 0.3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(-jitter, jitter);
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_base * filterscale;
  AxisTable t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.coeffs.assign(static_cast<size_t>(count) * t.ksize, 0);
  for (int i = 0; i < count; ++i) {
    const double center = (start + i + 0.5) * scale;
    const int xmin = std::max(0, static_cast<int>(center - support + 0.5));
    const int xmax = std::min(in_size, static_cast<int>(center + support + 0.5));
    std::vector<double> w(static_cast<size_t>(std::max(0, xmax - xmin)));
    double sum = 0.0;
    for (size_t x = 0; x < w.size(); ++x) {
      w[x] = std::max(0.0, 1.0 - std::abs((static_cast<double>(x) + xmin - center + 0.5) / filterscale / support_base));
      sum += w[x];
    }
    for (size_t x = 0; x < w.size(); ++x) {
      const double k = (sum > 0 ? w[x] / sum : 0.0) + noise(rng) / static_cast<double>(w.size());
      t.coeffs[static_cast<size_t>(i) * t.ksize + x] = static_cast<int32_t>(std::lround(k * (1 << 22)));
    }
    t.xmin.push_back(xmin);
    t.taps.push_back(static_cast<int32_t>(w.size()));
  }
  return t;
}

using Placement = PilPlacement;
using kernels::center_crop_placement;
using kernels::pad_placement;

// HF's resized sizes ({width, height}) for the kernel tests' size grid (the frontends test uses the frontend's
// own shortest_edge_size / sam_resized_size): CLIP's short side -> edge, long side int(edge * long / short);
// SAM's long side -> edge, short side int(short * edge / long + 0.5).
inline std::pair<int, int> shortest_edge_resized(int w, int h, int edge) {
  const double scaled = static_cast<double>(edge) * std::max(w, h) / std::min(w, h);
  return w <= h ? std::pair{edge, static_cast<int>(scaled)} : std::pair{static_cast<int>(scaled), edge};
}
inline std::pair<int, int> longest_edge_resized(int w, int h, int edge) {
  const double scale = static_cast<double>(edge) / std::max(w, h);
  return {static_cast<int>(w * scale + 0.5), static_cast<int>(h * scale + 0.5)};
}

inline std::vector<uint8_t> random_pixels(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  // Mostly noise, with runs of 0 and 255 so the clamps and flat regions show up.
  for (size_t i = 0; i < pixels.size(); ++i) {
    const uint32_t r = rng();
    pixels[i] = static_cast<uint8_t>(r % 16 == 0 ? 0 : r % 16 == 1 ? 255 : (r >> 8));
  }
  return pixels;
}

// A batch on the host: the images' bytes one after another, with their plan (pil_resize_plan.h: images, tables,
// scratch_bytes).
struct HostBatch : PilResizePlan {
  int out_w = 0, out_h = 0;
  std::vector<uint8_t> src;

  HostBatch(int out_width, int out_height) : out_w(out_width), out_h(out_height) {}

  // Appends one image.
  void add(const std::vector<uint8_t>& pixels, int width, int height, const Placement& p, const TableFn& table) {
    const auto offset = static_cast<int64_t>(src.size());
    src.insert(src.end(), pixels.begin(), pixels.end());
    PilResizePlan::add(offset, width, height, p, table);
  }

  // Host or device pointers for the same layout (the CUDA test uploads src and tables).
  PilResizeBatch batch(const uint8_t* src_ptr, const int32_t* tables_ptr, uint8_t* scratch, uint8_t* out) const {
    return PilResizePlan::batch(src_ptr, static_cast<int64_t>(src.size()), tables_ptr, scratch, out, out_w, out_h);
  }
  size_t out_bytes() const { return images.size() * 3 * static_cast<size_t>(out_w) * out_h; }
};

}  // namespace mmserve::kernels::pil_resize_test
