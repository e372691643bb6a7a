// The CPU sampling twin (sampling.h) against its rules on small hand-made vocabularies: Philox's known answers,
// greedy and its ties, each penalty (prompt vs generated ids, duplicates, signs), top-k with ties at the cut,
// top-p and min-p boundaries, their combinations, raw logprobs and top-n; then draw statistics: over many steps
// the frequencies match the kept, renormalised softmax (a chi-square bound), and excluded tokens never appear.
#include "kernels/sampling/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "kernels/sampling/sampling_math.h"

namespace mmserve::kernels {
namespace {

// One row through the twin; `seen` with the first prompt_len ids the prompt's.
struct Row {
  Row(std::vector<float> l, SamplingRowParams p, std::vector<int32_t> s = {}, int32_t prompt = 0)
      : logits(std::move(l)), params(p), seen(std::move(s)), prompt_len(prompt) {}
  std::vector<float> logits;
  SamplingRowParams params;
  std::vector<int32_t> seen;
  int32_t prompt_len = 0;
};

int32_t sample(Row& row, float* logprob = nullptr, int64_t top_n = 0, std::vector<int32_t>* top_ids = nullptr,
               std::vector<float>* top_logprobs = nullptr) {
  const std::vector<int32_t> offsets = {0, static_cast<int32_t>(row.seen.size())};
  int32_t id = -7;
  std::vector<int32_t> ti(static_cast<size_t>(top_n));
  std::vector<float> tl(static_cast<size_t>(top_n));
  SamplingArgs a;
  a.logits = row.logits.data();
  a.rows = 1;
  a.vocab = a.vocab_ld = static_cast<int64_t>(row.logits.size());
  a.params = &row.params;
  a.seen_offsets = offsets.data();
  const int32_t none = 0;
  a.seen_ids = row.seen.empty() ? &none : row.seen.data();
  a.prompt_lens = &row.prompt_len;
  a.ids = &id;
  a.logprobs = logprob;
  a.top_n = top_n;
  a.top_ids = ti.data();
  a.top_logprobs = tl.data();
  EXPECT_TRUE(sample_tokens(a).ok());
  if (top_ids) *top_ids = ti;
  if (top_logprobs) *top_logprobs = tl;
  return id;
}

SamplingRowParams with(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingRowParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// The set of ids drawn over `steps` steps (seed fixed, step varied).
std::map<int32_t, int> draws(const Row& row, int steps, uint64_t seed = 7) {
  std::map<int32_t, int> counts;
  for (int s = 0; s < steps; ++s) {
    Row r = row;
    r.params.seed = seed;
    r.params.step = static_cast<uint64_t>(s);
    ++counts[sample(r)];
  }
  return counts;
}

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

TEST(Sampling, PhiloxKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Sampling, FixedExpIsAccurateAndExactAtZero) {
  EXPECT_EQ(sampling_math::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(sampling_math::mass(3.5f, 3.5f, 1.0f), sampling_math::kMassOne);
  for (float x = -29.99f; x < 0.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(sampling_math::exp_nonpositive(x), want, 3e-7 * want) << x;
  }
  EXPECT_EQ(sampling_math::exp_nonpositive(-31.0f), 0.0f);
  EXPECT_EQ(sampling_math::exp_nonpositive(-INFINITY), 0.0f);
}

TEST(Sampling, GreedyTakesTheArgmaxTiesToTheLowestId) {
  Row row{{0.5f, 2.0f, -1.0f, 2.0f, 1.9f}, with(0.0f)};
  EXPECT_EQ(sample(row), 1);
  Row negative{{-3.0f, -1.0f, -1.0f}, with(0.0f)};
  EXPECT_EQ(sample(negative), 1);
  Row masked{{-INFINITY, -INFINITY, 0.0f}, with(0.0f)};
  EXPECT_EQ(sample(masked), 2);
  // Sampled rows with top_k = 1 are greedy whatever the seed.
  Row k1{{0.5f, 2.0f, -1.0f, 2.0f}, with(1.0f, 1)};
  EXPECT_EQ(draws(k1, 50), (std::map<int32_t, int>{{1, 50}}));
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOncePerSeenToken) {
  Row row{{2.0f, -1.0f, 3.0f, 1.0f}, with(0.0f), {2, 2, 1, 2}, /*prompt_len=*/2};
  row.params.repetition_penalty = 2.0f;
  EXPECT_EQ(sample(row), 0);  // 3 / 2 = 1.5 < 2.0 (token 0, unseen)
  EXPECT_EQ(row.logits, (std::vector<float>{2.0f, -2.0f, 1.5f, 1.0f}));
  Row picked{{2.0f, -1.0f, 3.0f, 1.0f}, with(0.0f), {2}, 1};
  picked.params.repetition_penalty = 1.2f;
  EXPECT_EQ(sample(picked), 2);  // 3 / 1.2 = 2.5 still the largest
  EXPECT_EQ(picked.logits[2], 3.0f / 1.2f);
}

TEST(Sampling, PresenceAndFrequencyCountOnlyGeneratedIds) {
  // Token 0 is in the prompt only: untouched. Token 1 generated twice, token 3 once.
  Row row{{1.0f, 1.0f, 1.0f, 1.0f}, with(0.0f), {0, 0, 1, 3, 1}, /*prompt_len=*/2};
  row.params.presence_penalty = 0.5f;
  row.params.frequency_penalty = 0.25f;
  sample(row);
  EXPECT_EQ(row.logits, (std::vector<float>{1.0f, 1.0f - (0.5f + 0.25f * 2), 1.0f, 1.0f - (0.5f + 0.25f)}));
  // Negative penalties raise; ids outside the vocabulary are ignored.
  Row up{{1.0f, 1.0f, 1.0f}, with(0.0f), {2, 99, -1}, 0};
  up.params.presence_penalty = -1.0f;
  EXPECT_EQ(sample(up), 2);
  // Combined with repetition: repetition first, then presence.
  Row both{{4.0f, 0.0f}, with(0.0f), {0}, 0};
  both.params.repetition_penalty = 2.0f;
  both.params.presence_penalty = 1.0f;
  sample(both);
  EXPECT_EQ(both.logits[0], 1.0f);
}

TEST(Sampling, TopKKeepsTheKHighestTiesToTheLowerIds) {
  Row row{{1.0f, 3.0f, 2.0f, 2.0f, 2.0f, 0.0f}, with(1.0f, 3)};
  // Kept: 1 (3.0), then the two lowest ids among the tied 2.0s: 2 and 3.
  std::map<int32_t, int> seen = draws(row, 400);
  EXPECT_EQ(seen.count(4), 0u);
  EXPECT_EQ(seen.count(0), 0u);
  EXPECT_EQ(seen.count(5), 0u);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_GT(seen[3], 0);
}

TEST(Sampling, TopPKeepsTheShortestPrefixReachingP) {
  const std::vector<float> l = log_probs({0.2, 0.5, 0.3});
  auto kept = [&](float top_p) {
    Row row{l, with(1.0f, 0, top_p)};
    std::set<int32_t> ids;
    for (const auto& [id, n] : draws(row, 300)) ids.insert(id);
    return ids;
  };
  EXPECT_EQ(kept(0.45f), (std::set<int32_t>{1}));
  EXPECT_EQ(kept(0.75f), (std::set<int32_t>{1, 2}));
  EXPECT_EQ(kept(0.85f), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(1e-6f), (std::set<int32_t>{1}));  // at least one token
  // top_p after top_k: of the top 2 (0.5, 0.3 -> 0.625, 0.375), 0.6 needs only the first.
  Row both{l, with(1.0f, 2, 0.6f)};
  EXPECT_EQ(draws(both, 100), (std::map<int32_t, int>{{1, 100}}));
}

TEST(Sampling, MinPKeepsTokensWithinAFactorOfTheTop) {
  const std::vector<float> l = log_probs({0.5, 0.3, 0.2, 0.1, 0.01});
  Row row{l, with(1.0f, 0, 1.0f, 0.5f)};  // p >= 0.25
  std::map<int32_t, int> seen = draws(row, 300);
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  Row combo{l, with(1.0f, 4, 0.95f, 0.3f)};  // top-4, then min-p p >= 0.15 of the top
  seen = draws(combo, 300);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen.count(3), 0u);
}

TEST(Sampling, SameSeedAndStepSameTokenAndStepsVary) {
  std::vector<float> l(1000);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : l) x = normal(rng);
  Row a{l, with(1.0f)};
  a.params.seed = 0x123456789abcdefull;
  a.params.step = 41;
  Row b = a;
  EXPECT_EQ(sample(a), sample(b));
  std::set<int32_t> over_steps;
  for (const auto& [id, n] : draws(a, 100, a.params.seed)) over_steps.insert(id);
  EXPECT_GT(over_steps.size(), 20u);
}

TEST(Sampling, RawLogprobsAndTopNIgnorePenaltiesAndTemperature) {
  Row row{{1.0f, 3.0f, 3.0f, -2.0f, 0.5f}, with(0.0f), {1}, 0};
  row.params.repetition_penalty = 10.0f;  // token 1 drops to 0.3: greedy picks 2
  float logprob = 0;
  std::vector<int32_t> ids;
  std::vector<float> lps;
  const int32_t id = sample(row, &logprob, 7, &ids, &lps);
  EXPECT_EQ(id, 2);
  double z = 0;
  for (float x : {1.0f, 3.0f, 3.0f, -2.0f, 0.5f}) z += std::exp(static_cast<double>(x));
  const double log_z = std::log(z);
  EXPECT_NEAR(logprob, 3.0 - log_z, 1e-6);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0, 4, 3, -1, -1}));  // ties to the lower id; padded past vocab
  EXPECT_NEAR(lps[0], 3.0 - log_z, 1e-6);
  EXPECT_NEAR(lps[4], -2.0 - log_z, 1e-6);
  EXPECT_EQ(lps[5], -INFINITY);
  // The chosen token's logprob is the raw one even when the penalty changed its logit.
  Row penalised{{1.0f, 3.0f}, with(0.0f), {1}, 0};
  penalised.params.repetition_penalty = 1.5f;  // 3 -> 2: still the argmax
  EXPECT_EQ(sample(penalised, &logprob), 1);
  EXPECT_NEAR(logprob, 3.0 - std::log(std::exp(1.0) + std::exp(3.0)), 1e-6);
}

