// The CPU twin of sample_tokens_cuda (see sampling.h): the rules written plainly, a full sort for the order, so
// it doubles as their reference. Compiled with -ffp-contract=off (CMakeLists.txt): the f32 steps of
// sampling_math.h must round exactly as the GPU's. The log-probabilities (values, not decisions) are in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/sampling/sampling.h"
#include "kernels/sampling/sampling_math.h"

namespace mmserve::kernels {

namespace sm = sampling_math;

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

Status validate_sampling_args(const SamplingArgs& a, bool needs_scratch) {
  if (a.rows < 0 || a.vocab <= 0 || a.vocab > kSamplingVocabMax || a.vocab_ld < a.vocab) {
    return invalid_argument("sample_tokens: need rows >= 0, 0 < vocab <= 2^30, vocab_ld >= vocab");
  }
  if (a.top_n < 0 || a.top_n > kSamplingTopNMax) return invalid_argument("sample_tokens: top_n must be in [0, 20]");
  if (a.rows == 0) return ok_status();
  if (a.logits == nullptr || a.params == nullptr || a.ids == nullptr) {
    return invalid_argument("sample_tokens: null logits, params or ids");
  }
  if (a.top_n > 0 && (a.top_ids == nullptr || a.top_logprobs == nullptr)) {
    return invalid_argument("sample_tokens: top_n > 0 needs top_ids and top_logprobs");
  }
  if (a.seen_offsets != nullptr && a.seen_ids == nullptr) {
    return invalid_argument("sample_tokens: seen_offsets without seen_ids");
  }
  if (needs_scratch && a.seen_offsets != nullptr && a.scratch == nullptr) {
    return invalid_argument("sample_tokens: seen tokens need the zeroed scratch [rows, vocab]");
  }
  return ok_status();
}

namespace {

// The row's raw log-softmax normaliser, and its top n (id, logprob), highest first, ties to the lower id.
double raw_log_z(const float* x, int64_t vocab) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < vocab; ++v) max = std::max(max, static_cast<double>(x[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(x[v]) - max);
  return max + std::log(sum);
}

int32_t sample_row(float* l, int64_t vocab, const SamplingRowParams& p, const int32_t* seen, int64_t seen_count,
                   int64_t prompt_len) {
  if (seen != nullptr && sm::penalties_on(p)) {
    std::vector<uint32_t> generated(static_cast<size_t>(vocab), 0);
    std::vector<bool> listed(static_cast<size_t>(vocab), false);
    for (int64_t j = 0; j < seen_count; ++j) {
      const int32_t id = seen[j];
      if (id < 0 || id >= vocab) continue;
      listed[id] = true;
      if (j >= prompt_len) ++generated[id];
    }
    for (int64_t v = 0; v < vocab; ++v) {
      if (listed[v]) l[v] = sm::penalize(l[v], generated[v], p);
    }
  }
  // The largest key, ties to the lowest id: greedy's answer and the top of the order.
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (sm::order_key(l[v]) > sm::order_key(l[best])) best = v;
  }
  if (sm::greedy(p)) return static_cast<int32_t>(best);

  const float s_max = sm::div(l[best], p.temperature);
  std::vector<uint64_t> q(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) q[v] = sm::mass(l[v], s_max, p.temperature);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const uint32_t ka = sm::order_key(l[a]), kb = sm::order_key(l[b]);
    return ka > kb || (ka == kb && a < b);
  });
  int64_t n = sm::top_k_on(p, vocab) ? p.top_k : vocab;
  if (sm::top_p_on(p)) {
    uint64_t total = 0;
    for (int64_t i = 0; i < n; ++i) total += q[order[i]];
    const uint64_t target = sm::top_p_target(p.top_p, total);
    uint64_t cum = 0;
    for (int64_t i = 0; i < n; ++i) {
      cum += q[order[i]];
      if (cum >= target) {
        n = i + 1;
        break;
      }
    }
  }
  const uint64_t floor = sm::min_p_floor(p.min_p);
  std::vector<bool> kept(static_cast<size_t>(vocab), false);
  uint64_t kept_mass = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (q[order[i]] >= floor) {
      kept[order[i]] = true;
      kept_mass += q[order[i]];
    }
  }
  const std::array<uint32_t, 4> r = philox4x32_10(
      {static_cast<uint32_t>(p.step), static_cast<uint32_t>(p.step >> 32), 0, 0},
      {static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32)});
  const uint64_t target = sm::draw_target(sm::draw_bits(r[0], r[1]), kept_mass);
  uint64_t cum = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (!kept[v]) continue;
    cum += q[v];
    if (cum > target) return static_cast<int32_t>(v);
  }
  return static_cast<int32_t>(best);  // unreachable: kept_mass >= 2^32 > target
}

}  // namespace

Status sample_tokens(const SamplingArgs& a) {
  RETURN_IF_ERROR(validate_sampling_args(a, /*needs_scratch=*/false));
  for (int64_t r = 0; r < a.rows; ++r) {
    float* l = a.logits + r * a.vocab_ld;
    const bool want_logprobs = a.logprobs != nullptr || a.top_n > 0;
    std::vector<float> raw;
    double log_z = 0;
    if (want_logprobs) {
      raw.assign(l, l + a.vocab);
      log_z = raw_log_z(l, a.vocab);
      if (a.top_n > 0) {
        std::vector<int32_t> order(static_cast<size_t>(a.vocab));
        std::iota(order.begin(), order.end(), 0);
        const int64_t n = std::min(a.top_n, a.vocab);
        std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t x, int32_t y) {
          const uint32_t kx = sm::order_key(raw[x]), ky = sm::order_key(raw[y]);
          return kx > ky || (kx == ky && x < y);
        });
        for (int64_t i = 0; i < a.top_n; ++i) {
          const bool real = i < n;
          a.top_ids[r * a.top_n + i] = real ? order[i] : -1;
          a.top_logprobs[r * a.top_n + i] =
              real ? static_cast<float>(raw[order[i]] - log_z) : -std::numeric_limits<float>::infinity();
        }
      }
    }
    const int32_t* seen = nullptr;
    int64_t seen_count = 0, prompt_len = 0;
    if (a.seen_offsets != nullptr) {
      seen = a.seen_ids + a.seen_offsets[r];
      seen_count = a.seen_offsets[r + 1] - a.seen_offsets[r];
      prompt_len = a.prompt_lens != nullptr ? a.prompt_lens[r] : 0;
    }
    const int32_t id = sample_row(l, a.vocab, a.params[r], seen, seen_count, prompt_len);
    a.ids[r] = id;
    if (a.logprobs != nullptr) a.logprobs[r] = static_cast<float>(raw[id] - log_z);
  }
  return ok_status();
}

}  // namespace mmserve::kernels
