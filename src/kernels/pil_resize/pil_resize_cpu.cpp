// The CPU twin of pil_resize.h, and the host-side checks and scratch plan both twins share. Plain loops, one
// thread: the horizontal pass into the image's temporary when both passes run, then per output pixel of the
// window the vertical pass over what the horizontal step gives for a source row (the temporary, the horizontal
// taps computed on the spot when only that pass runs, or the source pixel when neither runs) — the CUDA twin's
// structure, so a difference between them points at one step.
#include <cstring>
#include <string>

#include "kernels/pil_resize/pil_resize.h"

namespace mmserve::kernels {
namespace {

constexpr int kPrecisionBits = 22;  // Resample.c: 32 - 8 (bits of a sample) - 2 (headroom)

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

Status validate_axis(const PilResizeAxis& a, int src_size, int out_size, int64_t tables_count,
                     const std::string& what) {
  if (a.count < 0 || a.dst < 0 || int64_t{a.dst} + a.count > out_size) {
    return invalid_argument(what + ": window of " + std::to_string(a.count) + " at " + std::to_string(a.dst) +
                            " outside the output's " + std::to_string(out_size));
  }
  if (a.count == 0) return ok_status();  // nothing of this image is read
  if (a.src_start < 0 || a.src_count < 1 || int64_t{a.src_start} + a.src_count > src_size) {
    return invalid_argument(what + ": source range [" + std::to_string(a.src_start) + ", +" +
                            std::to_string(a.src_count) + ") outside the image's " + std::to_string(src_size));
  }
  if (!a.resample) {
    if (a.src_count != a.count) return invalid_argument(what + ": without a pass, src_count must equal count");
    return ok_status();
  }
  const bool inside = a.ksize >= 1 && a.xmin >= 0 && a.taps >= 0 && a.coeffs >= 0 &&
                      int64_t{a.xmin} + a.count <= tables_count && int64_t{a.taps} + a.count <= tables_count &&
                      a.coeffs + int64_t{a.count} * a.ksize <= tables_count;
  if (!inside) return invalid_argument(what + ": table outside `tables` (or ksize < 1)");
  return ok_status();
}

// The taps of an axis' table, checked against its source range (the CUDA twin trusts them).
Status check_table(const int32_t* tables, const PilResizeAxis& a, const std::string& what) {
  if (!a.resample) return ok_status();
  for (int i = 0; i < a.count; ++i) {
    const int32_t first = tables[a.xmin + i], taps = tables[a.taps + i];
    if (taps < 0 || taps > a.ksize || first < a.src_start ||
        int64_t{first} + taps > int64_t{a.src_start} + a.src_count) {
      return invalid_argument(what + ": entry " + std::to_string(i) + " reads outside the source range");
    }
  }
  return ok_status();
}

// PIL's horizontal pass at window column wx of one source row (HWC), channel c.
uint8_t horizontal_value(const uint8_t* row, const int32_t* tables, const PilResizeAxis& x, int wx, int c) {
  const int32_t first = tables[x.xmin + wx], taps = tables[x.taps + wx];
  const int32_t* k = tables + x.coeffs + static_cast<int64_t>(wx) * x.ksize;
  int32_t acc = 1 << (kPrecisionBits - 1);
  for (int t = 0; t < taps; ++t) acc += row[(first + t) * 3 + c] * k[t];
  return clip8(acc);
}

void resize_image(const PilResizeBatch& b, const PilResizeImage& im, uint8_t* out) {
  const int64_t plane = int64_t{b.out_width} * b.out_height;
  std::memset(out, 0, static_cast<size_t>(3 * plane));  // the padding (and everything, for an empty window)
  const PilResizeAxis &x = im.x, &y = im.y;
  if (x.count == 0 || y.count == 0) return;
  const uint8_t* src = b.src + im.src_offset;
  const int64_t stride = int64_t{im.src_width} * 3;
  const bool temporary = pil_resize_scratch_bytes(im) > 0;
  uint8_t* temp = temporary ? b.scratch + im.scratch_offset : nullptr;
  if (temporary) {
    for (int r = 0; r < y.src_count; ++r) {
      for (int wx = 0; wx < x.count; ++wx) {
        for (int c = 0; c < 3; ++c) {
          temp[(int64_t{r} * x.count + wx) * 3 + c] =
              horizontal_value(src + (y.src_start + r) * stride, b.tables, x, wx, c);
        }
      }
    }
  }
  // What the vertical step reads at source row r, window column wx.
  const auto row_value = [&](int r, int wx, int c) -> uint8_t {
    if (temporary) return temp[(int64_t{r - y.src_start} * x.count + wx) * 3 + c];
    const uint8_t* row = src + r * stride;
    return x.resample ? horizontal_value(row, b.tables, x, wx, c) : row[(x.src_start + wx) * 3 + c];
  };
  for (int wy = 0; wy < y.count; ++wy) {
    for (int wx = 0; wx < x.count; ++wx) {
      const int64_t at = int64_t{y.dst + wy} * b.out_width + x.dst + wx;
      for (int c = 0; c < 3; ++c) {
        uint8_t v;
        if (y.resample) {
          const int32_t first = b.tables[y.xmin + wy], taps = b.tables[y.taps + wy];
          const int32_t* k = b.tables + y.coeffs + static_cast<int64_t>(wy) * y.ksize;
          int32_t acc = 1 << (kPrecisionBits - 1);
          for (int t = 0; t < taps; ++t) acc += row_value(first + t, wx, c) * k[t];
          v = clip8(acc);
        } else {
          v = row_value(y.src_start + wy, wx, c);
        }
        out[c * plane + at] = v;
      }
    }
  }
}

}  // namespace

int64_t pil_resize_scratch_bytes(const PilResizeImage& image) {
  if (!image.x.resample || !image.y.resample || image.x.count <= 0 || image.y.count <= 0) return 0;
  return int64_t{image.x.count} * image.y.src_count * 3;
}

int64_t pil_resize_plan_scratch(PilResizeImage* images, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    images[i].scratch_offset = total;
    total += (pil_resize_scratch_bytes(images[i]) + 15) / 16 * 16;  // each temporary 16-byte aligned
  }
  return total;
}