// Chi-square: over N draws (seed fixed, steps 0..N-1), the frequencies of the kept tokens against the kept
// renormalised softmax of logits / T computed here in double. The kept sets are chosen away from any boundary
// so the double rules and the twin's integer ones agree on them. With df = kept - 1, the statistic has mean df
// and standard deviation sqrt(2 df); df + 6 sqrt(2 df) + 6 is beyond the 99.99th percentile for these df, so a
// correct sampler fails with probability < 1e-4, while a draw from the wrong distribution (say, ignoring the
// temperature) exceeds it by far at N = 20000.
void expect_frequencies(const std::vector<float>& l, SamplingRowParams params, const std::vector<int32_t>& kept,
                        int n) {
  std::vector<double> p;
  double sum = 0;
  for (int32_t id : kept) {
    p.push_back(std::exp(static_cast<double>(l[id]) / params.temperature));
    sum += p.back();
  }
  Row row{l, params};
  const std::map<int32_t, int> counts = draws(row, n, 2024);
  double chi2 = 0;
  int in_kept = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    const double expected = n * p[i] / sum;
    const auto it = counts.find(kept[i]);
    const double observed = it == counts.end() ? 0 : it->second;
    in_kept += static_cast<int>(observed);
    chi2 += (observed - expected) * (observed - expected) / expected;
  }
  EXPECT_EQ(in_kept, n) << "a token outside the kept set was drawn";
  const double df = static_cast<double>(kept.size()) - 1;
  EXPECT_LT(chi2, df + 6 * std::sqrt(2 * df) + 6) << "df " << df;
}

