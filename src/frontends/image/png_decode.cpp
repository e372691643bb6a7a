// PNG decoding with libpng, reproducing PIL's PngImagePlugin `_MODES` + Unpack.c + Convert.c ("RGB").
//
// PIL's rules for each (bit depth, colour type), all reproduced here:
//   gray 1/2/4/8   -> "1" / "L;2" / "L;4" / "L": samples scaled to 8 bits (x255, x85, x17, x1);
//   gray 16        -> "I;16" (value v); convert("RGB") goes through I16_RGB / I;16->L: min(v, 255),
//                     i.e. any value above 255 becomes white (no shift, no rescale);
//   RGB 8/16       -> "RGB" / "RGB;16B": the most significant byte of each 16-bit sample;
//   palette 1-8    -> "P": indices expanded through PLTE; entries past the PLTE length are black (PIL's
//                     palette is calloc'ed); tRNS only sets info["transparency"], ignored by "RGB";
//   gray+alpha 8/16-> "LA" / "LA;16B" (into RGBA): gray (its MSB), alpha dropped, not composited;
//   RGBA 8/16      -> "RGBA" / "RGBA;16B": RGB (MSBs), alpha dropped.
// Gray/RGB tRNS, gAMA, sRGB, iCCP and sBIT are ignored (PIL applies none of them), so the only libpng
// transforms used are packing (sub-byte samples to one byte each, unscaled), strip_16 (keeps the MSB;
// never for 16-bit gray, which needs the whole value) and Adam7 interlace handling. APNG files decode as
// their default image (libpng skips the animation chunks), which is PIL's frame 0.
// Errors: libpng's error callback longjmps back into the two small "guarded" functions below; they hold no
// C++ object with a destructor. Benign errors (e.g. trailing compressed data) are warnings, as in PIL.
// A fast path decodes the common well-formed file without libpng: 8-bit gray, gray+alpha, RGB or RGBA, not
// interlaced, only IHDR / IDAT / IEND chunks (and before the IDATs the ancillary chunks libpng cannot fail on),
// IDAT chunks within every libpng build's length limit, every CRC right, one zlib stream with a 32 KiB window that
// inflates (libdeflate, ~1.6x zlib's speed) to exactly the image's filtered rows; the rows are unfiltered here
// and converted by the same convert_row. Anything else (and any doubt) goes to libpng, which therefore still
// produces every error message. The fast path's checks up to the inflate are split_png_for_device (png_device.h),
// which also hands the zlib stream to the GPU decoder (kernels/png_inflate); decode_png_fast inflates what it gives.
// Tests: tests/unit/frontends/image/png_variants_test.cpp, image_decode_test.cpp, png_fast_path_test.cpp;
// fuzz/png_fast_path_fuzz.cpp checks that the two paths agree.
#include <libdeflate.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "frontends/image/codecs.h"
#include "frontends/image/png_device.h"