Status pil_resize_validate(const PilResizeBatch& b) {
  if (b.n < 0 || b.out_width < 1 || b.out_width > 65535 || b.out_height < 1 || b.out_height > 65535) {
    return invalid_argument("pil_resize: bad batch shape (n " + std::to_string(b.n) + ", output " +
                            std::to_string(b.out_width) + "x" + std::to_string(b.out_height) + ")");
  }
  if (b.n == 0) return ok_status();
  if (b.images == nullptr || b.src == nullptr || b.out == nullptr) return invalid_argument("pil_resize: null pointer");
  for (int i = 0; i < b.n; ++i) {
    const PilResizeImage& im = b.images[i];
    const std::string what = "pil_resize: image " + std::to_string(i);
    if (im.src_width < 1 || im.src_height < 1 || im.src_offset < 0 ||
        im.src_offset + int64_t{im.src_width} * im.src_height * 3 > b.src_bytes) {
      return invalid_argument(what + ": " + std::to_string(im.src_width) + "x" + std::to_string(im.src_height) +
                              " at " + std::to_string(im.src_offset) + " outside src_bytes");
    }
    RETURN_IF_ERROR(validate_axis(im.x, im.src_width, b.out_width, b.tables_count, what + " x"));
    RETURN_IF_ERROR(validate_axis(im.y, im.src_height, b.out_height, b.tables_count, what + " y"));
    const bool reads_tables = (im.x.resample || im.y.resample) && im.x.count > 0 && im.y.count > 0;
    if (reads_tables && b.tables == nullptr) return invalid_argument(what + ": null tables");
    const int64_t temp = pil_resize_scratch_bytes(im);
    if (temp > 0 && (b.scratch == nullptr || im.scratch_offset < 0 || im.scratch_offset + temp > b.scratch_bytes)) {
      return invalid_argument(what + ": temporary of " + std::to_string(temp) + " bytes at " +
                              std::to_string(im.scratch_offset) + " outside scratch (pil_resize_plan_scratch)");
    }
  }
  return ok_status();
}

Status pil_resize_cpu(const PilResizeBatch& batch) {
  RETURN_IF_ERROR(pil_resize_validate(batch));
  for (int i = 0; i < batch.n; ++i) {
    const PilResizeImage& im = batch.images[i];
    if (im.x.count == 0 || im.y.count == 0) continue;
    const std::string what = "pil_resize: image " + std::to_string(i);
    RETURN_IF_ERROR(check_table(batch.tables, im.x, what + " x"));
    RETURN_IF_ERROR(check_table(batch.tables, im.y, what + " y"));
  }
  const int64_t image_bytes = int64_t{3} * batch.out_width * batch.out_height;
  for (int i = 0; i < batch.n; ++i) resize_image(batch, batch.images[i], batch.out + i * image_bytes);
  return ok_status();
}

}  // namespace mmserve::kernels
