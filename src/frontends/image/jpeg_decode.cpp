// JPEG decoding with libjpeg-turbo, reproducing PIL's JpegImagePlugin + JpegDecode.c + convert("RGB").
//
// PIL decodes with libjpeg's defaults (JDCT_ISLOW, fancy upsampling; "draft" mode is never used by open()),
// picks the mode from the component count (1 -> L, 3 -> RGB, 4 -> CMYK, anything else is an error) and lets
// libjpeg guess the colour space (YCbCr/RGB, CMYK/YCCK) from the JFIF/Adobe markers. Here: 1 component is
// decoded as grayscale and replicated; 3 as JCS_RGB (PIL asks for JCS_EXT_RGBX: the same values, padded);
// 4 as JCS_CMYK, then PIL's rawmode "CMYK;I" (every byte inverted, unconditionally: "assume adobe
// conventions") followed by Convert.c's cmyk2rgb: nk = 255 - K; R = clip8(nk - MULDIV255(C, nk)).
// EXIF orientation is not applied (PIL's open() does not). Truncation: PIL feeds libjpeg a suspending source
// and raises "image file is truncated" when data runs out before the last scanline; we feed a fake EOI
// instead and fail if the end of the data was reached before every scanline was decoded (a missing EOI
// after complete data is accepted, as PIL does). libjpeg warnings ("Corrupt JPEG data: ...") are ignored,
// as in PIL.
// Errors: libjpeg's error_exit longjmps back into the two small "guarded" functions below; they and the
// callbacks hold no C++ object with a destructor, so no destructor is ever skipped.
// Tests: tests/unit/frontends/image/image_decode_test.cpp.

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it needs FILE and size_t declared first
// clang-format on

#include "frontends/image/codecs.h"

namespace mmserve::image::detail {
namespace {

// A progressive JPEG may hold thousands of tiny scans, each re-decoding the whole image (a CPU bomb that
// libjpeg-turbo's own fuzzers cap at 500). Real encoders write about 10.
constexpr int kScansMax = 1000;

struct JpegErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

// An in-memory source that records when libjpeg asked for bytes past the end (and then serves a fake EOI).
struct JpegSourceMgr {
  jpeg_source_mgr pub;
  bool hit_end;
};

// Everything libjpeg touches, trivially destructible so it may live across setjmp.
struct JpegSession {
  jpeg_decompress_struct cinfo;
  JpegErrorMgr err;
  JpegSourceMgr src;
  jpeg_progress_mgr progress;
  bool created;
};

constexpr JOCTET kFakeEoi[2] = {0xFF, JPEG_EOI};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_output_message(j_common_ptr) {}  // warnings are ignored, as PIL does; never print to stderr

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > kScansMax) {
    auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "more than %d scans", kScansMax);
    std::longjmp(err->jump, 1);
  }
}

void source_init(j_decompress_ptr) {}
void source_term(j_decompress_ptr) {}

boolean source_fill(j_decompress_ptr cinfo) {
  auto* src = reinterpret_cast<JpegSourceMgr*>(cinfo->src);
  src->hit_end = true;
  src->pub.next_input_byte = kFakeEoi;
  src->pub.bytes_in_buffer = sizeof(kFakeEoi);
  return TRUE;
}

void source_skip(j_decompress_ptr cinfo, long num_bytes) {
  if (num_bytes <= 0) return;
  jpeg_source_mgr* src = cinfo->src;
  while (num_bytes > static_cast<long>(src->bytes_in_buffer)) {
    num_bytes -= static_cast<long>(src->bytes_in_buffer);
    source_fill(cinfo);
  }
  src->next_input_byte += num_bytes;
  src->bytes_in_buffer -= static_cast<size_t>(num_bytes);
}

// Creates the decompressor and reads the header. False when libjpeg reported an error (in err.message).
bool read_header_guarded(JpegSession* s, const uint8_t* data, size_t size) {
  if (setjmp(s->err.jump)) return false;
  s->created = true;  // safe to destroy even if creation fails half-way (destroy checks cinfo->mem)
  jpeg_create_decompress(&s->cinfo);
  s->src.pub.init_source = source_init;
  s->src.pub.fill_input_buffer = source_fill;
  s->src.pub.skip_input_data = source_skip;
  s->src.pub.resync_to_restart = jpeg_resync_to_restart;
  s->src.pub.term_source = source_term;
  s->src.pub.next_input_byte = data;
  s->src.pub.bytes_in_buffer = size;
  s->cinfo.src = &s->src.pub;
  s->progress.progress_monitor = on_progress;
  s->cinfo.progress = &s->progress;
  jpeg_read_header(&s->cinfo, TRUE);
  return true;
}