namespace mmserve::image::detail {
namespace {

// Trivially destructible reader state: lives across setjmp.
struct PngReader {
  png_structp png;
  png_infop info;
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

// What the pixel pass needs, filled from IHDR/PLTE after png_read_info.
struct PngLayout {
  int width;
  int height;
  int bit_depth;
  int color_type;
  int interlace;
  size_t native_row_bytes;   // after packing / strip_16
  uint8_t palette[256 * 3];  // zero beyond the PLTE entries, as PIL's palette
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* reader = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(reader->message, sizeof(reader->message), "%s", message);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void on_png_read(png_structp png, png_bytep out, size_t count) {
  auto* reader = static_cast<PngReader*>(png_get_io_ptr(png));
  if (count > reader->size - reader->pos) png_error(png, "truncated data");
  std::memcpy(out, reader->data + reader->pos, count);
  reader->pos += count;
}

// Reads the signature and every chunk up to the first IDAT. False on a libpng error.
bool read_info_guarded(PngReader* r, PngLayout* layout) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  // libpng's default 1,000,000 x 1,000,000 limit would refuse a 2,000,000 x 1 strip PIL opens; our own
  // pixel-count guard (applied by the caller) is the limit that matters.
  png_set_user_limits(r->png, 0x7fffffff, 0x7fffffff);
  png_set_benign_errors(r->png, 1);
  png_set_read_fn(r->png, r, on_png_read);
  png_read_info(r->png, r->info);
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  png_get_IHDR(r->png, r->info, &width, &height, &bit_depth, &color_type, &interlace, nullptr, nullptr);
  layout->width = static_cast<int>(width);
  layout->height = static_cast<int>(height);
  layout->bit_depth = bit_depth;
  layout->color_type = color_type;
  layout->interlace = interlace;
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp entries = nullptr;
    int count = 0;
    if (png_get_PLTE(r->png, r->info, &entries, &count) == 0) png_error(r->png, "palette image without PLTE");
    for (size_t i = 0; i < static_cast<size_t>(count) && i < 256; ++i) {
      layout->palette[3 * i] = entries[i].red;
      layout->palette[3 * i + 1] = entries[i].green;
      layout->palette[3 * i + 2] = entries[i].blue;
    }
  }
  return true;
}

int channels_of(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    case PNG_COLOR_TYPE_PALETTE: return 1;
    default: return 0;
  }
}

// One native row (after packing / strip_16) to RGB8, by PIL's rules (see the file comment).
void convert_row(const PngLayout& layout, const uint8_t* in, uint8_t* out) {
  const size_t width = static_cast<size_t>(layout.width);
  switch (layout.color_type) {
    case PNG_COLOR_TYPE_GRAY: {
      if (layout.bit_depth == 16) {
        for (size_t x = 0; x < width; ++x) {
          const uint8_t v = in[2 * x] != 0 ? 255 : in[2 * x + 1];  // big-endian; min(v, 255)
          out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = v;
        }
        return;
      }
      const int scale = layout.bit_depth == 1 ? 255 : layout.bit_depth == 2 ? 0x55 : layout.bit_depth == 4 ? 0x11 : 1;
      for (size_t x = 0; x < width; ++x) {
        const auto v = static_cast<uint8_t>(in[x] * scale);
        out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = v;
      }
      return;
    }
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      for (size_t x = 0; x < width; ++x) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = in[2 * x];
      return;
    case PNG_COLOR_TYPE_RGB: std::memcpy(out, in, width * 3); return;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      for (size_t x = 0; x < width; ++x) {
        out[3 * x] = in[4 * x];
        out[3 * x + 1] = in[4 * x + 1];
        out[3 * x + 2] = in[4 * x + 2];
      }
      return;
    case PNG_COLOR_TYPE_PALETTE:
      for (size_t x = 0; x < width; ++x) std::memcpy(out + 3 * x, layout.palette + 3 * size_t{in[x]}, 3);
      return;
    default: return;
  }
}

// Sets up the transforms and decodes every row into `rgb`. `rows` holds `height` pointers into a whole
// native image when interlaced (Adam7 needs all rows at once), else one pointer to a single row buffer.
bool read_pixels_guarded(PngReader* r, const PngLayout* layout, png_bytepp rows, uint8_t* rgb) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  if (layout->bit_depth < 8) png_set_packing(r->png);
  if (layout->bit_depth == 16 && layout->color_type != PNG_COLOR_TYPE_GRAY) png_set_strip_16(r->png);
  const int passes = png_set_interlace_handling(r->png);
  png_read_update_info(r->png, r->info);
  if (png_get_rowbytes(r->png, r->info) != layout->native_row_bytes) {
    png_error(r->png, "unexpected row size after transforms");
  }
  const size_t out_stride = static_cast<size_t>(layout->width) * 3;
  if (passes > 1) {
    png_read_image(r->png, rows);
    for (int y = 0; y < layout->height; ++y) convert_row(*layout, rows[y], rgb + out_stride * static_cast<size_t>(y));
  } else {
    for (int y = 0; y < layout->height; ++y) {
      png_read_row(r->png, rows[0], nullptr);
      convert_row(*layout, rows[0], rgb + out_stride * static_cast<size_t>(y));
    }
  }
  return true;
}

