// Micro-benchmark of inflate_png_rows_cuda on server batches of 64 and 256 images of 224x224 RGB, encoded as
// `mmserve bench` encodes its synthetic PNGs (libpng's defaults: png_write_png, adaptive filters, zlib level 6), of
// two kinds: uniform noise (zlib keeps it in stored blocks) and the picture `mmserve bench` sends
// (core/synthetic_image.h: gradients, a disc, stripes and +-12 noise: Huffman-coded, nearly all literals). Beside each,
// on one CPU thread: the CPU twin, and libdeflate's inflate alone (decode_png_fast's main cost). The GPU runs with both
// Huffman decoders, serial (lane 0 walks the stream) and speculative (the warp decodes 32 parts at once), in this
// process. `bytes` = stream bytes read
// + filtered rows written and read + RGB written. Prints ms per batch and images/s. Run: kernels_cuda_bench --only
// png_inflate.
#include <cuda_runtime_api.h>
#include <libdeflate.h>
#include <png.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/synthetic_image.h"
#include "kernels/png_inflate/png_inflate.h"
#include "kernels/png_inflate/png_inflate_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

constexpr int kSide = 224;

std::vector<uint8_t> noise_pixels(int width, int height, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  for (uint8_t& v : px) v = static_cast<uint8_t>(rng());
  return px;
}

void append(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + length);
}
void flush(png_structp) {}

