// Reference readers/writers for the image tests, straight from the libraries' plain APIs (see the header).
//
// Error handling mirrors the code under test only as far as needed not to abort: each libpng/libjpeg call
// sequence sits in a function whose locals are trivially destructible, with setjmp around it.
#include "reference_codecs.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>
// clang-format on

#include <png.h>
#include <webp/decode.h>
#include <zlib.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include "test_paths.h"

namespace mmserve::image::testing {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string fixture(const std::string& name) {
  return std::string(MMSERVE_FIXTURES_DIR) + "/images/" + name;
}

namespace {

struct MemReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void png_mem_read(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<MemReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "eof");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

void png_quiet_warning(png_structp, png_const_charp) {}

bool read_png_guarded(png_structp png, png_infop info, MemReader* reader, RawPng* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_benign_errors(png, 1);
  png_set_read_fn(png, reader, png_mem_read);
  png_read_png(png, info, PNG_TRANSFORM_PACKING, nullptr);
  out->width = static_cast<int>(png_get_image_width(png, info));
  out->height = static_cast<int>(png_get_image_height(png, info));
  out->bit_depth = png_get_bit_depth(png, info);
  out->color_type = png_get_color_type(png, info);
  out->channels = png_get_channels(png, info);
  out->row_bytes = png_get_rowbytes(png, info);
  png_bytepp rows = png_get_rows(png, info);
  out->data.resize(out->row_bytes * out->height);
  for (int y = 0; y < out->height; ++y) std::memcpy(out->data.data() + y * out->row_bytes, rows[y], out->row_bytes);
  png_colorp palette = nullptr;
  int count = 0;
  if (png_get_PLTE(png, info, &palette, &count) != 0) {
    out->palette.resize(static_cast<size_t>(count) * 3);
    for (int i = 0; i < count; ++i) {
      out->palette[3 * i] = palette[i].red;
      out->palette[3 * i + 1] = palette[i].green;
      out->palette[3 * i + 2] = palette[i].blue;
    }
  }
  return true;
}

void png_mem_write(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

void png_mem_flush(png_structp) {}

bool write_png_guarded(png_structp png, png_infop info, const PngToWrite* spec, png_bytepp rows,
                       std::vector<uint8_t>* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_benign_errors(png, 1);  // palette indices past PLTE are legal input for the decoder tests
  png_set_write_fn(png, out, png_mem_write, png_mem_flush);
  png_set_IHDR(png, info, spec->width, spec->height, spec->bit_depth, spec->color_type,
               spec->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec->palette.empty()) {
    png_color entries[256];
    const int count = static_cast<int>(spec->palette.size() / 3);
    for (int i = 0; i < count; ++i) {
      entries[i].red = spec->palette[3 * i];
      entries[i].green = spec->palette[3 * i + 1];
      entries[i].blue = spec->palette[3 * i + 2];
    }
    png_set_PLTE(png, info, entries, count);
  }
  png_color_16 trans_color;
  std::memset(&trans_color, 0, sizeof(trans_color));
  if (!spec->trns_alpha.empty()) {
    png_set_tRNS(png, info, spec->trns_alpha.data(), static_cast<int>(spec->trns_alpha.size()), nullptr);
  } else if (spec->trns_gray >= 0) {
    trans_color.gray = static_cast<png_uint_16>(spec->trns_gray);
    png_set_tRNS(png, info, nullptr, 0, &trans_color);
  } else if (spec->trns_rgb[0] >= 0) {
    trans_color.red = static_cast<png_uint_16>(spec->trns_rgb[0]);
    trans_color.green = static_cast<png_uint_16>(spec->trns_rgb[1]);
    trans_color.blue = static_cast<png_uint_16>(spec->trns_rgb[2]);
    png_set_tRNS(png, info, nullptr, 0, &trans_color);
  }
  png_set_rows(png, info, rows);
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  return true;
}

struct JpegErr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void jpeg_err_exit(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegErr*>(cinfo->err)->jump, 1);
}
void jpeg_quiet(j_common_ptr) {}

bool decode_jpeg_guarded(jpeg_decompress_struct* cinfo, JpegErr* err, const std::vector<uint8_t>* bytes, RawJpeg* out) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, bytes->data(), bytes->size());
  jpeg_read_header(cinfo, TRUE);
  jpeg_start_decompress(cinfo);
  out->width = static_cast<int>(cinfo->output_width);
  out->height = static_cast<int>(cinfo->output_height);
  out->components = cinfo->output_components;
  const size_t stride = static_cast<size_t>(out->width) * out->components;
  out->data.resize(stride * out->height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out->data.data() + stride * cinfo->output_scanline;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

bool encode_jpeg_guarded(jpeg_compress_struct* cinfo, JpegErr* err, const std::vector<uint8_t>* samples, int width,
                         int height, int components, int in_color_space, int quality, unsigned char** buffer,
                         unsigned long* size) {
  if (setjmp(err->jump)) return false;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, buffer, size);
  cinfo->image_width = static_cast<JDIMENSION>(width);
  cinfo->image_height = static_cast<JDIMENSION>(height);
  cinfo->input_components = components;
  cinfo->in_color_space = static_cast<J_COLOR_SPACE>(in_color_space);
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  jpeg_start_compress(cinfo, TRUE);
  const size_t stride = static_cast<size_t>(width) * components;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(samples->data() + stride * cinfo->next_scanline);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

bool read_png_raw(const std::vector<uint8_t>& bytes, RawPng* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, png_quiet_warning);
  png_infop info = png_create_info_struct(png);
  MemReader reader{bytes.data(), bytes.size(), 0};
  const bool ok = read_png_guarded(png, info, &reader, out);
  png_destroy_read_struct(&png, &info, nullptr);
  return ok;
}

std::vector<uint8_t> write_png(const PngToWrite& spec) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, png_quiet_warning);
  png_infop info = png_create_info_struct(png);
  const size_t row_bytes = spec.rows.size() / static_cast<size_t>(spec.height);
  std::vector<png_bytep> rows(spec.height);
  for (int y = 0; y < spec.height; ++y) rows[y] = const_cast<png_bytep>(spec.rows.data() + y * row_bytes);
  std::vector<uint8_t> out;
  const bool ok = write_png_guarded(png, info, &spec, rows.data(), &out);
  png_destroy_write_struct(&png, &info);
  if (!ok) out.clear();
  return out;
}

