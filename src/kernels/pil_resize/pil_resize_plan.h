// Building pil_resize batches (pil_resize.h) from image geometry: where each image's resized window lands in the
// output (HF's centre crop for CLIP, SAM's bottom/right padding), and its per-axis descriptors and tables.
//
// The coefficient tables come from a callback, so this layer needs no resampling code of its own: the engine's
// GPU image path passes the image frontend's own pil_resample_coeffs (frontends/image/resample.h), which is what
// makes its levels the CPU path's bit for bit; the kernel tests pass synthetic tables (pil_resize_test_util.h).
// Used by engine/clip_image_decode.cpp and the kernel tests. Tests: pil_resize_test.cpp,
// tests/unit/frontends/image/resize_levels_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/pil_resize/pil_resize.h"

namespace mmserve::kernels {

// One axis' table for output indices [start, start + count) of an in -> out resize (resample.h's ResampleCoeffs).
struct PilAxisTable {
  int ksize = 0;
  std::vector<int32_t> xmin, taps, coeffs;
};
using PilTableFn = std::function<PilAxisTable(int in_size, int out_size, int start, int count)>;

// Where one image goes: resized to resized_w x resized_h, its window [keep_x, keep_x + keep_w) x [keep_y, keep_y +
// keep_h) lands at (dst_x, dst_y) of the output.
struct PilPlacement {
  int resized_w = 0, resized_h = 0;
  int keep_x = 0, keep_w = 0, dst_x = 0;
  int keep_y = 0, keep_h = 0, dst_y = 0;
};

// HF's centre crop of a resized image (image_transforms.center_crop): offsets floor((size - crop) / 2), and when
// smaller the image is zero-padded, placed at ceil((crop - size) / 2).
inline PilPlacement center_crop_placement(int resized_w, int resized_h, int crop_w, int crop_h) {
  PilPlacement p;
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
inline PilPlacement pad_placement(int resized_w, int resized_h) {
  return PilPlacement{resized_w, resized_h, 0, resized_w, 0, 0, resized_h, 0};
}

// The descriptors and tables of a batch, built image by image; the caller owns the source bytes (src_offset is
// where each image's RGB8 HWC pixels start in the batch's `src`).
struct PilResizePlan {
  std::vector<PilResizeImage> images;
  std::vector<int32_t> tables;
  int64_t scratch_bytes = 0;

  void clear() {
    images.clear();
    tables.clear();
    scratch_bytes = 0;
  }

  // Appends one image. The pass along an axis runs when the resized size differs from the source's (PIL).
  void add(int64_t src_offset, int width, int height, const PilPlacement& p, const PilTableFn& table) {
    PilResizeImage im;
    im.src_offset = src_offset;
    im.src_width = width;
    im.src_height = height;
    im.x = axis(width, p.resized_w, p.keep_x, p.keep_w, p.dst_x, table);
    im.y = axis(height, p.resized_h, p.keep_y, p.keep_h, p.dst_y, table);
    im.scratch_offset = scratch_bytes;  // pil_resize_plan_scratch's layout, one image at a time
    scratch_bytes += (pil_resize_scratch_bytes(im) + 15) / 16 * 16;
    images.push_back(im);
  }

  // The batch over these images (host or device pointers for src, tables, scratch and out, as the twin needs).
  PilResizeBatch batch(const uint8_t* src, int64_t src_bytes, const int32_t* tables_ptr, uint8_t* scratch,
                       uint8_t* out, int out_width, int out_height) const {
    PilResizeBatch b;
    b.src = src;
    b.src_bytes = src_bytes;
    b.images = images.data();
    b.n = static_cast<int>(images.size());
    b.tables = tables_ptr;
    b.tables_count = static_cast<int64_t>(tables.size());
    b.scratch = scratch;
    b.scratch_bytes = scratch_bytes;
    b.out = out;
    b.out_width = out_width;
    b.out_height = out_height;
    return b;
  }

 private:
  PilResizeAxis axis(int src_size, int resized, int keep, int count, int dst, const PilTableFn& table) {
    PilResizeAxis a;
    a.count = count;
    a.dst = dst;
    a.resample = resized != src_size;
    if (!a.resample || count == 0) {
      a.src_start = keep;
      a.src_count = count;
      return a;
    }
    const PilAxisTable t = table(src_size, resized, keep, count);
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

}  // namespace mmserve::kernels
