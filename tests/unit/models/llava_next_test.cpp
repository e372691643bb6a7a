// LLaVA-NeXT's any-resolution geometry (models/llava/llava_next.h) against HF: the placeholder count and the tile
// count of one image for 30 (height, width) sizes through transformers 5.17's whole LlavaNextProcessor at llava-v1.6's
// geometry (336 tiles, patch 14, its five pinpoints; tests/fixtures/llava/next_processor_goldens.json, made by
// tools/reference/make_llava_next_fixtures.py), including 1-pixel, extreme-aspect, exact-pinpoint and one-pixel-past
// sizes; and the packing order's invariants (every tile row used at most once, the base first, one image_newline
// closing each row).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "models/llava/llava.h"
#include "models/llava/llava_next.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

LlavaConfig v16_geometry(const nlohmann::json& goldens) {
  LlavaConfig c;
  c.vision.image_size = goldens["image_size"].get<int64_t>();
  c.vision.patch_size = goldens["patch_size"].get<int64_t>();
  for (const auto& p : goldens["image_grid_pinpoints"]) c.grid_pinpoints.push_back({p[0], p[1]});
  c.drop_cls = goldens["strategy"] == "default";
  return c;
}

nlohmann::json goldens() {
  return nlohmann::json::parse(std::ifstream(MMSERVE_FIXTURES_DIR + "/llava/next_processor_goldens.json"));
}

TEST(LlavaNextGeometry, TokenAndTileCountsAreLlavaNextProcessors) {
  const nlohmann::json g = goldens();
  const LlavaConfig c = v16_geometry(g);
  ASSERT_EQ(c.tokens_per_image(), 576);
  int sizes = 0;
  for (const nlohmann::json& s : g["counts"]) {
    const int64_t h = s["height"], w = s["width"];
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
    EXPECT_EQ(llava_image_tokens(c, h, w), s["tokens"].get<int64_t>());
    EXPECT_EQ(llava_image_tiles(c, h, w), s["tiles"].get<int64_t>());
    ++sizes;
  }
  EXPECT_GE(sizes, 30);
}

TEST(LlavaNextGeometry, SelectBestResolutionKeepsTheMostPixels) {
  const Pinpoints p = {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
  // 300x451 fits 336x672 and 672x672 whole: the one that wastes less.
  EXPECT_EQ(select_best_resolution(300, 451, p), (std::array<int64_t, 2>{336, 672}));
  EXPECT_EQ(select_best_resolution(600, 900, p), (std::array<int64_t, 2>{672, 672}));
  EXPECT_EQ(select_best_resolution(336, 672, p), (std::array<int64_t, 2>{336, 672}));    // exact fit
  EXPECT_EQ(select_best_resolution(2000, 700, p), (std::array<int64_t, 2>{1008, 336}));  // tall
  EXPECT_EQ(select_best_resolution(1, 1, p), (std::array<int64_t, 2>{336, 672}));        // a tie: the first least waste
}

TEST(LlavaNextGeometry, PackingOrderUsesTheBaseThenTheUnpaddedGridRowByRow) {
  const LlavaConfig c = v16_geometry(goldens());
  const int64_t per_tile = c.tokens_per_image();
  for (const auto& [h, w] : std::vector<std::array<int64_t, 2>>{{300, 451}, {451, 300}, {1, 1000}, {1008, 336}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
    const AnyresLayout l = llava_next_layout(c, h, w);
    const std::vector<int32_t> order = llava_next_feature_order(c, h, w);
    ASSERT_EQ(static_cast<int64_t>(order.size()), l.tokens);
    for (int64_t r = 0; r < per_tile; ++r) EXPECT_EQ(order[r], r);  // the base tile first, as it is
    std::set<int32_t> used;
    int64_t newlines = 0;
    for (size_t r = static_cast<size_t>(per_tile); r < order.size(); ++r) {
      if (order[r] < 0) {
        ++newlines;
        EXPECT_EQ((r - per_tile + 1) % static_cast<size_t>(l.patch_cols + 1), 0u) << "a newline closes each row";
        continue;
      }
      EXPECT_GE(order[r], per_tile);
      EXPECT_LT(order[r], l.tiles * per_tile);
      EXPECT_TRUE(used.insert(order[r]).second) << "row " << order[r] << " used twice";
    }
    EXPECT_EQ(newlines, l.patch_rows);
    EXPECT_LE(l.patch_rows, l.grid_rows * 24);
    EXPECT_LE(l.patch_cols, l.grid_cols * 24);
  }
}

}  // namespace
}  // namespace mmserve::models