struct ReaderGuard {
  PngReader* reader;
  ~ReaderGuard() {
    if (reader->png != nullptr) png_destroy_read_struct(&reader->png, &reader->info, nullptr);
  }
};

Status png_error_status(const char* what) {
  return invalid_argument(std::string("PNG: ") + what);
}

// ---- The fast path (see the file comment). ----

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

libdeflate_decompressor* thread_decompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> decompressor(
      libdeflate_alloc_decompressor());
  return decompressor.get();
}

// Ancillary chunks before the first IDAT that libpng reads into png_info only, each of whose faults (wrong length,
// duplicate, bad profile or text, out of memory) is a benign error, i.e. a warning here (png_set_benign_errors):
// none of them can fail the decode or change a pixel (PIL ignores them all; see the file comment). Any other chunk
// sends the file to libpng.
bool harmless_ancillary(const uint8_t* type) {
  static constexpr char kTypes[][5] = {"gAMA", "cHRM", "sRGB", "iCCP", "sBIT", "pHYs",
                                       "tIME", "tEXt", "zTXt", "iTXt", "tRNS"};
  for (const char* t : kTypes) {
    if (std::memcmp(type, t, 4) == 0) return true;
  }
  return false;
}
// Far below libpng's default chunk allocation limit (user_chunk_malloc_max, 8,000,000 bytes: a chunk above it is a
// fatal "chunk data is too large").
constexpr uint32_t kAncillaryBytesMax = 1u << 20;

// The lower bound of libpng's limit on one IDAT chunk (png_check_chunk_length: max(this, user_chunk_malloc_max),
// above which "chunk data is too large" is fatal): the filtered image plus zlib's and deflate's overhead, for 8-bit
// non-interlaced rows. Below it no libpng build refuses the chunk.
size_t idat_length_max(uint32_t width, uint32_t height, int channels) {
  size_t row_factor = size_t{width} * static_cast<size_t>(channels) + 1;
  size_t limit = height > 0xffffffffu / row_factor ? 0x7fffffffu : size_t{height} * row_factor;
  row_factor = std::min<size_t>(row_factor, 32566);
  limit += 6 + 5 * (limit / row_factor + 1);
  return std::min<size_t>(limit, 0x7fffffffu);
}

// Reverses one row's filter in place (`prev` is the unfiltered row above, or null for the first row). False for a
// filter type PNG does not define (libpng's "bad adaptive filter value").
bool unfilter_row(int filter, uint8_t* row, const uint8_t* prev, size_t bytes, size_t bpp) {
  switch (filter) {
    case 0: return true;
    case 1:
      for (size_t i = bpp; i < bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + row[i - bpp]);
      return true;
    case 2:
      if (prev != nullptr) {
        for (size_t i = 0; i < bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
      }
      return true;
    case 3:
      for (size_t i = 0; i < bytes; ++i) {
        const unsigned left = i >= bpp ? row[i - bpp] : 0, up = prev != nullptr ? prev[i] : 0;
        row[i] = static_cast<uint8_t>(row[i] + ((left + up) >> 1));
      }
      return true;
    case 4:
      for (size_t i = 0; i < bytes; ++i) {
        const int a = i >= bpp ? row[i - bpp] : 0, b = prev != nullptr ? prev[i] : 0,
                  c = i >= bpp && prev != nullptr ? prev[i - bpp] : 0;
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        const int predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
        row[i] = static_cast<uint8_t>(row[i] + predictor);
      }
      return true;
    default: return false;
  }
}

}  // namespace
}  // namespace mmserve::image::detail

