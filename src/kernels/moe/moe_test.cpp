// The MoE routing kernels against plain loops: routing over odd expert counts and k (with ties), the plan's grouping
// (every pair once, experts contiguous, tokens ascending, empty experts), and permute + combine against the
// weighted sum written out.
#include "kernels/moe/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(Moe, RouteIsTopKOfTheSoftmaxRenormalised) {
  for (int64_t experts : {1, 5, 8, 33}) {
    for (int64_t k : {1, 2, 3}) {
      if (k > experts) continue;
      const int64_t tokens = 11, ld = experts + 3;
      std::vector<float> logits = random_floats(static_cast<size_t>(tokens * ld), 7, -4.0f, 4.0f);
      std::vector<int32_t> ids(static_cast<size_t>(tokens * k), -1);
      std::vector<float> w(ids.size(), -1.0f);
      moe_route(logits.data(), ld, tokens, experts, k, ids.data(), w.data());
      for (int64_t t = 0; t < tokens; ++t) {
        const float* l = logits.data() + t * ld;
        double sum = 0;
        for (int64_t e = 0; e < experts; ++e) sum += std::exp(double{l[e]});
        std::vector<int32_t> order(static_cast<size_t>(experts));
        for (int64_t e = 0; e < experts; ++e) order[e] = static_cast<int32_t>(e);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
        double top = 0;
        for (int64_t j = 0; j < k; ++j) top += std::exp(double{l[order[j]]}) / sum;
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ(ids[t * k + j], order[j]) << experts << " " << k << " " << t;
          EXPECT_NEAR(w[t * k + j], std::exp(double{l[order[j]]}) / sum / top, 1e-6);
        }
      }
    }
  }
}

TEST(Moe, RouteBreaksTiesToTheLowerExpert) {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, 1.0f, 2.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  moe_route(logits.data(), 5, 1, 5, 2, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
}

TEST(Moe, PlanGroupsEveryPairByExpertWithTokensAscending) {
  const int64_t tokens = 6, experts = 5, k = 2;
  // expert 3 gets nothing; expert 0 gets tokens 0, 2, 5
  const std::vector<int32_t> ids = {0, 1, 1, 4, 2, 0, 4, 1, 2, 4, 1, 0};
  const MoePlan plan = moe_plan(ids.data(), tokens, experts, k);
  EXPECT_EQ(plan.offsets, (std::vector<int32_t>{0, 3, 7, 9, 9, 12}));
  EXPECT_EQ(plan.rows(3), 0);
  std::set<int32_t> seen;
  for (int64_t e = 0; e < experts; ++e) {
    for (int32_t r = plan.offsets[e]; r < plan.offsets[e + 1]; ++r) {
      EXPECT_EQ(ids[plan.pair[r]], e);
      EXPECT_EQ(plan.row_of[plan.pair[r]], r);
      if (r > plan.offsets[e]) {
        EXPECT_LT(plan.pair[r - 1] / k, plan.pair[r] / k);
      }
      seen.insert(plan.pair[r]);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(tokens * k));
}

TEST(Moe, PermuteThenCombineIsTheWeightedSumOfExpertOutputs) {
  const int64_t tokens = 9, experts = 7, k = 3, cols = 13, ld = 17;
  std::vector<float> logits = random_floats(static_cast<size_t>(tokens * experts), 3, -2.0f, 2.0f);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  std::vector<float> w(ids.size());
  moe_route(logits.data(), experts, tokens, experts, k, ids.data(), w.data());
  const MoePlan plan = moe_plan(ids.data(), tokens, experts, k);
  const std::vector<float> x = random_floats(static_cast<size_t>(tokens * ld), 4, -1.0f, 1.0f);
  std::vector<float> xp(static_cast<size_t>(tokens * k * cols));
  moe_permute(x.data(), ld, plan, cols, xp.data(), cols);
  // "expert e" maps a row to (e + 1) * row + e: an output that tells experts apart
  std::vector<float> yp(xp.size());
  for (int64_t e = 0; e < experts; ++e) {
    for (int32_t r = plan.offsets[e]; r < plan.offsets[e + 1]; ++r) {
      for (int64_t c = 0; c < cols; ++c) yp[r * cols + c] = (e + 1) * xp[r * cols + c] + e;
    }
  }
  std::vector<float> out(static_cast<size_t>(tokens * ld), 42.0f);
  moe_combine(yp.data(), cols, plan, ids.data(), w.data(), cols, out.data(), ld);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      double want = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = ids[t * k + j];
        want += double{w[t * k + j]} * ((e + 1) * double{x[t * ld + c]} + e);
      }
      EXPECT_NEAR(out[t * ld + c], want, 1e-5) << t << " " << c;
    }
    for (int64_t c = cols; c < ld; ++c) EXPECT_EQ(out[t * ld + c], 42.0f) << "padding written";
  }
}

}  // namespace
}  // namespace mmserve::kernels
