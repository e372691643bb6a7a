// engine/chunk_cost.h: the chunk size that keeps a chunk near the time budget, for the cost shapes the executors
// meet: per-row (a CPU tower), fixed plus per-row (a GPU batch), and fixed-dominated (the batch PNG decode, where
// a per-row average once shrank every chunk to one image).
#include "engine/chunk_cost.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>

namespace mmserve::engine {
namespace {

// Runs batches of `rows` through the chooser as run_tower does (chunks until the batch is done, each observed),
// starting from a warm-up chunk of 1, and returns the chunk size chosen for the last batch's first chunk.
int64_t settle(const std::function<double(int64_t)>& cost_ms, double budget_ms, int64_t rows, bool power_of_two,
               int batches = 20) {
  ChunkCost cost;
  cost.observe(1, cost_ms(1));
  int64_t first = 0;
  for (int b = 0; b < batches; ++b) {
    first = cost.rows_for(budget_ms, rows, power_of_two);
    for (int64_t begin = 0; begin < rows;) {
      const int64_t chunk = cost.rows_for(budget_ms, rows - begin, power_of_two);
      cost.observe(chunk, cost_ms(chunk));
      begin += chunk;
    }
  }
  return first;
}

TEST(ChunkCost, NoBudgetOrNoMeasurementTakesTheWholeBatch) {
  ChunkCost cost;
  EXPECT_EQ(cost.rows_for(5, 64, true), 64);  // nothing measured yet
  cost.observe(1, 100);
  EXPECT_EQ(cost.rows_for(0, 64, true), 64);  // no budget
  EXPECT_EQ(cost.rows_for(5, 1, true), 1);
  EXPECT_EQ(cost.rows_for(5, 0, true), 1);
}

TEST(ChunkCost, PerRowCostFillsTheBudget) {
  // 0.3 ms a row, budget 5: 16 rows (4.8 ms) is the largest power of two, 16 the largest count.
  const auto linear = [](int64_t rows) { return 0.3 * static_cast<double>(rows); };
  EXPECT_EQ(settle(linear, 5, 64, true), 16);
  EXPECT_EQ(settle(linear, 5, 64, false), 16);
  ChunkCost cost;
  for (int64_t rows : {1, 2, 4, 8, 3}) cost.observe(rows, linear(rows));
  const ChunkCost::Fit fit = cost.fit();
  EXPECT_TRUE(fit.identified);
  EXPECT_NEAR(fit.fixed_ms, 0, 1e-9);
  EXPECT_NEAR(fit.row_ms, 0.3, 1e-9);
}

TEST(ChunkCost, FixedPlusPerRowIsFitApart) {
  // A GPU tower: 0.4 ms a launch plus 0.035 ms an image. The per-row average of a chunk of 1 (0.435 ms) would
  // allow 8 images; the fit allows 5 / 0.035 = 142, so the whole batch of 64.
  const auto gpu = [](int64_t rows) { return 0.4 + 0.035 * static_cast<double>(rows); };
  EXPECT_EQ(settle(gpu, 5, 64, true), 64);
  ChunkCost cost;
  for (int64_t rows : {1, 16, 64, 8}) cost.observe(rows, gpu(rows));
  EXPECT_NEAR(cost.fit().fixed_ms, 0.4, 1e-9);
  EXPECT_NEAR(cost.fit().row_ms, 0.035, 1e-9);
}

TEST(ChunkCost, AFixedCostOverTheBudgetDoesNotShrinkChunksToOne) {
  // The batch PNG decode: ~7 ms whatever the count (the longest image's inflate), plus 0.1 ms an image. Over the
  // budget even for one image; the per-row part still fills the budget: 50 images, 32 as a power of two, never 1.
  const auto decode = [](int64_t rows) { return 7.0 + 0.1 * static_cast<double>(rows); };
  EXPECT_EQ(settle(decode, 5, 64, false), 50);
  EXPECT_EQ(settle(decode, 5, 64, true), 32);
  // And a purely fixed cost takes the whole batch.
  EXPECT_EQ(settle([](int64_t) { return 7.0; }, 5, 64, true), 64);
}

TEST(ChunkCost, OneSizeOnlyIsReadCautiouslyAndThenProbed) {
  ChunkCost cost;
  cost.observe(1, 7);  // per row 7 ms as far as one size tells
  EXPECT_FALSE(cost.fit().identified);
  EXPECT_DOUBLE_EQ(cost.fit().row_ms, 7);
  // Cautious: 5 / 7 rows fit, so 1; the next chunk doubles it to learn the split.
  EXPECT_EQ(cost.rows_for(5, 64, true), 2);
  cost.observe(2, 7.04);
  EXPECT_TRUE(cost.fit().identified);
  EXPECT_GE(cost.rows_for(5, 64, true), 32);
}

TEST(ChunkCost, ASlowerDeviceIsFollowed) {
  // The speed changes under load: the chunk follows within a few chunks (forgetting 0.8 a chunk).
  ChunkCost cost;
  for (int i = 0; i < 20; ++i) cost.observe(i % 2 ? 8 : 16, 0.1 * (i % 2 ? 8 : 16));
  EXPECT_EQ(cost.rows_for(5, 64, true), 32);  // 0.1 ms a row: 50 fit
  for (int i = 0; i < 30; ++i) cost.observe(i % 2 ? 8 : 16, 0.4 * (i % 2 ? 8 : 16));
  EXPECT_EQ(cost.rows_for(5, 64, true), 8);  // 0.4 ms a row: 12 fit
}

TEST(ChunkCost, IgnoresMeaninglessObservations) {
  ChunkCost cost;
  cost.observe(0, 5);
  cost.observe(-3, 5);
  cost.observe(4, -1);
  EXPECT_FALSE(cost.measured());
}

}  // namespace
}  // namespace mmserve::engine
