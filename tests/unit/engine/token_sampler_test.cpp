// TokenSampler: each rule on hand-made logits, and the draws' statistics. The frequencies of 40,000 seeded
// draws must match the distribution the rules define (softmax of logits / T, renormalised over what top-k,
// top-p and min-p keep) within 4 standard deviations of a binomial count, and never pick an excluded token;
// the same seed gives the same draws, another seed others.
#include "engine/token_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace mmserve::engine {
namespace {

std::vector<double> softmax(const std::vector<float>& logits, double t) {
  std::vector<double> p(logits.size());
  double mx = -1e300, sum = 0;
  for (float l : logits) mx = std::max(mx, l / t);
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] / t - mx);
  for (double& x : p) x /= sum;
  return p;
}

// Draws n tokens from `logits` with `params` (fresh copies of the logits each time) and checks the
// frequencies against `want` (a distribution over the ids; 0 = must never be drawn).
void expect_distribution(const SamplingParams& params, const std::vector<float>& logits,
                         const std::vector<double>& want, int n = 40000) {
  TokenSampler sampler(params);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    const int32_t id = sampler.sample(row, {}, {});
    ASSERT_TRUE(id >= 0 && id < static_cast<int32_t>(logits.size()));
    ++counts[id];
  }
  for (size_t v = 0; v < logits.size(); ++v) {
    if (want[v] == 0) {
      EXPECT_EQ(counts[v], 0) << "token " << v << " must not be drawn";
      continue;
    }
    const double sd = std::sqrt(n * want[v] * (1 - want[v]));
    EXPECT_NEAR(counts[v], n * want[v], 4 * sd + 1) << "token " << v;
  }
}

const std::vector<float> kLogits = {1.0f, 2.5f, 0.0f, 2.0f, -1.0f, 1.5f};

TEST(TokenSampler, RejectsOutOfRangeParameters) {
  auto bad = [](auto set) {
    SamplingParams p;
    set(p);
    return validate_sampling(p).code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = -0.1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = NAN; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 1.5; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_k = -2; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.min_p = 1.1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.repetition_penalty = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.presence_penalty = 2.5; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.frequency_penalty = -3; }));
  EXPECT_TRUE(validate_sampling(SamplingParams{}).ok());
}

TEST(TokenSampler, GreedyIsArgmaxWithTiesToTheLowestId) {
  SamplingParams p;
  p.temperature = 0;
  TokenSampler s(p);
  std::vector<float> row = kLogits;
  EXPECT_EQ(s.sample(row, {}, {}), 1);
  std::vector<float> tie = {0.5f, 3.0f, 3.0f, 1.0f};
  EXPECT_EQ(s.sample(tie, {}, {}), 1);
}

TEST(TokenSampler, DrawsFollowTemperatureTopKTopPAndMinP) {
  SamplingParams p;
  p.seed = 7;
  expect_distribution(p, kLogits, softmax(kLogits, 1.0));
  p.temperature = 0.5;
  expect_distribution(p, kLogits, softmax(kLogits, 0.5));
  // top-k 3 keeps ids 1, 3, 5 (logits 2.5, 2.0, 1.5).
  p.temperature = 1.0;
  p.top_k = 3;
  {
    std::vector<double> w = softmax({2.5f, 2.0f, 1.5f}, 1.0);
    expect_distribution(p, kLogits, {0, w[0], 0, w[1], 0, w[2]});
  }
  // top-p 0.6: softmax(kLogits) sorted is 1: .380, 3: .230, 5: .140, ...; .380 < .6 <= .610: ids 1 and 3.
  p.top_k = 0;
  p.top_p = 0.6;
  {
    const std::vector<double> all = softmax(kLogits, 1.0);
    const double z = all[1] + all[3];
    expect_distribution(p, kLogits, {0, all[1] / z, 0, all[3] / z, 0, 0});
  }
  // min-p 0.3: p >= 0.3 * p_max keeps logits within ln(1 / 0.3) = 1.204 of the top (2.5): 2.5, 2.0, 1.5.
  p.top_p = 1.0;
  p.min_p = 0.3;
  {
    std::vector<double> w = softmax({2.5f, 2.0f, 1.5f}, 1.0);
    expect_distribution(p, kLogits, {0, w[0], 0, w[1], 0, w[2]});
  }
}

TEST(TokenSampler, PenaltiesChangeTheLogitsAsSpecified) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0;
  TokenSampler rep(p);
  std::vector<float> row = {4.0f, 3.0f, -1.0f, 2.5f};
  const std::vector<int32_t> prompt = {0, 2};
  EXPECT_EQ(rep.sample(row, prompt, {}), 1);  // 4 -> 2 (seen, positive: divided), -1 -> -2 (multiplied)
  EXPECT_EQ(row, (std::vector<float>{2.0f, 3.0f, -2.0f, 2.5f}));
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 0.5;
  q.frequency_penalty = 0.25;
  TokenSampler pen(q);
  std::vector<float> row2 = {4.0f, 3.2f, 3.5f, 0.0f};
  const std::vector<int32_t> generated = {0, 0, 2};
  EXPECT_EQ(pen.sample(row2, prompt, generated), 1);  // the prompt does not count for these two
  EXPECT_EQ(row2, (std::vector<float>{4.0f - 0.5f - 0.5f, 3.2f, 3.5f - 0.5f - 0.25f, 0.0f}));
}

TEST(TokenSampler, TheSeedFixesTheDraws) {
  SamplingParams p;
  p.seed = 1234;
  auto draws = [&](SamplingParams params) {
    TokenSampler s(params);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> row = kLogits;
      out.push_back(s.sample(row, {}, {}));
    }
    return out;
  };
  EXPECT_EQ(draws(p), draws(p));
  SamplingParams other = p;
  other.seed = 1235;
  EXPECT_NE(draws(p), draws(other));
}

}  // namespace
}  // namespace mmserve::engine