// The PNG libpng writes with its defaults, then its IDAT data joined: the zlib stream.
std::vector<uint8_t> idat_stream(const std::vector<uint8_t>& px, int width, int height) {
  std::vector<uint8_t> file;
  std::vector<png_bytep> rows(height);
  for (int y = 0; y < height; ++y) rows[y] = const_cast<png_bytep>(&px[static_cast<size_t>(y) * width * 3]);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(png, &file, append, flush);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  std::vector<uint8_t> stream;
  for (size_t pos = 8; pos + 12 <= file.size();) {
    const uint32_t length =
        uint32_t{file[pos]} << 24 | uint32_t{file[pos + 1]} << 16 | uint32_t{file[pos + 2]} << 8 | file[pos + 3];
    if (std::memcmp(&file[pos + 4], "IDAT", 4) == 0) {
      stream.insert(stream.end(), file.begin() + pos + 8, file.begin() + pos + 8 + length);
    }
    pos += 12 + length;
  }
  return stream;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench_case(CudaBench& bench, int n, bool noise) {
  // 64 distinct images, cycled.
  std::vector<std::vector<uint8_t>> distinct;
  for (unsigned seed = 1; seed <= 64; ++seed) {
    distinct.push_back(idat_stream(
        noise ? noise_pixels(kSide, kSide, seed) : synthetic_image_pixels(kSide, kSide, seed), kSide, kSide));
  }
  std::vector<uint8_t> streams;
  std::vector<PngInflateImage> images(n);
  for (int i = 0; i < n; ++i) {
    const std::vector<uint8_t>& s = distinct[i % distinct.size()];
    images[i].stream_offset = streams.size();
    images[i].stream_bytes = s.size();
    images[i].width = kSide, images[i].height = kSide, images[i].channels = 3;
    images[i].out_offset = static_cast<uint64_t>(i) * kSide * kSide * 3;
    streams.insert(streams.end(), s.begin(), s.end());
  }
  const uint64_t scratch_bytes = png_inflate_assign_scratch(images);
  const uint64_t out_bytes = static_cast<uint64_t>(n) * kSide * kSide * 3;
  const std::string shape = "n=" + std::to_string(n) + " 224x224 RGB " + (noise ? "noise" : "synthetic") + " (" +
                            std::to_string(streams.size() / n / 1024) + " KiB/image)";

  // CPU: the twin over the batch, and libdeflate's inflate of each stream, on this thread.
  std::vector<uint8_t> scratch(scratch_bytes), out(out_bytes);
  std::vector<int32_t> status(n);
  auto t0 = std::chrono::steady_clock::now();
  inflate_png_rows(streams.data(), streams.size(), images.data(), n, scratch.data(), scratch.size(), out.data(),
                   out.size(), status.data());
  const double twin_s = seconds_since(t0);
  const int failed = static_cast<int>(std::count_if(status.begin(), status.end(), [](int32_t s) { return s != 0; }));
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    size_t in_used = 0, out_made = 0;
    libdeflate_zlib_decompress_ex(d, streams.data() + images[i].stream_offset, images[i].stream_bytes,
                                  scratch.data() + images[i].scratch_offset, kSide * (kSide * 3 + 1), &in_used,
                                  &out_made);
  }
  const double libdeflate_s = seconds_since(t0);
  libdeflate_free_decompressor(d);
  std::printf(
      "png_inflate %s: CPU twin %.2f ms/batch (%.0f images/s, %d failed); libdeflate inflate only %.2f "
      "ms/batch (%.0f images/s); one thread\n",
      shape.c_str(), twin_s * 1e3, n / twin_s, failed, libdeflate_s * 1e3, n / libdeflate_s);

  void *d_streams = nullptr, *d_images = nullptr, *d_scratch = nullptr, *d_out = nullptr, *d_status = nullptr;
  const bool allocated = cudaMalloc(&d_streams, streams.size()) == cudaSuccess &&
                         cudaMalloc(&d_images, n * sizeof(PngInflateImage)) == cudaSuccess &&
                         cudaMalloc(&d_scratch, scratch_bytes) == cudaSuccess &&
                         cudaMalloc(&d_out, out_bytes) == cudaSuccess &&
                         cudaMalloc(&d_status, n * sizeof(int32_t)) == cudaSuccess;
  if (allocated) {
    cudaMemcpy(d_streams, streams.data(), streams.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(d_images, images.data(), n * sizeof(PngInflateImage), cudaMemcpyHostToDevice);
  }
  auto launch = [&](PngHuffmanDecoder decoder) {
    return inflate_png_rows_cuda(static_cast<const uint8_t*>(d_streams), streams.size(),
                                 static_cast<const PngInflateImage*>(d_images), n, static_cast<uint8_t*>(d_scratch),
                                 scratch_bytes, static_cast<uint8_t*>(d_out), out_bytes,
                                 static_cast<int32_t*>(d_status), bench.stream(), decoder);
  };
  for (PngHuffmanDecoder decoder : {PngHuffmanDecoder::kSerial, PngHuffmanDecoder::kSpeculative}) {
    const std::string name = decoder == PngHuffmanDecoder::kSerial ? "serial" : "speculative";
    const std::string decoder_shape = shape + " " + name;
    cudaMemset(d_out, 0, out_bytes);
    const Status first = allocated ? launch(decoder) : internal_error("cudaMalloc failed");
    if (!first.ok()) {
      std::fprintf(stderr, "png_inflate %s: %s\n", decoder_shape.c_str(), first.to_string().c_str());
      continue;
    }
    const double bytes = static_cast<double>(streams.size() + 2 * scratch_bytes + out_bytes);
    const double us = bench.run(
        "png_inflate", decoder_shape, 0, bytes, [&] { (void)launch(decoder); }, 3, 20);
    std::vector<uint8_t> gpu_out(out_bytes);
    cudaMemcpy(gpu_out.data(), d_out, out_bytes, cudaMemcpyDeviceToHost);
    std::printf("png_inflate %s: GPU %.3f ms/batch (%.0f images/s)%s\n", decoder_shape.c_str(), us * 1e-3,
                n / (us * 1e-6), gpu_out == out ? ", equal to the CPU twin" : ", MISMATCH WITH THE CPU TWIN");
  }
  cudaFree(d_streams);
  cudaFree(d_images);
  cudaFree(d_scratch);
  cudaFree(d_out);
  cudaFree(d_status);
}

}  // namespace

void bench_png_inflate_cuda(CudaBench& bench) {
  for (bool noise : {true, false}) {
    bench_case(bench, 64, noise);
    bench_case(bench, 256, noise);
  }
}

}  // namespace mmserve::kernels