namespace mmserve::image {

bool png_header_fits_device(std::span<const uint8_t> bytes) {
  using detail::load_be32;
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const uint8_t* p = bytes.data();
  if (bytes.size() < 8 + 25 || std::memcmp(p, kSignature, 8) != 0) return false;
  // IHDR first (13 bytes), as the fast path takes it: 8-bit, not palette, deflate, filter method 0, no interlace.
  if (load_be32(p + 8) != 13 || std::memcmp(p + 12, "IHDR", 4) != 0) return false;
  const uint8_t* ihdr = p + 16;
  const uint32_t width = load_be32(ihdr), height = load_be32(ihdr + 4);
  const int bit_depth = ihdr[8], color_type = ihdr[9];
  return width != 0 && height != 0 && width <= 0x7fffffffu && height <= 0x7fffffffu && bit_depth == 8 &&
         (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA ||
          color_type == PNG_COLOR_TYPE_RGB || color_type == PNG_COLOR_TYPE_RGB_ALPHA) &&
         ihdr[10] == 0 && ihdr[11] == 0 && ihdr[12] == 0;
}

// The fast path's checks up to the inflate (see the file comment); decode_png_fast inflates what this returns.
std::optional<StatusOr<PngStream>> split_png_for_device(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  using detail::load_be32;
  if (!png_header_fits_device(bytes)) return std::nullopt;
  const uint8_t* p = bytes.data();
  const size_t size = bytes.size();
  const uint8_t* ihdr = p + 16;
  const uint32_t width = load_be32(ihdr), height = load_be32(ihdr + 4);
  const int color_type = ihdr[9];
  // Every chunk up to IEND: harmless ancillary chunks, then only IDATs up to IEND; lengths within the file and
  // below 2^31, every CRC right.
  std::vector<std::pair<const uint8_t*, size_t>> idats;
  size_t idat_bytes = 0;
  bool ended = false;
  for (size_t pos = 8; !ended;) {
    if (size - pos < 12) return std::nullopt;
    const uint32_t length = load_be32(p + pos);
    if (length > 0x7fffffffu || length > size - pos - 12) return std::nullopt;
    const uint8_t* type = p + pos + 4;
    const uint32_t crc = load_be32(type + 4 + length);
    if (libdeflate_crc32(0, type, 4 + size_t{length}) != crc) return std::nullopt;
    if (pos == 8) {  // IHDR, checked above
    } else if (std::memcmp(type, "IDAT", 4) == 0) {
      if (length > detail::idat_length_max(width, height, detail::channels_of(color_type))) return std::nullopt;
      idats.emplace_back(type + 4, length);
      idat_bytes += length;
    } else if (idats.empty() && detail::harmless_ancillary(type) && length <= detail::kAncillaryBytesMax) {
    } else if (std::memcmp(type, "IEND", 4) == 0 && length == 0 && !idats.empty()) {
      ended = true;
    } else {
      return std::nullopt;
    }
    pos += 12 + size_t{length};
  }
  if (Status s = detail::check_dimensions("PNG", width, height, options); !s.ok()) return StatusOr<PngStream>(s);

  PngStream png;
  png.width = width;
  png.height = height;
  png.channels = detail::channels_of(color_type);
  png.color_type = color_type;
  if (idats.size() == 1) {
    png.borrowed = std::span<const uint8_t>(idats.front().first, idats.front().second);
  } else {
    png.joined.reserve(idat_bytes);
    for (const auto& [data, length] : idats) png.joined.insert(png.joined.end(), data, data + length);
  }
  // One zlib stream with a 32 KiB window (a smaller declared window lets zlib refuse distances libdeflate takes).
  const std::span<const uint8_t> stream = png.zlib();
  if (stream.size() < 2 || (stream[0] >> 4) != 7) return std::nullopt;
  return StatusOr<PngStream>(std::move(png));
}

}  // namespace mmserve::image

