// Format sniffing, dispatch to the per-format decoders, and reading image files with a size limit.
//
// The format is decided by the magic bytes only (PIL does the same: a .png file holding JPEG data opens as
// JPEG). Empty input and unknown formats are kInvalidArgument; everything format-specific lives in
// jpeg_decode.cpp, png_decode.cpp and webp_decode.cpp.
// Tests: tests/unit/frontends/image/image_decode_test.cpp; fuzz: fuzz/image_decode_fuzz.cpp.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "frontends/image/codecs.h"
#include "frontends/image/image.h"

namespace mmserve::image {
namespace {

// Files above this are refused before reading: far above any photo, far below the memory of a host.
constexpr int64_t kFileBytesMax = 256LL * 1024 * 1024;

bool starts_with(std::span<const uint8_t> bytes, const char* magic, size_t offset = 0) {
  const size_t n = std::strlen(magic);
  return bytes.size() >= offset + n && std::memcmp(bytes.data() + offset, magic, n) == 0;
}

}  // namespace

ImageFormat sniff_format(std::span<const uint8_t> bytes) {
  // JPEG: SOI followed by the first marker's 0xFF (PIL's JpegImagePlugin._accept checks the same 3 bytes).
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::kJpeg;
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

const char* format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

namespace detail {

Status check_dimensions(const char* format, int64_t width, int64_t height, const DecodeOptions& options) {
  if (width <= 0 || height <= 0) {
    return invalid_argument(std::string(format) + ": invalid image dimensions " + std::to_string(width) + "x" +
                            std::to_string(height));
  }
  if (width * height > options.max_pixels) {
    return resource_exhausted(std::string(format) + ": image of " + std::to_string(width) + "x" +
                              std::to_string(height) + " pixels exceeds the limit of " +
                              std::to_string(options.max_pixels) + " pixels");
  }
  return ok_status();
}

}  // namespace detail

StatusOr<RgbImage> decode_rgb(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  if (bytes.empty()) return invalid_argument("image: empty input");
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg: return detail::decode_jpeg(bytes, options);
    case ImageFormat::kPng: return detail::decode_png(bytes, options);
    case ImageFormat::kWebp: return detail::decode_webp(bytes, options);
    case ImageFormat::kUnknown: break;
  }
  return invalid_argument("image: unrecognized format (not JPEG, PNG or WebP)");
}

StatusOr<RgbImage> decode_rgb_file(const std::string& path, const DecodeOptions& options) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return not_found(path + ": no such file");
    return invalid_argument(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(info.st_mode)) return invalid_argument(path + ": not a regular file");
  if (info.st_size > kFileBytesMax) {
    return resource_exhausted(path + ": file of " + std::to_string(info.st_size) + " bytes exceeds the limit of " +
                              std::to_string(kFileBytesMax) + " bytes");
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return invalid_argument(path + ": cannot open: " + std::strerror(errno));
  // At most st_size bytes (bounded above); a file that shrank since stat() decodes as truncated data.
  std::vector<uint8_t> bytes(static_cast<size_t>(info.st_size));
  const size_t filled = std::fread(bytes.data(), 1, bytes.size(), file);
  const bool read_error = std::ferror(file) != 0;
  std::fclose(file);
  if (read_error) return invalid_argument(path + ": read error");
  bytes.resize(filled);
  StatusOr<RgbImage> image = decode_rgb(bytes, options);
  if (!image.ok()) return image.status().with_context(path);
  return image;
}

}  // namespace mmserve::image
