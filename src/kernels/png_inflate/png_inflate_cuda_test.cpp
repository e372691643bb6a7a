// inflate_png_rows_cuda against its CPU twin, byte for byte and status for status: every case of
// png_inflate_test_cases.h (good streams of every compressor, shape, channel count and filter; libdeflate's edge
// cases; one stream per fault; a small stream truncated at every byte and with every bit flipped; 3000 random
// mutations) in ONE batch, good and broken side by side, with sentinel bytes between the images' outputs (a broken
// image must not write outside its own); batches of 1, 7, 64 and 300 server-sized images; bad descriptors and bad
// arguments. Every batch runs with both Huffman decoders (serial and speculative) against the serial CPU twin
// (png_inflate_test.cpp shows the two equal on the CPU). Skipped, with the reason, where no GPU is visible.
#include "kernels/png_inflate/png_inflate_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/png_inflate/png_inflate.h"
#include "kernels/png_inflate/png_inflate_test_cases.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using png_inflate_test::Case;

constexpr uint8_t kSentinel = 0xa5;
constexpr uint64_t kGap = 16;  // sentinel bytes after each image's output
constexpr PngHuffmanDecoder kDecoders[] = {PngHuffmanDecoder::kSerial, PngHuffmanDecoder::kSpeculative};

struct Batch {
  std::vector<uint8_t> streams;
  std::vector<PngInflateImage> images;
  uint64_t out_bytes = 0, scratch_bytes = 0;
};

Batch make_batch(const std::vector<Case>& cases) {
  Batch b;
  for (const Case& c : cases) {
    PngInflateImage image;
    image.stream_offset = b.streams.size();  // any byte offset: the decoder's aligned loads shift
    image.stream_bytes = c.zlib.size();
    image.width = c.width, image.height = c.height, image.channels = c.channels;
    image.out_offset = b.out_bytes;
    b.out_bytes += uint64_t{c.width} * c.height * 3 + kGap;
    b.streams.insert(b.streams.end(), c.zlib.begin(), c.zlib.end());
    b.images.push_back(image);
  }
  b.scratch_bytes = png_inflate_assign_scratch(b.images);
  return b;
}

// Runs the batch on both twins and compares; returns the number of images that decoded.
size_t expect_twins_agree(const std::vector<Case>& cases, const Batch& b, PngHuffmanDecoder decoder) {
  const size_t n = b.images.size();
  std::vector<uint8_t> want(b.out_bytes, kSentinel), scratch(b.scratch_bytes);
  std::vector<int32_t> want_status(n, -1);
  inflate_png_rows(b.streams.data(), b.streams.size(), b.images.data(), static_cast<int64_t>(n), scratch.data(),
                   scratch.size(), want.data(), want.size(), want_status.data());

  const DeviceVector<uint8_t> d_streams(b.streams.empty() ? std::vector<uint8_t>(8) : b.streams);
  const DeviceVector<PngInflateImage> d_images(b.images);
  DeviceVector<uint8_t> d_scratch(std::max<uint64_t>(b.scratch_bytes, 1)), d_out(std::max<uint64_t>(b.out_bytes, 1));
  DeviceVector<int32_t> d_status(n);
  EXPECT_EQ(cudaMemset(d_out.get(), kSentinel, b.out_bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(d_status.get(), 0x7f, n * sizeof(int32_t)), cudaSuccess);  // every status must be written
  const Status st =
      inflate_png_rows_cuda(d_streams.get(), b.streams.size(), d_images.get(), static_cast<int64_t>(n), d_scratch.get(),
                            b.scratch_bytes, d_out.get(), b.out_bytes, d_status.get(), nullptr, decoder);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> got = d_out.download();
  const std::vector<int32_t> got_status = d_status.download();
  size_t decoded = 0;
  std::map<int32_t, int> histogram;
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = i < cases.size() ? cases[i].name : "descriptor " + std::to_string(i);
    EXPECT_EQ(got_status[i], want_status[i]) << name;
    ++histogram[got_status[i]];
    const PngInflateImage& image = b.images[i];
    const uint64_t bytes = uint64_t{image.width} * image.height * 3;
    if (want_status[i] == 0 && got_status[i] == 0) {
      ++decoded;
      EXPECT_TRUE(std::equal(got.begin() + image.out_offset, got.begin() + image.out_offset + bytes,
                             want.begin() + image.out_offset))
          << name;
    }
    if (image.out_offset + bytes + kGap <= got.size()) {
      const auto gap = got.begin() + static_cast<std::ptrdiff_t>(image.out_offset + bytes);
      EXPECT_TRUE(std::all_of(gap, gap + kGap, [](uint8_t v) { return v == kSentinel; }))
          << name << ": written past its output";
    }
  }
  std::string summary;
  for (auto [code, count] : histogram) {
    summary +=
        std::string(png_inflate_status_name(static_cast<PngInflateStatus>(code))) + " " + std::to_string(count) + ", ";
  }
  std::printf("  %zu images, %s decoder: %s\n", n, decoder == PngHuffmanDecoder::kSerial ? "serial" : "speculative",
              summary.c_str());
  return decoded;
}

