// PIL's Image.resize (8-bit RGB, Resample.c's 8bpc passes) of a batch of RGB8 HWC images, each placed into a
// fixed [3, out_height, out_width] u8 CHW output through a crop window and zero padding: the image frontend's
// resize + centre crop + to_pixel_levels (CLIP) or resize + pad (SAM), done where the images were decoded.
//
// Per image the caller gives PIL's fixed-point tables for the kept window (frontends/image/resample.h:
// pil_resample_coeffs, flattened into one int32 array `tables`), so both twins compute from the very same
// integers as the CPU path, bit for bit:
//   horizontal pass (when it runs): temp[r][x][c] = clip8(2^21 + sum_t src[r][xmin_x + t][c] * kx[x][t]) for each
//     source row r the vertical pass reads, 8-bit HWC rows in `scratch`;
//   vertical pass (when it runs): v[y][x][c] = clip8(2^21 + sum_t temp[ymin_y + t][x][c] * ky[y][t]), reading
//     the source itself when the horizontal pass does not run;
//   clip8(a) = clamp(a >> 22, 0, 255) (arithmetic shift); int32 accumulators (PRECISION_BITS = 22), as PIL's.
// A pass that does not run (PIL skips it when that dimension is unchanged; the identity resize is a copy) takes
// the window's source indices as they are. The window (x.count x y.count pixels of the resized image) lands at
// (x.dst, y.dst) of the output; every other output byte is 0 (CLIP's crop of a small image pads with 0, SAM pads
// bottom/right). Rows of the temporary are only those the vertical pass reads ([y.src_start, y.src_start +
// y.src_count)), as PIL's ybox does: that never changes a value, and bounds the scratch for extreme aspect ratios.
//
// Layout: src: images at byte offsets, each height x width x 3 (rows contiguous); tables: int32 (per axis: xmin
// and taps per window index, coefficients at stride ksize, PIL's layout); out: [n, 3, out_height, out_width] u8.
// Tests: pil_resize_test.cpp (against a naive reimplementation), pil_resize_cuda_test.cpp (GPU == this twin),
// tests/unit/frontends/image/resize_levels_test.cpp (fed pil_resample_coeffs == the image frontend's levels);
// bench: pil_resize_cuda_bench.cpp.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace mmserve::kernels {

// One axis of one image: which part of the resized image is kept, where it goes, and how it is computed.
struct PilResizeAxis {
  int count = 0;          // window size: kept output indices along this axis (table entries when `resample`)
  int dst = 0;            // where the window's first index lands in the output
  bool resample = false;  // whether PIL's pass runs along this axis (false: the size is unchanged)
  // The source indices this axis reads: [src_start, src_start + src_count). Without a pass, the window itself
  // (src_count == count); with one, every tap of its table (xmin of the first entry to xmin + taps of the last).
  int src_start = 0;
  int src_count = 0;
  // With `resample`: offsets into the batch's `tables` of this axis' xmin[count], taps[count] (absolute source
  // indices and tap counts, each taps <= ksize) and coefficients[count * ksize].
  int ksize = 0;
  int32_t xmin = 0;
  int32_t taps = 0;
  int32_t coeffs = 0;
};

struct PilResizeImage {
  int64_t src_offset = 0;  // bytes into the batch's `src`
  int src_width = 0;
  int src_height = 0;
  PilResizeAxis x, y;
  int64_t scratch_offset = 0;  // bytes into `scratch` of this image's temporary (pil_resize_plan_scratch sets it)
};

struct PilResizeBatch {
  const uint8_t* src = nullptr;
  int64_t src_bytes = 0;
  const PilResizeImage* images = nullptr;  // host memory, n entries (both twins)
  int n = 0;
  const int32_t* tables = nullptr;
  int64_t tables_count = 0;
  uint8_t* scratch = nullptr;  // the horizontal pass's temporaries (images with both passes only)
  int64_t scratch_bytes = 0;
  uint8_t* out = nullptr;  // [n, 3, out_height, out_width]
  int out_width = 0;
  int out_height = 0;
};

// Bytes of the temporary of one image: x.count * y.src_count * 3 when both passes run, else 0.
int64_t pil_resize_scratch_bytes(const PilResizeImage& image);
// Lays the temporaries out one after another (16-byte aligned), writing each image's scratch_offset; returns the
// bytes `scratch` must hold.
int64_t pil_resize_plan_scratch(PilResizeImage* images, int n);

// kInvalidArgument unless every size, offset and range of `batch` is consistent: output sizes in [1, 65535],
// windows inside the output, source ranges inside the images, images inside src_bytes, tables inside
// tables_count, temporaries inside scratch_bytes, non-null pointers where anything is read or written. Reads
// host fields only (never the tables), so the CUDA twin calls it before any launch.
Status pil_resize_validate(const PilResizeBatch& batch);

// CPU twin (host pointers). pil_resize_validate's errors, and kInvalidArgument for a table whose taps leave the
// axis' source range or exceed ksize (the CUDA twin trusts the tables: they come from pil_resample_coeffs).
Status pil_resize_cpu(const PilResizeBatch& batch);

}  // namespace mmserve::kernels
