// TokenSampler (see token_sampler.h).
#include "engine/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

namespace mmserve::engine {

Status validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return invalid_argument("temperature must be a number >= 0 (0 is greedy), got " + std::to_string(p.temperature));
  }
  if (p.top_k < -1) return invalid_argument("top_k must be -1, 0 (off) or positive, got " + std::to_string(p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  }
  if (!(p.min_p >= 0 && p.min_p <= 1)) {
    return invalid_argument("min_p must be in [0, 1], got " + std::to_string(p.min_p));
  }
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) {
    return invalid_argument("repetition_penalty must be > 0, got " + std::to_string(p.repetition_penalty));
  }
  for (auto [name, v] : {std::pair{"presence_penalty", p.presence_penalty}, {"frequency_penalty", p.frequency_penalty}}) {
    if (!(v >= -2 && v <= 2)) return invalid_argument(std::string(name) + " must be in [-2, 2], got " + std::to_string(v));
  }
  return ok_status();
}

TokenSampler::TokenSampler(const SamplingParams& p) : p_(p), rng_(p.seed ? *p.seed : std::random_device{}()) {}

int32_t TokenSampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> generated) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  MMSERVE_CHECK(vocab > 0, "sample: empty logits");
  auto valid = [&](int32_t id) { return id >= 0 && id < vocab; };
  if (p_.repetition_penalty != 1.0) {
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (std::span<const int32_t> ids : {prompt, generated}) {
      for (int32_t id : ids) {
        if (valid(id)) seen[id] = true;
      }
    }
    const float penalty = static_cast<float>(p_.repetition_penalty);
    for (int64_t v = 0; v < vocab; ++v) {
      if (seen[v]) logits[v] = logits[v] > 0 ? logits[v] / penalty : logits[v] * penalty;
    }
  }
  if (p_.presence_penalty != 0.0 || p_.frequency_penalty != 0.0) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : generated) {
      if (valid(id)) ++counts[id];
    }
    for (const auto& [id, count] : counts) {
      logits[id] -= static_cast<float>(p_.presence_penalty + p_.frequency_penalty * static_cast<double>(count));
    }
  }
  if (p_.temperature == 0.0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit, highest first (ties: lower id first); top-k cuts the list.
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  const int64_t k = p_.top_k > 0 ? std::min(p_.top_k, vocab) : vocab;
  auto higher = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < vocab) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), higher);
    order_.resize(static_cast<size_t>(k));
  } else {
    std::sort(order_.begin(), order_.end(), higher);
  }
  // Softmax of logits / temperature over the candidates, in double.
  probs_.resize(order_.size());
  const double inv_t = 1.0 / p_.temperature, top = static_cast<double>(logits[order_[0]]) * inv_t;
  double sum = 0;
  for (size_t i = 0; i < order_.size(); ++i) sum += probs_[i] = std::exp(static_cast<double>(logits[order_[i]]) * inv_t - top);
  size_t keep = order_.size();
  if (p_.top_p < 1.0) {
    double mass = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      mass += probs_[i] / sum;
      if (mass >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.0) {
    size_t i = 1;  // probs_[0] is the largest
    while (i < keep && probs_[i] >= p_.min_p * probs_[0]) ++i;
    keep = i;
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs_[i];
  std::uniform_real_distribution<double> uniform(0.0, kept);
  const double u = uniform(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace mmserve::engine

namespace mmserve::engine {

TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int64_t top) {
  // log-softmax in double: max-shifted log-sum-exp over the whole row.
  double max = -std::numeric_limits<double>::infinity();
  for (float x : logits) max = std::max(max, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob out;
  out.id = id;
  out.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_z);
  const int64_t n = std::min<int64_t>(top, static_cast<int64_t>(logits.size()));
  if (n > 0) {
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < n; ++i) {
      out.top.emplace_back(order[i], static_cast<float>(static_cast<double>(logits[order[i]]) - log_z));
    }
  }
  return out;
}

}  // namespace mmserve::engine