TEST(PngInflateCuda, MixedBatchEqualsCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  std::vector<Case> cases = png_inflate_test::good_cases();
  const size_t good = cases.size();
  for (Case& c : png_inflate_test::edge_cases()) cases.push_back(std::move(c));
  const Case small = png_inflate_test::small_case();
  for (size_t size = 0; size < small.zlib.size(); ++size) {
    Case c = small;
    c.zlib.resize(size);
    c.name = "truncated to " + std::to_string(size);
    cases.push_back(c);
  }
  for (size_t bit = 0; bit < small.zlib.size() * 8; ++bit) {
    Case c = small;
    c.zlib[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    c.name = "bit " + std::to_string(bit) + " flipped";
    cases.push_back(c);
  }
  for (Case& c : png_inflate_test::mutated_cases(23, 3000)) cases.push_back(std::move(c));
  // Shuffle so that good and broken images sit next to each other in the batch and in memory.
  std::mt19937 rng(5);
  std::shuffle(cases.begin(), cases.end(), rng);
  Batch b = make_batch(cases);
  // Bad descriptors in the same batch.
  PngInflateImage bad = b.images[0];
  bad.channels = 0;
  b.images.push_back(bad);
  bad = b.images[0];
  bad.stream_bytes = b.streams.size() + 1;
  b.images.push_back(bad);
  bad = b.images[0];
  bad.scratch_offset = b.scratch_bytes;
  b.images.push_back(bad);
  for (PngHuffmanDecoder decoder : kDecoders) {
    const size_t decoded = expect_twins_agree(cases, b, decoder);
    EXPECT_GE(decoded, good);
  }
}

TEST(PngInflateCuda, ServerBatchesEqualCpuTwin) {
  MMSERVE_REQUIRE_GPU();
  // 224x224 images of every channel count and content, from zlib and libdeflate, cycled to the batch size.
  std::vector<Case> pool;
  uint32_t seed = 1;
  for (uint32_t ch = 1; ch <= 4; ++ch) {
    for (int content = 0; content < 2; ++content) {
      const auto px = content == 0 ? png_inflate_test::noise_pixels(224, 224, ch, seed)
                                   : png_inflate_test::gradient_pixels(224, 224, ch, seed);
      const auto f = png_inflate_test::filter_rows(px, 224, 224, ch, -1, seed++);
      pool.push_back({"224 zlib", png_inflate_test::zlib_compress2(f, 6), 224, 224, ch});
      pool.push_back({"224 libdeflate", png_inflate_test::libdeflate_zlib(f, 6), 224, 224, ch});
    }
  }
  pool.push_back(
      {"odd 333x97",
       png_inflate_test::zlib_compress2(
           png_inflate_test::filter_rows(png_inflate_test::gradient_pixels(333, 97, 3, 1), 333, 97, 3, -1, 1), 6),
       333, 97, 3});
  pool.push_back(
      {"wide 5000x3",
       png_inflate_test::zlib_compress2(
           png_inflate_test::filter_rows(png_inflate_test::noise_pixels(5000, 3, 4, 2), 5000, 3, 4, -1, 2), 6),
       5000, 3, 4});
  for (size_t n : {1, 7, 64, 300}) {
    SCOPED_TRACE("batch of " + std::to_string(n));
    std::vector<Case> cases;
    for (size_t i = 0; i < n; ++i) cases.push_back(pool[(i * 7 + n) % pool.size()]);
    for (PngHuffmanDecoder decoder : kDecoders) EXPECT_EQ(expect_twins_agree(cases, make_batch(cases), decoder), n);
  }
}

TEST(PngInflateCuda, BadArgumentsAreInvalidArgument) {
  MMSERVE_REQUIRE_GPU();
  const DeviceVector<uint8_t> bytes(64);
  const DeviceVector<PngInflateImage> images(1);
  DeviceVector<int32_t> status(1);
  const auto call = [&](const uint8_t* streams, int64_t n, int32_t* st) {
    return inflate_png_rows_cuda(streams, 64, images.get(), n, bytes.get(), 64, bytes.get(), 64, st, nullptr).code();
  };
  EXPECT_EQ(call(bytes.get(), -1, status.get()), StatusCode::kInvalidArgument);
  EXPECT_EQ(call(nullptr, 1, status.get()), StatusCode::kInvalidArgument);
  EXPECT_EQ(call(bytes.get(), 1, nullptr), StatusCode::kInvalidArgument);
  EXPECT_EQ(call(bytes.get() + 1, 1, status.get()), StatusCode::kInvalidArgument);
  EXPECT_EQ(call(bytes.get(), 0, nullptr), StatusCode::kOk);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mmserve::kernels
