// COCO RLE: pycocotools' strings for HF's post-processed SAM masks, known counts/string pairs, a real string from
// pycocotools' own test suite, round trips over odd shapes, and malformed strings.
//
// Goldens: tests/fixtures/sam/<model>/golden.json "coco_rle" (from tools/reference/make_sam_fixtures.py's
// transliteration of maskApi.c, checked there against HF's own _mask_to_rle runs) with the masks they encode
// (golden.safetensors masks_packbits), and tests/fixtures/sam/rle_selfcheck.json.
#include "frontends/image/mask_rle.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/json_config.h"
#include "core/safetensors.h"
#include "test_paths.h"

namespace mmserve::image {
namespace {

std::string fixture(const std::string& relative) {
  return std::string(MMSERVE_FIXTURES_DIR) + "/" + relative;
}

nlohmann::json load_json(const std::string& relative) {
  StatusOr<nlohmann::json> json = read_json_file(fixture(relative));
  EXPECT_TRUE(json.ok()) << json.status().to_string();
  return json.ok() ? *json : nlohmann::json();
}

std::vector<uint32_t> runs_of(const nlohmann::json& counts) {
  return counts.get<std::vector<uint32_t>>();
}

// Hand-worked: [[0, 1, 1], [1, 0, 1]] read down the columns is 0 1 | 1 0 | 1 1: runs 1, 2, 1, 2; the fourth is
// written as 2 - 2 = 0.
TEST(CocoRle, SmallMaskByHand) {
  const uint8_t mask[6] = {0, 1, 1, 1, 0, 1};
  EXPECT_EQ(coco_rle_runs(mask, 2, 3), (std::vector<uint32_t>{1, 2, 1, 2}));
  EXPECT_EQ(coco_rle_counts(mask, 2, 3), "1210");
  // Starting with a foreground pixel: an empty run of zeros first. Nonzero bytes are foreground.
  const uint8_t ones[4] = {255, 1, 7, 0};  // [[255, 1], [7, 0]]: columns 1 1 | 1 0
  EXPECT_EQ(coco_rle_runs(ones, 2, 2), (std::vector<uint32_t>{0, 3, 1}));
  EXPECT_EQ(coco_rle_counts(ones, 2, 2), "031");
}

TEST(CocoRle, KnownPairsBothWays) {
  const nlohmann::json check = load_json("sam/rle_selfcheck.json");
  ASSERT_TRUE(check.contains("pairs"));
  for (const nlohmann::json& pair : check["pairs"]) {
    const std::vector<uint32_t> runs = runs_of(pair["counts"]);
    const std::string s = pair["string"];
    EXPECT_EQ(coco_rle_runs_to_string(runs), s);
    StatusOr<std::vector<uint32_t>> back = coco_rle_runs_from_string(s);
    ASSERT_TRUE(back.ok()) << s << ": " << back.status().to_string();
    EXPECT_EQ(*back, runs) << s;
  }
}

// pycocotools' tests/test_cases.py (testZeroLeadingRLE): a 1350x1080 mask whose string starts with three empty
// runs. It decodes to exactly the image, re-encodes to the same string from its runs, and a mask round trip
// gives the canonical runs (the empty runs merged), as the Python transliteration computed.
TEST(CocoRle, RealPycocotoolsString) {
  const nlohmann::json real = load_json("sam/rle_selfcheck.json")["pycocotools_real"];
  const std::string counts = real["counts"];
  StatusOr<std::vector<uint32_t>> runs = coco_rle_runs_from_string(counts);
  ASSERT_TRUE(runs.ok()) << runs.status().to_string();
  EXPECT_EQ(runs->size(), real["runs"].get<size_t>());
  EXPECT_EQ(std::vector<uint32_t>(runs->begin(), runs->begin() + 6), runs_of(real["first_runs"]));
  EXPECT_EQ(coco_rle_runs_to_string(*runs), counts);
  StatusOr<std::vector<uint8_t>> mask = decode_coco_rle(counts, 1350, 1080);
  ASSERT_TRUE(mask.ok()) << mask.status().to_string();
  size_t area = 0;
  for (uint8_t v : *mask) area += v;
  EXPECT_EQ(area, real["area"].get<size_t>());
  EXPECT_EQ(coco_rle_counts(mask->data(), 1350, 1080), real["canonical_counts_string"].get<std::string>());
}

// Every post-processed mask HF produced for the SAM fixtures: our string equals pycocotools', and decodes back.
TEST(CocoRle, MatchesGoldenStringsOfSamMasks) {
  int checked = 0;
  for (const char* model : {"sam-tiny-win-f32", "sam-tiny-glob-f16"}) {
    const nlohmann::json meta = load_json(std::string("sam/") + model + "/golden.json");
    StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::open(fixture(std::string("sam/") + model + "/golden.safetensors"));
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    for (const nlohmann::json& c : meta["cases"]) {
      const std::string name = c["name"];
      const std::vector<int64_t> shape = c["masks_shape"].get<std::vector<int64_t>>();  // [1, k, H, W]
      ASSERT_EQ(shape.size(), 4u);
      const int k = static_cast<int>(shape[1]), h = static_cast<int>(shape[2]), w = static_cast<int>(shape[3]);
      const TensorInfo* packed = (*file)->find("case/" + name + "/masks_packbits");
      ASSERT_NE(packed, nullptr) << name;
      const size_t plane = static_cast<size_t>(h) * w;
      ASSERT_EQ(packed->nbytes, (plane * k + 7) / 8);
      ASSERT_EQ(c["coco_rle"].size(), static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) {
        std::vector<uint8_t> mask(plane);
        for (size_t i = 0; i < plane; ++i) {
          const size_t bit = j * plane + i;
          mask[i] = (packed->data[bit / 8] >> (7 - bit % 8)) & 1;
        }
        const nlohmann::json& rle = c["coco_rle"][j];
        ASSERT_EQ(rle["size"].get<std::vector<int>>(), (std::vector<int>{h, w}));
        const std::string want = rle["counts"];
        EXPECT_EQ(coco_rle_counts(mask.data(), h, w), want) << model << " " << name << " mask " << j;
        StatusOr<std::vector<uint8_t>> back = decode_coco_rle(want, h, w);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(*back, mask) << model << " " << name << " mask " << j;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 20);
}

TEST(CocoRle, RoundTripsOddShapes) {
  std::mt19937 rng(13);
  const int shapes[][2] = {{1, 1}, {1, 17}, {17, 1}, {2, 2}, {3, 5}, {31, 7}, {64, 63}, {1, 1000}};
  for (const auto& s : shapes) {
    const int h = s[0], w = s[1];
    for (int pattern = 0; pattern < 5; ++pattern) {
      std::vector<uint8_t> mask(static_cast<size_t>(h) * w);
      for (size_t i = 0; i < mask.size(); ++i) {
        switch (pattern) {
          case 0: mask[i] = 0; break;                  // all zero
          case 1: mask[i] = 1; break;                  // all one
          case 2: mask[i] = rng() % 2; break;          // noise: many short runs
          case 3: mask[i] = (rng() % 50) == 0; break;  // sparse: long runs, big deltas
          default: mask[i] = (i % static_cast<size_t>(w)) * 2 >= static_cast<size_t>(w); break;  // right half
        }
      }
      const std::vector<uint32_t> runs = coco_rle_runs(mask.data(), h, w);
      uint64_t total = 0;
      for (uint32_t r : runs) total += r;
      EXPECT_EQ(total, mask.size());
      EXPECT_EQ(runs[0] == 0, mask[0] == 1) << h << "x" << w << " pattern " << pattern;
      const std::string counts = coco_rle_counts(mask.data(), h, w);
      StatusOr<std::vector<uint8_t>> back = decode_coco_rle(counts, h, w);
      ASSERT_TRUE(back.ok()) << h << "x" << w << " pattern " << pattern << ": " << back.status().to_string();
      EXPECT_EQ(*back, mask) << h << "x" << w << " pattern " << pattern;
    }
  }
  // Any non-zero byte is foreground (a PNG-style 255 mask encodes as its 0/1 twin), across 32-pixel tiles.
  std::vector<uint8_t> ones(45 * 70), bytes(ones.size());
  for (size_t i = 0; i < ones.size(); ++i) {
    ones[i] = (rng() % 7) < 3;
    bytes[i] = ones[i] ? static_cast<uint8_t>(1 + rng() % 255) : 0;
  }
  EXPECT_EQ(coco_rle_runs(bytes.data(), 45, 70), coco_rle_runs(ones.data(), 45, 70));
  const uint8_t one = 1, zero = 0;
  EXPECT_EQ(coco_rle_counts(&zero, 1, 1), "1");
  EXPECT_EQ(coco_rle_counts(&one, 1, 1), "01");
  EXPECT_EQ(coco_rle_counts(nullptr, 0, 0), "0");  // pycocotools encodes an empty mask as one empty run
  StatusOr<std::vector<uint8_t>> empty = decode_coco_rle("0", 0, 5);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  // A large run (4M zeros, then ones) needs several characters and a negative delta.
  std::vector<uint8_t> big(2048 * 2048, 0);
  big.back() = 1;
  big[5] = 1;
  const std::string counts = coco_rle_counts(big.data(), 2048, 2048);
  StatusOr<std::vector<uint8_t>> back = decode_coco_rle(counts, 2048, 2048);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, big);
}

// The word-at-a-time transition scan against a pixel-by-pixel walk down the columns (pycocotools' rleEncode),
// over lengths around the 8-byte words and transitions at every offset within a word.
TEST(CocoRle, WordScanEqualsPixelWalk) {
  std::mt19937 rng(29);
  for (int h = 1; h <= 19; h += 3) {
    for (int w = 1; w <= 23; w += 2) {
      for (int density : {2, 3, 9}) {
        std::vector<uint8_t> mask(static_cast<size_t>(h) * w);
        for (uint8_t& v : mask) v = (rng() % density) == 0 ? 1 : 0;
        std::vector<uint32_t> want;
        uint8_t value = 0;
        uint32_t run = 0;
        for (int x = 0; x < w; ++x) {
          for (int y = 0; y < h; ++y) {
            const uint8_t v = mask[static_cast<size_t>(y) * w + x];
            if (v != value) {
              want.push_back(run);
              run = 0;
              value = v;
            }
            ++run;
          }
        }
        want.push_back(run);
        EXPECT_EQ(coco_rle_runs(mask.data(), h, w), want) << h << "x" << w << " density " << density;
      }
    }
  }
}

TEST(CocoRle, MalformedStringsAreInvalidArgument) {
  const struct {
    const char* counts;
    int h, w;
    const char* why;
  } cases[] = {
      {"", 2, 2, "cover"},         // no runs for a 4-pixel mask
      {"3", 2, 2, "cover"},        // 3 of 4 pixels
      {"5", 2, 2, "cover"},        // 5 of 4
      {"13 ", 2, 2, "character"},  // space (32) is below '0'
      {"1p", 2, 2, "character"},   // 'p' (112) is above 'o'
      {"1\x7f", 2, 2, "character"},
      {"P", 2, 2, "cut off"},  // continuation bit on the last character
      {"1PPPPPPPPP1", 2, 2, "longer"},
      {"011N", 2, 2, "comes out"},  // fourth run 1 + (-2) = -1
      {"N", 2, 2, "comes out"},     // a negative first run
  };
  for (const auto& c : cases) {
    StatusOr<std::vector<uint8_t>> mask = decode_coco_rle(c.counts, c.h, c.w);
    ASSERT_FALSE(mask.ok()) << c.counts;
    EXPECT_EQ(mask.status().code(), StatusCode::kInvalidArgument) << c.counts;
    EXPECT_NE(mask.status().message().find(c.why), std::string::npos) << c.counts << ": " << mask.status().message();
  }
  EXPECT_EQ(decode_coco_rle("1", -1, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_coco_rle("0PP1", 1 << 15, 1 << 15).status().code(), StatusCode::kTooLarge);
  // The largest value 7 characters hold decodes; an eighth character is refused (above).
  StatusOr<std::vector<uint32_t>> max_run =
      coco_rle_runs_from_string(coco_rle_runs_to_string(std::vector<uint32_t>{0, 0xffffffffu}));
  ASSERT_TRUE(max_run.ok()) << max_run.status().to_string();
  EXPECT_EQ(*max_run, (std::vector<uint32_t>{0, 0xffffffffu}));
}

}  // namespace
}  // namespace mmserve::image