bool decode_jpeg_reference(const std::vector<uint8_t>& bytes, RawJpeg* out) {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_err_exit;
  err.pub.output_message = jpeg_quiet;
  const bool ok = decode_jpeg_guarded(&cinfo, &err, &bytes, out);
  jpeg_destroy_decompress(&cinfo);
  return ok;
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& samples, int width, int height, int components,
                                 int in_color_space, int quality) {
  jpeg_compress_struct cinfo;
  JpegErr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_err_exit;
  err.pub.output_message = jpeg_quiet;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const bool ok =
      encode_jpeg_guarded(&cinfo, &err, &samples, width, height, components, in_color_space, quality, &buffer, &size);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out;
  if (ok) out.assign(buffer, buffer + size);
  std::free(buffer);
  return out;
}

bool decode_webp_reference(const std::vector<uint8_t>& bytes, int* width, int* height, std::vector<uint8_t>* rgb) {
  uint8_t* rgba = WebPDecodeRGBA(bytes.data(), bytes.size(), width, height);
  if (rgba == nullptr) return false;
  const size_t pixels = static_cast<size_t>(*width) * *height;
  rgb->resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) std::memcpy(rgb->data() + 3 * i, rgba + 4 * i, 3);
  WebPFree(rgba);
  return true;
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, static_cast<uint32_t>(crc32(0, out.data() + start, static_cast<uInt>(out.size() - start))));
}

}  // namespace mmserve::image::testing