namespace mmserve::image::detail {

std::optional<StatusOr<RgbImage>> decode_png_fast(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  std::optional<StatusOr<PngStream>> split = split_png_for_device(bytes, options);
  if (!split.has_value()) return std::nullopt;
  if (!split->ok()) return StatusOr<RgbImage>(split->status());
  const PngStream& png = **split;
  const std::span<const uint8_t> stream = png.zlib();
  const size_t channels = static_cast<size_t>(png.channels);
  const size_t row_bytes = size_t{png.width} * channels;
  const size_t filtered_bytes = size_t{png.height} * (row_bytes + 1);
  std::vector<uint8_t> filtered(filtered_bytes);
  size_t in_used = 0, out_made = 0;
  if (libdeflate_zlib_decompress_ex(thread_decompressor(), stream.data(), stream.size(), filtered.data(),
                                    filtered_bytes, &in_used, &out_made) != LIBDEFLATE_SUCCESS ||
      in_used != stream.size() || out_made != filtered_bytes) {
    return std::nullopt;
  }

  PngLayout layout{};
  layout.width = static_cast<int>(png.width);
  layout.height = static_cast<int>(png.height);
  layout.bit_depth = 8;
  layout.color_type = png.color_type;
  RgbImage image;
  image.width = layout.width;
  image.height = layout.height;
  image.pixels.resize(size_t{png.width} * size_t{png.height} * 3);
  const uint8_t* prev = nullptr;
  for (size_t y = 0; y < png.height; ++y) {
    uint8_t* line = filtered.data() + y * (row_bytes + 1);
    if (!unfilter_row(line[0], line + 1, prev, row_bytes, channels)) return std::nullopt;
    convert_row(layout, line + 1, image.pixels.data() + y * size_t{png.width} * 3);
    prev = line + 1;
  }
  return StatusOr<RgbImage>(std::move(image));
}

StatusOr<RgbImage> decode_png_libpng(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  PngReader reader{};
  reader.data = bytes.data();
  reader.size = bytes.size();
  ReaderGuard guard{&reader};
  reader.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_png_error, on_png_warning);
  if (reader.png == nullptr) return internal_error("PNG: cannot create the libpng reader");
  reader.info = png_create_info_struct(reader.png);
  if (reader.info == nullptr) return internal_error("PNG: cannot create the libpng info struct");

  PngLayout layout{};
  if (!read_info_guarded(&reader, &layout)) return png_error_status(reader.message);
  RETURN_IF_ERROR(check_dimensions("PNG", layout.width, layout.height, options));
  const int channels = channels_of(layout.color_type);
  if (channels == 0) return png_error_status("unknown colour type");
  const size_t bytes_per_sample = layout.bit_depth == 16 && layout.color_type == PNG_COLOR_TYPE_GRAY ? 2 : 1;
  layout.native_row_bytes = static_cast<size_t>(layout.width) * static_cast<size_t>(channels) * bytes_per_sample;

  RgbImage image;
  image.width = layout.width;
  image.height = layout.height;
  image.pixels.resize(static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3);
  const bool interlaced = layout.interlace != PNG_INTERLACE_NONE;
  std::vector<uint8_t> native(layout.native_row_bytes * (interlaced ? static_cast<size_t>(layout.height) : 1));
  std::vector<png_bytep> rows(interlaced ? static_cast<size_t>(layout.height) : 1);
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = native.data() + y * layout.native_row_bytes;
  if (!read_pixels_guarded(&reader, &layout, rows.data(), image.pixels.data())) {
    return png_error_status(reader.message);
  }
  return image;
}

StatusOr<RgbImage> decode_png(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  if (std::optional<StatusOr<RgbImage>> fast = decode_png_fast(bytes, options)) return std::move(*fast);
  return decode_png_libpng(bytes, options);
}

}  // namespace mmserve::image::detail