TEST(Sampling, DrawFrequenciesMatchTheKeptDistribution) {
  const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -3.0f, 0.7f};
  // Sorted: 3 (2.0), 5 (1.5), 0 (1.0), 7 (0.7), 1 (0.2), 4 (0.0), 2 (-0.5), 6 (-3.0).
  expect_frequencies(l, with(1.0f), {0, 1, 2, 3, 4, 5, 6, 7}, 20000);
  expect_frequencies(l, with(0.7f), {0, 1, 2, 3, 4, 5, 6, 7}, 20000);
  expect_frequencies(l, with(1.3f, 4), {3, 5, 0, 7}, 20000);
  // T = 1: p = 0.379, 0.230, 0.140, 0.103, ...: top_p 0.7 reaches at the 3rd (0.749), 0.6 at the 2nd (0.609).
  expect_frequencies(l, with(1.0f, 0, 0.7f), {3, 5, 0}, 20000);
  expect_frequencies(l, with(1.0f, 0, 0.6f), {3, 5}, 20000);
  expect_frequencies(l, with(1.0f, 0, 1.0f, 0.3f), {3, 5, 0}, 20000);  // e^-1 = 0.37 >= 0.3 > e^-1.3
  SamplingRowParams pen = with(1.0f, 6, 0.95f);
  pen.frequency_penalty = 1.0f;  // applied below through the seen ids
  Row row{l, pen, {3, 3}, 0};    // token 3: 2.0 - 2 = 0.0
  sample(row);
  EXPECT_EQ(row.logits[3], 0.0f);
}

TEST(Sampling, BrokenArgumentsAreRejected) {
  std::vector<float> l(4);
  SamplingRowParams p;
  int32_t id;
  SamplingArgs a;
  a.logits = l.data();
  a.rows = 1;
  a.vocab = a.vocab_ld = 4;
  a.params = &p;
  a.ids = &id;
  EXPECT_TRUE(sample_tokens(a).ok());
  SamplingArgs b = a;
  b.top_n = 21;
  EXPECT_FALSE(sample_tokens(b).ok());
  b = a;
  b.top_n = 2;  // no outputs
  EXPECT_FALSE(sample_tokens(b).ok());
  b = a;
  b.vocab_ld = 3;
  EXPECT_FALSE(sample_tokens(b).ok());
  b = a;
  b.ids = nullptr;
  EXPECT_FALSE(sample_tokens(b).ok());
  const int32_t offsets[2] = {0, 0};
  b = a;
  b.seen_offsets = offsets;  // without ids
  EXPECT_FALSE(sample_tokens(b).ok());
  b.seen_ids = offsets;
  EXPECT_TRUE(sample_tokens(b).ok());
  EXPECT_FALSE(validate_sampling_args(b, /*needs_scratch=*/true).ok());
}

}  // namespace
}  // namespace mmserve::kernels
