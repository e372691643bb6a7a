// pil_resize_cpu against a naive reimplementation of Resample.c's two 8bpc passes written here: the horizontal
// pass over every source row (no trimming), the vertical pass over that, then the window pasted into zeros, CHW.
// Covers every pass combination (both, horizontal only, vertical only, none), up- and downscaling, 1xN and Nx1
// strips, windows cropped and padded (offsets on both sides), empty windows, mixed batches with planned scratch,
// and the clamps at 0 and 255 (the test tables overshoot); broken batches are kInvalidArgument.
#include "kernels/pil_resize/pil_resize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/pil_resize/pil_resize_test_util.h"

namespace mmserve::kernels {
namespace {

using pil_resize_test::AxisTable;
using pil_resize_test::HostBatch;
using pil_resize_test::Placement;

uint8_t clip8(int64_t acc) {
  return static_cast<uint8_t>(std::clamp<int64_t>(acc >> 22, 0, 255));
}

// One image the naive way: returns [3, out_h, out_w].
std::vector<uint8_t> naive(const HostBatch& hb, const PilResizeImage& im) {
  const uint8_t* src = hb.src.data() + im.src_offset;
  const int w = im.src_width, h = im.src_height, cw = im.x.count, ch = im.y.count;
  const int32_t* tab = hb.tables.data();
  std::vector<uint8_t> temp(static_cast<size_t>(h) * cw * 3);  // every source row, the window's columns
  for (int r = 0; r < h; ++r) {
    for (int i = 0; i < cw; ++i) {
      for (int c = 0; c < 3; ++c) {
        uint8_t v;
        if (im.x.resample) {
          int64_t acc = 1 << 21;
          for (int t = 0; t < tab[im.x.taps + i]; ++t) {
            acc += int64_t{src[(static_cast<size_t>(r) * w + tab[im.x.xmin + i] + t) * 3 + c]} *
                   tab[im.x.coeffs + i * im.x.ksize + t];
          }
          v = clip8(acc);
        } else {
          v = src[(static_cast<size_t>(r) * w + im.x.src_start + i) * 3 + c];
        }
        temp[(static_cast<size_t>(r) * cw + i) * 3 + c] = v;
      }
    }
  }
  std::vector<uint8_t> out(static_cast<size_t>(3) * hb.out_w * hb.out_h, 0);
  for (int j = 0; j < ch; ++j) {
    for (int i = 0; i < cw; ++i) {
      for (int c = 0; c < 3; ++c) {
        uint8_t v;
        if (im.y.resample) {
          int64_t acc = 1 << 21;
          for (int t = 0; t < tab[im.y.taps + j]; ++t) {
            acc += int64_t{temp[(static_cast<size_t>(tab[im.y.xmin + j] + t) * cw + i) * 3 + c]} *
                   tab[im.y.coeffs + j * im.y.ksize + t];
          }
          v = clip8(acc);
        } else {
          v = temp[(static_cast<size_t>(im.y.src_start + j) * cw + i) * 3 + c];
        }
        out[(static_cast<size_t>(c) * hb.out_h + im.y.dst + j) * hb.out_w + im.x.dst + i] = v;
      }
    }
  }
  return out;
}

// Runs the twin on `hb` and compares every image with the naive passes.
void expect_naive(const HostBatch& hb, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<uint8_t> scratch(static_cast<size_t>(hb.scratch_bytes));
  std::vector<uint8_t> out(hb.out_bytes(), 0xab);  // every byte must be written
  const Status st = pil_resize_cpu(hb.batch(hb.src.data(), hb.tables.data(), scratch.data(), out.data()));
  ASSERT_TRUE(st.ok()) << st.to_string();
  const size_t image_bytes = static_cast<size_t>(3) * hb.out_w * hb.out_h;
  for (size_t i = 0; i < hb.images.size(); ++i) {
    const std::vector<uint8_t> want = naive(hb, hb.images[i]);
    for (size_t b = 0; b < image_bytes; ++b) {
      ASSERT_EQ(out[i * image_bytes + b], want[b]) << "image " << i << " byte " << b;
    }
  }
}

pil_resize_test::TableFn jittered(double support_base) {
  return [support_base](int in, int out, int start, int count) {
    return pil_resize_test::pil_like_table(in, out, start, count, support_base,
                                           static_cast<uint32_t>(in * 7919 + out * 31 + start));
  };
}

struct Case {
  int w, h, rw, rh;  // source and resized sizes
};

// Source -> resized sizes covering every pass combination, strips, up- and downscaling and odd sizes.
const Case kCases[] = {
    {40, 30, 40, 30},  {40, 30, 64, 30},   {40, 30, 40, 80},  {40, 30, 23, 17}, {40, 30, 97, 71},
    {1, 1, 32, 32},    {1, 37, 32, 1184},  {37, 1, 1184, 32}, {1, 37, 1, 20},   {200, 3, 32, 1},
    {333, 17, 50, 32}, {17, 333, 32, 627}, {32, 32, 32, 32},  {31, 33, 33, 31}, {500, 400, 40, 32},
};

TEST(PilResize, CropOfEveryPassCombinationEqualsNaivePasses) {
  for (double support : {1.0, 2.0}) {
    for (const Case& c : kCases) {
      for (const auto& [cw, chh] : {std::pair{32, 32}, std::pair{24, 40}, std::pair{1, 1}}) {
        HostBatch hb(cw, chh);
        hb.add(pil_resize_test::random_pixels(c.w, c.h, static_cast<uint32_t>(c.w + c.h)), c.w, c.h,
               pil_resize_test::center_crop_placement(c.rw, c.rh, cw, chh), jittered(support));
        expect_naive(hb, std::to_string(c.w) + "x" + std::to_string(c.h) + " -> " + std::to_string(c.rw) + "x" +
                             std::to_string(c.rh) + " crop " + std::to_string(cw) + "x" + std::to_string(chh) +
                             " support " + std::to_string(support));
      }
    }
  }
}

TEST(PilResize, PaddedPlacementEqualsNaivePasses) {
  for (const Case& c : kCases) {
    const int side = std::max({c.rw, c.rh, 1});
    HostBatch hb(side + 3, side + 1);  // zeros right and below, as SAM's pad
    hb.add(pil_resize_test::random_pixels(c.w, c.h, 5), c.w, c.h, pil_resize_test::pad_placement(c.rw, c.rh),
           jittered(2.0));
    expect_naive(hb, std::to_string(c.w) + "x" + std::to_string(c.h) + " pad");
  }
}

TEST(PilResize, MixedBatchWithPlannedScratch) {
  HostBatch hb(48, 40);
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const std::vector<uint8_t> pixels = pil_resize_test::random_pixels(c.w, c.h, seed++);
    if (c.rw > 48 || c.rh > 40) {
      hb.add(pixels, c.w, c.h, pil_resize_test::center_crop_placement(c.rw, c.rh, 48, 40),
             jittered(seed % 2 ? 1.0 : 2.0));
    } else {
      hb.add(pixels, c.w, c.h, pil_resize_test::pad_placement(c.rw, c.rh), jittered(2.0));
    }
  }
  // A window placed away from the corner on both axes, and an empty one (the whole image is padding).
  Placement p{30, 20, 3, 20, 5, 2, 11, 7};
  hb.add(pil_resize_test::random_pixels(13, 9, seed++), 13, 9, p, jittered(1.0));
  hb.add(pil_resize_test::random_pixels(13, 9, seed++), 13, 9, Placement{30, 20, 0, 0, 0, 0, 0, 0}, jittered(1.0));
  EXPECT_GT(hb.scratch_bytes, 0);
  expect_naive(hb, "mixed batch");
}

TEST(PilResize, ScratchHoldsOnlyTheRowsTheVerticalPassReads) {
  // A 1 x 400 strip to a 32 x 12800 image cropped to 32 x 32: the kept rows read a handful of source rows.
  HostBatch hb(32, 32);
  hb.add(pil_resize_test::random_pixels(1, 400, 3), 1, 400, pil_resize_test::center_crop_placement(32, 12800, 32, 32),
         jittered(2.0));
  EXPECT_LT(hb.images[0].y.src_count, 8);
  EXPECT_EQ(hb.scratch_bytes, (32 * 3 * hb.images[0].y.src_count + 15) / 16 * 16);
  expect_naive(hb, "strip");
}

TEST(PilResize, BrokenBatchesAreInvalidArgument) {
  HostBatch hb(16, 16);
  hb.add(pil_resize_test::random_pixels(20, 10, 1), 20, 10, pil_resize_test::center_crop_placement(32, 16, 16, 16),
         jittered(2.0));
  std::vector<uint8_t> scratch(static_cast<size_t>(hb.scratch_bytes)), out(hb.out_bytes());
  const PilResizeBatch good = hb.batch(hb.src.data(), hb.tables.data(), scratch.data(), out.data());
  ASSERT_TRUE(pil_resize_cpu(good).ok());
  const auto refused = [&](const std::string& what, auto edit) {
    PilResizeBatch b = good;
    std::vector<PilResizeImage> images = hb.images;
    std::vector<int32_t> tables = hb.tables;
    b.images = images.data();
    b.tables = tables.data();
    edit(b, images[0], tables);
    EXPECT_EQ(pil_resize_cpu(b).code(), StatusCode::kInvalidArgument) << what;
  };
  refused("n < 0", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.n = -1; });
  refused("output 0 wide", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.out_width = 0; });
  refused("null out", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.out = nullptr; });
  refused("null tables", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.tables = nullptr; });
  refused("image past src", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.src_bytes -= 1; });
  refused("window past output", [](PilResizeBatch&, PilResizeImage& im, std::vector<int32_t>&) { im.x.dst = 1; });
  refused("source range past image",
          [](PilResizeBatch&, PilResizeImage& im, std::vector<int32_t>&) { im.y.src_count = 11; });
  refused("copy axis with src_count != count", [](PilResizeBatch&, PilResizeImage& im, std::vector<int32_t>&) {
    im.y.resample = false;
    im.y.src_count = im.y.count + 1;
  });
  refused("table past tables", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.tables_count -= 1; });
  refused("scratch too small", [](PilResizeBatch& b, PilResizeImage&, std::vector<int32_t>&) { b.scratch_bytes -= 1; });
  refused("taps beyond ksize",
          [](PilResizeBatch&, PilResizeImage& im, std::vector<int32_t>& t) { t[im.x.taps] = im.x.ksize + 1; });
  refused("taps outside the source range",
          [](PilResizeBatch&, PilResizeImage& im, std::vector<int32_t>& t) { t[im.y.xmin] = im.y.src_start - 1; });
  EXPECT_TRUE(pil_resize_cpu(hb.batch(nullptr, nullptr, nullptr, nullptr)).code() == StatusCode::kInvalidArgument);
  PilResizeBatch empty = good;
  empty.n = 0;
  empty.out = nullptr;
  EXPECT_TRUE(pil_resize_cpu(empty).ok());
}

}  // namespace
}  // namespace mmserve::kernels
