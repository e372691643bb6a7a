// Request bodies and synthetic images for `mmserve bench` (see bench_payloads.h). The libjpeg error path uses
// setjmp/longjmp as that library requires; only plain data lives across the jump. PNGs: frontends/image/png_encode.
#include "cli/bench_payloads.h"

#include <jpeglib.h>

#include <algorithm>
#include <array>
#include <csetjmp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string_view>

#include "core/synthetic_image.h"
#include "frontends/image/png_encode.h"

namespace mmserve::cli {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 8> kDefaultTexts = {
    "a photo of a cat",
    "a diagram of two dogs playing in the snow",
    "an astronaut riding a horse on the moon, digital art",
    "a close-up photograph of a rocket on the launch pad before lift-off at dawn",
    "street",
    "a bowl of ramen with an egg, chopsticks and steam rising over a wooden table in a small restaurant",
    "猫の写真",
    "a black and white photograph of a man holding a camera on a tripod in a park",
};

struct JpegErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};
void jpeg_error_exit(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegErrorManager*>(cinfo->err)->jump, 1);
}

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read image " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The data-URL media type of an encoded image, from its magic bytes.
StatusOr<std::string> image_media_type(const std::string& bytes, const std::string& label) {
  if (bytes.size() >= 8 && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0) return std::string("image/png");
  if (bytes.size() >= 3 && bytes.compare(0, 3, "\xFF\xD8\xFF") == 0) return std::string("image/jpeg");
  if (bytes.size() >= 12 && bytes.compare(0, 4, "RIFF") == 0 && bytes.compare(8, 4, "WEBP") == 0) {
    return std::string("image/webp");
  }
  return invalid_argument(label + " is not a PNG, JPEG or WebP file");
}

struct EncodedImage {
  std::string bytes;
  std::string media_type;
};

StatusOr<std::vector<EncodedImage>> class_images(const BenchClass& c) {
  std::vector<EncodedImage> out;
  for (const std::string& file : c.image_files) {
    if (static_cast<int>(out.size()) == kMaxVariants) break;
    ASSIGN_OR_RETURN(std::string bytes, read_file(file));
    ASSIGN_OR_RETURN(std::string type, image_media_type(bytes, file));
    out.push_back({std::move(bytes), std::move(type)});
  }
  if (!out.empty()) return out;
  const bool large = c.kind == BenchKind::kLargeImage;
  const int w = c.image_width > 0 ? c.image_width : (large ? 1920 : 320);
  const int h = c.image_height > 0 ? c.image_height : (large ? 1080 : 240);
  const std::string format = !c.image_format.empty() ? c.image_format : (large ? "jpeg" : "png");
  for (unsigned seed = 1; seed <= 4; ++seed) {
    auto bytes = format == "png" ? synthesize_png(w, h, seed) : synthesize_jpeg(w, h, seed);
    if (!bytes.ok()) return bytes.status();
    out.push_back({std::move(bytes).value(), "image/" + format});
  }
  return out;
}

json kserve_bytes_input(const char* name, const std::string& element) {
  return {{"name", name}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {element}}};
}

}  // namespace

std::string base64_encode(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> synthesize_png(int width, int height, unsigned seed) {
  const std::vector<uint8_t> px = synthetic_image_pixels(width, height, seed);
  std::string out = image::encode_png(px.data(), width, height, 3);
  if (out.empty()) return internal_error("libpng: encoding a synthetic image failed");
  return out;
}

StatusOr<std::string> synthesize_jpeg(int width, int height, unsigned seed, int quality) {
  const std::vector<uint8_t> px = synthetic_image_pixels(width, height, seed);
  jpeg_compress_struct cinfo{};
  JpegErrorManager err{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
    return internal_error("libjpeg: encoding a synthetic image failed");
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&px[static_cast<size_t>(cinfo.next_scanline) * width * 3]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

StatusOr<std::vector<PreparedClass>> prepare_requests(const BenchProfile& profile, const std::string& model,
                                                      const std::string& base_path) {
  std::vector<PreparedClass> out;
  for (const BenchClass& c : profile.classes) {
    PreparedClass pc;
    pc.spec = c;
    if (c.priority > 0) pc.headers.emplace_back("x-mmserve-priority", std::to_string(c.priority));
    if (c.deadline_ms > 0) pc.headers.emplace_back("x-mmserve-timeout-ms", std::to_string(c.deadline_ms));
    const std::vector<std::string> texts =
        c.texts.empty() ? std::vector<std::string>(kDefaultTexts.begin(), kDefaultTexts.end()) : c.texts;
    std::vector<EncodedImage> images;
    if (c.has_image()) {
      auto loaded = class_images(c);
      if (!loaded.ok()) return loaded.status().with_context("class " + c.name);
      images = std::move(loaded).value();
    }
    const size_t n =
        std::min<size_t>(kMaxVariants, std::max(c.has_text() ? texts.size() : 1, c.has_image() ? images.size() : 1));
    for (size_t v = 0; v < n; ++v) {
      const std::string* text = c.has_text() ? &texts[v % texts.size()] : nullptr;
      const EncodedImage* image = c.has_image() ? &images[v % images.size()] : nullptr;
      PreparedRequest r;
      json body;
      if (c.api == BenchApi::kKserve) {
        r.path = base_path;
        r.path.append("/v2/models/").append(model).append("/infer");
        body["inputs"] = json::array();
        if (text != nullptr) body["inputs"].push_back(kserve_bytes_input("text", *text));
        if (image != nullptr) body["inputs"].push_back(kserve_bytes_input("image", base64_encode(image->bytes)));
      } else {
        r.path = base_path + "/v1/embeddings";
        body["model"] = model;
        body["encoding_format"] = c.encoding_format;
        const std::string url =
            image != nullptr ? "data:" + image->media_type + ";base64," + base64_encode(image->bytes) : "";
        if (text != nullptr && image == nullptr)
          body["input"] = *text;
        else if (text == nullptr)
          body["input"] = json::array({url});
        else
          body["input"] = json::array({*text, url});
      }
      r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on bad UTF-8
      pc.body_bytes_mean += static_cast<double>(r.body.size()) / static_cast<double>(n);
      pc.variants.push_back(std::move(r));
    }
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace mmserve::cli
