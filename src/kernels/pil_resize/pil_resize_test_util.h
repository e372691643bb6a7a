// Test-only: building pil_resize batches (pil_resize.h) from image geometry, shared by pil_resize_test.cpp,
// pil_resize_cuda_test.cpp, pil_resize_cuda_bench.cpp and tests/unit/frontends/image/resize_levels_test.cpp.
//
// The coefficient tables come from a callback: the kernel tests use pil_like_table() below (PIL's tap geometry,
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

namespace mmserve::kernels::pil_resize_test {

// One axis' table for output indices [start, start + count) of an in -> out resize (resample.h's ResampleCoeffs).
struct AxisTable {
  int ksize = 0;
  std::vector<int32_t> xmin, taps, coeffs;
};
using TableFn = std::function<AxisTable(int in_size, int out_size, int start, int count)>;

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

// Where one image goes: resized to resized_w x resized_h, its window [keep_x, keep_x + keep_w) x [keep_y, keep_y +
// keep_h) lands at (dst_x, dst_y) of the output.
struct Placement {
  int resized_w = 0, resized_h = 0;
  int keep_x = 0, keep_w = 0, dst_x = 0;
  int keep_y = 0, keep_h = 0, dst_y = 0;
};

// HF's centre crop of a resized image (image_transforms.center_crop): offsets floor((size - crop) / 2), and when
// smaller the image is zero-padded, placed at ceil((crop - size) / 2).
inline Placement center_crop_placement(int resized_w, int resized_h, int crop_w, int crop_h) {
  Placement p;
  p.resized_w = resized_w;
  p.resized_h = resized_h;
  const auto axis = [](int size, int crop, int& keep, int& count, int& dst) {
    if (crop <= size) {
      keep = (size - crop) / 2, count = crop, dst = 0;
    } else {
      keep = 0, count = size, dst = (crop - size + 1) / 2;
    }
  };
  axis(resized_w, crop_w, p.keep_x, p.keep_w, p.dst_x);
  axis(resized_h, crop_h, p.keep_y, p.keep_h, p.dst_y);
  return p;
}

// SAM's padding: the whole resized image at the top left, zeros at the bottom and right.
inline Placement pad_placement(int resized_w, int resized_h) {
  return Placement{resized_w, resized_h, 0, resized_w, 0, 0, resized_h, 0};
}

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

// A batch on the host: the images' bytes one after another, descriptors, tables; pointers set by batch().
struct HostBatch {
  int out_w = 0, out_h = 0;
  std::vector<uint8_t> src;
  std::vector<PilResizeImage> images;
  std::vector<int32_t> tables;
  int64_t scratch_bytes = 0;

  HostBatch(int out_width, int out_height) : out_w(out_width), out_h(out_height) {}

  // Appends one image. The pass along an axis runs when the resized size differs from the source's (PIL).
  void add(const std::vector<uint8_t>& pixels, int width, int height, const Placement& p, const TableFn& table) {
    PilResizeImage im;
    im.src_offset = static_cast<int64_t>(src.size());
    im.src_width = width;
    im.src_height = height;
    src.insert(src.end(), pixels.begin(), pixels.end());
    im.x = axis(width, p.resized_w, p.keep_x, p.keep_w, p.dst_x, table);
    im.y = axis(height, p.resized_h, p.keep_y, p.keep_h, p.dst_y, table);
    images.push_back(im);
    scratch_bytes = pil_resize_plan_scratch(images.data(), static_cast<int>(images.size()));
  }

  // Host or device pointers for the same layout (the CUDA test uploads src and tables).
  PilResizeBatch batch(const uint8_t* src_ptr, const int32_t* tables_ptr, uint8_t* scratch, uint8_t* out) const {
    PilResizeBatch b;
    b.src = src_ptr;
    b.src_bytes = static_cast<int64_t>(src.size());
    b.images = images.data();
    b.n = static_cast<int>(images.size());
    b.tables = tables_ptr;
    b.tables_count = static_cast<int64_t>(tables.size());
    b.scratch = scratch;
    b.scratch_bytes = scratch_bytes;
    b.out = out;
    b.out_width = out_w;
    b.out_height = out_h;
    return b;
  }
  size_t out_bytes() const { return images.size() * 3 * static_cast<size_t>(out_w) * out_h; }

 private:
  PilResizeAxis axis(int src_size, int resized, int keep, int count, int dst, const TableFn& table) {
    PilResizeAxis a;
    a.count = count;
    a.dst = dst;
    a.resample = resized != src_size;
    if (!a.resample || count == 0) {
      a.src_start = keep;
      a.src_count = count;
      return a;
    }
    const AxisTable t = table(src_size, resized, keep, count);
    a.ksize = t.ksize;
    a.xmin = append(t.xmin);
    a.taps = append(t.taps);
    a.coeffs = append(t.coeffs);
    int first = t.xmin.front(), end = first;  // every tap's source index (PIL's tables are monotonic anyway)
    for (int i = 0; i < count; ++i) {
      first = std::min(first, t.xmin[i]);
      end = std::max(end, t.xmin[i] + t.taps[i]);
    }
    a.src_start = first;
    a.src_count = end - first;
    return a;
  }
  int32_t append(const std::vector<int32_t>& v) {
    const auto at = static_cast<int32_t>(tables.size());
    tables.insert(tables.end(), v.begin(), v.end());
    return at;
  }
};

}  // namespace mmserve::kernels::pil_resize_test
