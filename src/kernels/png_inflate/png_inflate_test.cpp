// The CPU twin of png_inflate.h against the reference (png_inflate_test_cases.h: libdeflate's
// libdeflate_zlib_decompress_ex with decode_png_fast's conditions, the PNG filters written naively, PIL's RGB
// conversion): streams from libdeflate (levels 0, 1, 6, 12) and zlib (compress2, fixed Huffman, Huffman-only, RLE,
// flushed blocks) over noise and gradients, every shape class, channel count and filter type; the edge cases where
// libdeflate is lenient; one stream for each fault with its status; a small stream truncated at every byte and with
// every bit flipped; random mutations; and the batch entry point with bad descriptors. Every case also runs the
// speculative decoder (the warp's algorithm, its 32 lanes played in turn), which must give the serial decoder's
// status and pixels exactly.
#include "kernels/png_inflate/png_inflate.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/png_inflate/png_inflate_test_cases.h"
#include "kernels/png_inflate/png_unfilter_core.h"

namespace mmserve::kernels {
namespace {

using png_inflate_test::Case;
using png_inflate_test::Decoded;
using png_inflate_test::reference_decode;

struct Ours {
  PngInflateStatus status;
  std::vector<uint8_t> rgb;
};

Ours decode(const Case& c, PngHuffmanDecoder decoder = PngHuffmanDecoder::kSerial) {
  Ours o{PngInflateStatus::kOk, std::vector<uint8_t>(size_t{c.width} * c.height * 3)};
  o.status = inflate_png_image(c.zlib, c.width, c.height, c.channels, o.rgb.data(), decoder);
  return o;
}

// The speculative decoder against the serial one: the same status, and the same pixels where it succeeds.
void expect_speculative_agrees(const Case& c, const Ours& serial) {
  const Ours spec = decode(c, PngHuffmanDecoder::kSpeculative);
  ASSERT_EQ(spec.status, serial.status) << c.name << ": speculative " << png_inflate_status_name(spec.status)
                                        << ", serial " << png_inflate_status_name(serial.status);
  if (serial.status == PngInflateStatus::kOk) {
    ASSERT_EQ(spec.rgb, serial.rgb) << c.name;
  }
}

// Success exactly when the reference succeeds, with its pixels; a fault's own status where the case names one.
void expect_agrees(const Case& c) {
  const Ours ours = decode(c);
  expect_speculative_agrees(c, ours);
  const Decoded ref = reference_decode(c.zlib, c.width, c.height, c.channels);
  ASSERT_EQ(ours.status == PngInflateStatus::kOk, ref.ok)
      << c.name << ": ours " << png_inflate_status_name(ours.status) << ", libdeflate " << (ref.ok ? "ok" : "fails");
  if (c.expect >= 0) {
    EXPECT_EQ(static_cast<int32_t>(ours.status), c.expect) << c.name;
  }
  if (ref.ok) {
    ASSERT_EQ(ours.rgb, ref.rgb) << c.name;
  }
}

TEST(PngInflate, GoodStreamsEqualTheReference) {
  const std::vector<Case> cases = png_inflate_test::good_cases();
  ASSERT_GT(cases.size(), 500u);
  for (const Case& c : cases) {
    expect_agrees(c);
    ASSERT_EQ(decode(c).status, PngInflateStatus::kOk) << c.name;
  }
}

TEST(PngInflate, UnfilteredRowsAreThePixels) {
  // The reference's filters could share a mistake with ours: here the truth is the pixels that were filtered.
  for (uint32_t ch = 1; ch <= 4; ++ch) {
    for (int filter = -1; filter <= 4; ++filter) {
      const std::vector<uint8_t> px = png_inflate_test::noise_pixels(23, 9, ch, ch * 10 + filter + 1);
      const std::vector<uint8_t> f = png_inflate_test::filter_rows(px, 23, 9, ch, filter, ch);
      const Case c{"noise", png_inflate_test::zlib_compress2(f, 6), 23, 9, ch};
      const Ours ours = decode(c);
      expect_speculative_agrees(c, ours);
      ASSERT_EQ(ours.status, PngInflateStatus::kOk);
      EXPECT_EQ(ours.rgb, png_inflate_test::to_rgb(px, 23, 9, ch)) << "channels " << ch << " filter " << filter;
    }
  }
}

TEST(PngInflate, EdgeCasesAndFaultsAgreeWithLibdeflate) {
  for (const Case& c : png_inflate_test::edge_cases()) {
    SCOPED_TRACE(c.name);
    expect_agrees(c);
    if (c.expect < 0) {
      std::printf("  %-40s libdeflate: %s\n", c.name.c_str(),
                  reference_decode(c.zlib, c.width, c.height, c.channels).ok ? "takes it" : "refuses it");
    }
  }
}

TEST(PngInflate, TruncatedAtEveryByteFails) {
  const Case good = png_inflate_test::small_case();
  expect_agrees(good);
  for (size_t size = 0; size < good.zlib.size(); ++size) {
    Case c = good;
    c.zlib.resize(size);
    c.name = "truncated to " + std::to_string(size);
    expect_agrees(c);
    EXPECT_NE(decode(c).status, PngInflateStatus::kOk) << c.name;
  }
}

TEST(PngInflate, EveryBitFlipAgreesWithLibdeflate) {
  const Case good = png_inflate_test::small_case();
  for (size_t bit = 0; bit < good.zlib.size() * 8; ++bit) {
    Case c = good;
    c.zlib[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    c.name = "bit " + std::to_string(bit) + " flipped";
    expect_agrees(c);
  }
}

TEST(PngInflate, RandomMutationsAgreeWithLibdeflate) {
  size_t taken = 0;
  const std::vector<Case> cases = png_inflate_test::mutated_cases(11, 20000);
  for (const Case& c : cases) {
    expect_agrees(c);
    if (HasFatalFailure()) return;
    taken += reference_decode(c.zlib, c.width, c.height, c.channels).ok ? 1 : 0;
  }
  std::printf("  %zu of %zu mutated streams still decode\n", taken, cases.size());
  EXPECT_GT(taken, 100u);  // the mutations reach the decoder's success paths too, not only its refusals
}

TEST(PngInflate, SpeculativeEqualsSerialOnLongLiteralStreams) {
  // The bench's kind of picture (a gradient with +-12 noise: Huffman-coded, nearly all literals), where a block
  // spans dozens of speculative windows; then faults deep inside such a block, after windows were committed.
  const std::vector<uint8_t> smooth = png_inflate_test::gradient_pixels(224, 224, 3, 3);
  const std::vector<uint8_t> noise = png_inflate_test::noise_pixels(224, 224, 3, 4);
  std::vector<uint8_t> px(smooth.size());
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(smooth[i] + noise[i] % 25 - 12);
  const std::vector<uint8_t> f = png_inflate_test::filter_rows(px, 224, 224, 3, -1, 7);
  const std::vector<Case> long_cases = {
      {"literals compress2 6", png_inflate_test::zlib_compress2(f, 6), 224, 224, 3},
      {"literals libdeflate 6", png_inflate_test::libdeflate_zlib(f, 6), 224, 224, 3},
      {"literals huffman-only", png_inflate_test::zlib_deflate(f, 6, Z_HUFFMAN_ONLY), 224, 224, 3},
      {"literals fixed", png_inflate_test::zlib_deflate(f, 6, Z_FIXED), 224, 224, 3},
  };
  std::mt19937 rng(9);
  size_t broken = 0;
  for (const Case& good : long_cases) {
    expect_agrees(good);
    ASSERT_EQ(decode(good).status, PngInflateStatus::kOk) << good.name;
    for (int k = 0; k < 40; ++k) {
      Case c = good;
      const size_t at = rng() % c.zlib.size();
      if (k % 2 == 0) {
        c.zlib.resize(at);
        c.name = good.name + " truncated to " + std::to_string(at);
      } else {
        c.zlib[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        c.name = good.name + " bit flipped in byte " + std::to_string(at);
      }
      expect_agrees(c);
      broken += decode(c).status != PngInflateStatus::kOk ? 1 : 0;
    }
  }
  EXPECT_GT(broken, 100u);
}

TEST(PngInflate, BatchEqualsOneByOneAndRefusesBadDescriptors) {
  std::vector<Case> cases = png_inflate_test::edge_cases();
  const std::vector<Case> good = png_inflate_test::good_cases();
  for (size_t i = 0; i < good.size(); i += 37) cases.push_back(good[i]);
  std::vector<uint8_t> streams;
  std::vector<PngInflateImage> images;
  uint64_t out_bytes = 0;
  for (const Case& c : cases) {
    PngInflateImage image;
    image.stream_offset = streams.size();
    image.stream_bytes = c.zlib.size();
    image.width = c.width, image.height = c.height, image.channels = c.channels;
    image.out_offset = out_bytes;
    out_bytes += uint64_t{c.width} * c.height * 3;
    streams.insert(streams.end(), c.zlib.begin(), c.zlib.end());
    images.push_back(image);
  }
  const size_t n_good = images.size();
  PngInflateImage bad = images[0];
  bad.channels = 5;
  images.push_back(bad);
  bad = images[0];
  bad.stream_offset = streams.size();
  images.push_back(bad);
  bad = images[0];
  bad.out_offset = out_bytes;
  images.push_back(bad);
  const uint64_t scratch_bytes = png_inflate_assign_scratch(images);
  std::vector<uint8_t> scratch(scratch_bytes), out(out_bytes);
  std::vector<int32_t> status(images.size(), -1);
  inflate_png_rows(streams.data(), streams.size(), images.data(), static_cast<int64_t>(images.size()), scratch.data(),
                   scratch.size(), out.data(), out.size(), status.data());
  for (size_t i = 0; i < n_good; ++i) {
    const Ours one = decode(cases[i]);
    ASSERT_EQ(status[i], static_cast<int32_t>(one.status)) << cases[i].name;
    if (one.status == PngInflateStatus::kOk) {
      EXPECT_TRUE(std::equal(one.rgb.begin(), one.rgb.end(), out.begin() + images[i].out_offset)) << cases[i].name;
    }
  }
  for (size_t i = n_good; i < images.size(); ++i) {
    EXPECT_EQ(status[i], static_cast<int32_t>(PngInflateStatus::kBadImage)) << "descriptor " << i - n_good;
  }
  std::vector<uint8_t> spec_out(out_bytes);
  std::vector<int32_t> spec_status(images.size(), -1);
  inflate_png_rows(streams.data(), streams.size(), images.data(), static_cast<int64_t>(images.size()), scratch.data(),
                   scratch.size(), spec_out.data(), spec_out.size(), spec_status.data(),
                   PngHuffmanDecoder::kSpeculative);
  EXPECT_EQ(spec_status, status);
  for (size_t i = 0; i < n_good; ++i) {
    if (status[i] != 0) continue;
    const auto from = out.begin() + static_cast<std::ptrdiff_t>(images[i].out_offset);
    const auto bytes = static_cast<std::ptrdiff_t>(uint64_t{images[i].width} * images[i].height * 3);
    EXPECT_TRUE(std::equal(from, from + bytes, spec_out.begin() + static_cast<std::ptrdiff_t>(images[i].out_offset)))
        << cases[i].name;
  }
}

}  // namespace
}  // namespace mmserve::kernels
