// encode_png (see png_encode.h): libpng's write API into a string. Nothing a client sends reaches here (the pixels
// are our own masks and pictures), so libpng's errors can only be out-of-memory: they end in an empty result.
#include "frontends/image/png_encode.h"

#include <png.h>

#include <csetjmp>
#include <vector>

namespace mmserve::image {
namespace {

void write_to_string(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), length);
}

void flush_nothing(png_structp) {}

}  // namespace

std::string encode_png(const uint8_t* pixels, int width, int height, int channels, int level) {
  std::string out;
  const int color = channels == 1   ? PNG_COLOR_TYPE_GRAY
                    : channels == 3 ? PNG_COLOR_TYPE_RGB
                    : channels == 4 ? PNG_COLOR_TYPE_RGB_ALPHA
                                    : -1;
  if (color < 0 || width <= 0 || height <= 0) return out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (png == nullptr) return out;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return out;
  }
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return std::string();
  }
  png_set_write_fn(png, &out, write_to_string, flush_nothing);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, color,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (level >= 0) png_set_compression_level(png, level);
  const size_t stride = static_cast<size_t>(width) * channels;
  for (int y = 0; y < height; ++y) rows[static_cast<size_t>(y)] = const_cast<png_bytep>(pixels + y * stride);
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace mmserve::image