// PIL's "CMYK;I" unpacker (invert) followed by Convert.c's cmyk2rgb, for one row.
void cmyk_inverted_to_rgb(const uint8_t* in, uint8_t* out, int width) {
  for (int x = 0; x < width; ++x, in += 4, out += 3) {
    const int nk = 255 - static_cast<uint8_t>(~in[3]);
    for (int c = 0; c < 3; ++c) {
      const int tmp = static_cast<uint8_t>(~in[c]) * nk + 128;  // MULDIV255(C, nk)
      const int v = nk - (((tmp >> 8) + tmp) >> 8);
      out[c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

// Decodes every scanline into `rgb` (height * width * 3); `row` holds width * 4 bytes of scratch.
// Sets *truncated when the data ended before the last scanline. False on a libjpeg error.
bool decode_pixels_guarded(JpegSession* s, uint8_t* rgb, uint8_t* row, bool* truncated) {
  if (setjmp(s->err.jump)) return false;
  j_decompress_ptr cinfo = &s->cinfo;
  jpeg_start_decompress(cinfo);
  const int width = static_cast<int>(cinfo->output_width);
  const int components = cinfo->output_components;
  if (cinfo->output_width != cinfo->image_width || cinfo->output_height != cinfo->image_height ||
      (components != 1 && components != 3 && components != 4)) {
    std::snprintf(s->err.message, sizeof(s->err.message), "unexpected output geometry");
    return false;
  }
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* out = rgb + static_cast<size_t>(cinfo->output_scanline) * static_cast<size_t>(width) * 3;
    JSAMPROW target = components == 3 ? out : row;
    if (jpeg_read_scanlines(cinfo, &target, 1) != 1) {
      std::snprintf(s->err.message, sizeof(s->err.message), "decoder returned no scanline");
      return false;
    }
    if (components == 1) {
      for (size_t x = 0; x < static_cast<size_t>(width); ++x) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = row[x];
    } else if (components == 4) {
      cmyk_inverted_to_rgb(row, out, width);
    }
  }
  *truncated = s->src.hit_end;
  if (*truncated) return true;
  jpeg_finish_decompress(cinfo);  // a missing EOI after complete data is fine (PIL accepts it too)
  return true;
}

struct SessionGuard {
  JpegSession* session;
  ~SessionGuard() {
    if (session->created) jpeg_destroy_decompress(&session->cinfo);
  }
};

Status jpeg_error(const char* what) {
  return invalid_argument(std::string("JPEG: ") + what);
}

}  // namespace

StatusOr<RgbImage> decode_jpeg(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  JpegSession session{};  // all zero: libjpeg structs, flags, message
  SessionGuard guard{&session};
  session.cinfo.err = jpeg_std_error(&session.err.pub);
  session.err.pub.error_exit = on_error_exit;
  session.err.pub.output_message = on_output_message;

  if (!read_header_guarded(&session, bytes.data(), bytes.size())) return jpeg_error(session.err.message);
  if (session.src.hit_end) return jpeg_error("truncated data (ended inside the header)");
  jpeg_decompress_struct& cinfo = session.cinfo;
  RETURN_IF_ERROR(check_dimensions("JPEG", cinfo.image_width, cinfo.image_height, options));
  switch (cinfo.num_components) {
    case 1: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case 3: cinfo.out_color_space = JCS_RGB; break;
    case 4: cinfo.out_color_space = JCS_CMYK; break;  // libjpeg converts YCCK to CMYK
    default:
      return unimplemented("JPEG: " + std::to_string(cinfo.num_components) +
                           "-component images are not supported (PIL refuses them too)");
  }
  cinfo.dct_method = JDCT_ISLOW;     // PIL's (and libjpeg's) default
  cinfo.do_fancy_upsampling = TRUE;  // idem
  cinfo.do_block_smoothing = TRUE;   // idem (progressive images only)

  RgbImage image;
  image.width = static_cast<int>(cinfo.image_width);
  image.height = static_cast<int>(cinfo.image_height);
  image.pixels.resize(static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3);
  std::vector<uint8_t> row(static_cast<size_t>(image.width) * 4);
  bool truncated = false;
  if (!decode_pixels_guarded(&session, image.pixels.data(), row.data(), &truncated)) {
    return jpeg_error(session.err.message);
  }
  if (truncated) return jpeg_error("truncated data (ended before the last scanline)");
  return image;
}

}  // namespace mmserve::image::detail
