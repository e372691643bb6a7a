// Token sampling on the GPU (sampling_cuda.h): one 1024-thread block per row. Passes over the row, in order:
// raw log-sum-exp and the raw top-n (when asked), the penalties (sparse, over the seen ids, through the scratch
// words: low 30 bits the generated count, bit 30 "in the prompt", bit 31 "claimed", high 32 the raw logit's
// bits), the argmax, then for sampled rows: the top-k radix select (4 passes), the top-k mass and the top-p
// radix select over masses (5), the kept mass (1) and the draw (1, stops at the chosen chunk).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <curand_kernel.h>

#include <cstdint>
#include <limits>

#include "core/cuda/cuda_status.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/sampling/sampling_math.h"

namespace mmserve::kernels {
namespace {

namespace sm = sampling_math;
namespace cg = cooperative_groups;
using u64 = unsigned long long;
static_assert(sizeof(u64) == sizeof(uint64_t), "scratch words");

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kItems = 4;  // consecutive ids per thread in the id-order scans
constexpr u64 kCountMask = (1ull << 30) - 1, kPromptBit = 1ull << 30, kClaimBit = 1ull << 31;

struct Params {
  float* logits;
  int64_t vocab, vocab_ld;
  const SamplingRowParams* params;
  const int32_t* seen_offsets;
  const int32_t* seen_ids;
  const int32_t* prompt_lens;
  u64* scratch;
  int32_t* ids;
  float* logprobs;
  int top_n;
  int32_t* top_ids;
  float* top_logprobs;
  bool vec4;  // every row 16-byte aligned (vocab_ld % 4 == 0, aligned logits): float4 loads for the argmax
};

// Tokens in the cut: key > key_at, or key == key_at and id < id_end.
struct Cut {
  uint32_t key_at;
  int id_end;
};
__device__ __forceinline__ bool in_cut(uint32_t key, int id, Cut c) {
  return key > c.key_at || (key == c.key_at && id < c.id_end);
}

struct Shared {
  u64 hist[256];
  u64 warp[kWarps];
  u64 value, value2;
  uint32_t bin;
  int found;
  float f[kWarps];
  int top_count;
  uint32_t top_key[kSamplingTopNMax];
  int top_id[kSamplingTopNMax];
};

// Block-wide inclusive prefix sum; every thread gets its own and `total`. Ends with a barrier.
__device__ u64 block_scan(u64 v, u64* total, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const u64 n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) sh.warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    u64 t = sh.warp[lane];
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const u64 n = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += n;
    }
    sh.warp[lane] = t;
  }
  __syncthreads();
  if (warp > 0) v += sh.warp[warp - 1];
  *total = sh.warp[kWarps - 1];
  __syncthreads();
  return v;
}

template <bool kMax>
__device__ u64 block_reduce(u64 v, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const u64 n = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? (n > v ? n : v) : v + n;
  }
  if (threadIdx.x % 32 == 0) sh.warp[threadIdx.x / 32] = v;
  __syncthreads();
  u64 r = sh.warp[0];
  for (int w = 1; w < kWarps; ++w) r = kMax ? (sh.warp[w] > r ? sh.warp[w] : r) : r + sh.warp[w];
  __syncthreads();
  return r;
}

__device__ float block_reduce_float(float v, bool is_max, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float n = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, n) : v + n;
  }
  if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = v;
  __syncthreads();
  float r = sh.f[0];
  for (int w = 1; w < kWarps; ++w) r = is_max ? fmaxf(r, sh.f[w]) : r + sh.f[w];
  __syncthreads();
  return r;
}

// The first id (in id order) at which the inclusive prefix sum of weight(id) reaches target (>= 1); vocab - 1
// when it never does.
template <class Weight>
__device__ int first_reaching(int vocab, u64 target, Weight weight, Shared& sh) {
  u64 run = 0;
  for (int base = 0; base < vocab; base += kThreads * kItems) {
    const int first = base + static_cast<int>(threadIdx.x) * kItems;
    u64 w[kItems], own = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      w[i] = first + i < vocab ? weight(first + i) : 0;
      own += w[i];
    }
    u64 total;
    if (threadIdx.x == 0) sh.found = -1;
    const u64 incl = block_scan(own, &total, sh);  // its barriers order the reset before the writes below
    if (run + incl >= target && run + incl - own < target) {
      u64 c = run + incl - own;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        c += w[i];
        if (c >= target) {
          sh.found = first + i;
          break;
        }
      }
    }
    __syncthreads();
    const int found = sh.found;
    __syncthreads();
    if (found >= 0) return found;
    run += total;
  }
  return vocab - 1;
}

// The cut holding the first tokens of the order (key descending, id ascending) whose weight sum reaches `need`
// (kMass: weight = the mass, ties at the threshold share one mass; else weight = 1, so exactly `need` tokens).
// weight(id, key) is 0 for tokens outside the candidate set. Requires need <= the candidates' total weight.
template <bool kMass, class Weight>
__device__ Cut select_cut(const float* l, int vocab, u64 need, Weight weight, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  u64 above = 0, at_weight = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    if (threadIdx.x == 0) {
      sh.bin = 0;
      sh.value = above;
      sh.value2 = 0;
    }
    __syncthreads();
    // Whole warps run every trip (the same count for the block), so each warp can aggregate its lanes' weights
    // per bin before the shared atomic: most tokens share a few high digits, which would otherwise serialise.
    const cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    for (int base = 0; base < vocab; base += kThreads) {
      const int v = base + static_cast<int>(threadIdx.x);
      u64 w = 0;
      uint32_t bin = 256;  // no bin
      if (v < vocab) {
        const uint32_t key = sm::order_key(l[v]);
        if ((key & mask) == prefix) {
          w = weight(v, key);
          if (w != 0) bin = (key >> shift) & 255u;
        }
      }
      const cg::coalesced_group peers = cg::labeled_partition(warp, bin);
      const u64 sum = cg::reduce(peers, w, cg::plus<u64>());
      if (peers.thread_rank() == 0 && bin < 256) atomicAdd(&sh.hist[bin], sum);
    }
    __syncthreads();
    const u64 own = threadIdx.x < 256 ? sh.hist[255 - threadIdx.x] : 0;  // bins from the highest key down
    u64 total;
    const u64 incl = block_scan(own, &total, sh);
    if (threadIdx.x < 256 && own != 0 && above + incl >= need && above + incl - own < need) {
      sh.bin = 255 - threadIdx.x;
      sh.value = above + incl - own;
      sh.value2 = own;
    }
    __syncthreads();
    prefix |= sh.bin << shift;
    mask |= 255u << shift;
    above = sh.value;
    at_weight = sh.value2;
    __syncthreads();
  }
  const u64 rest = need - above;  // > 0: the ties at `prefix` still needed, by weight
  u64 one = 1;
  if constexpr (kMass) {
    one = weight(-1, prefix);  // every candidate at this key has the same mass
    if (one == 0) return {prefix, std::numeric_limits<int>::max()};
  }
  const u64 ties_needed = (rest + one - 1) / one, ties = at_weight / one;
  if (ties_needed >= ties) return {prefix, std::numeric_limits<int>::max()};
  const int last = first_reaching(
      vocab, ties_needed,
      [&](int v) -> u64 {
        const uint32_t key = sm::order_key(l[v]);
        return key == prefix && weight(v, key) != 0 ? 1 : 0;
      },
      sh);
  return {prefix, last + 1};
}

__global__ void __launch_bounds__(kThreads) sample_kernel(Params p) {
  __shared__ Shared sh;
  const int64_t row = blockIdx.x;
  const int vocab = static_cast<int>(p.vocab);
  float* l = p.logits + row * p.vocab_ld;
  const SamplingRowParams prm = p.params[row];
  const bool want_logprobs = p.logprobs != nullptr || p.top_n > 0;

  // Raw log-sum-exp (f32, online per thread) and the raw top-n.
  float log_z = 0.0f;
  if (want_logprobs) {
    float m = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      const float x = l[v];
      if (x == -INFINITY) continue;
      if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
      } else {
        s += expf(x - m);
      }
    }
    const float row_max = block_reduce_float(m, true, sh);
    const float scaled = m == -INFINITY ? 0.0f : s * expf(m - row_max);
    log_z = row_max + logf(block_reduce_float(scaled, false, sh));
    if (p.top_n > 0) {
      const int n = p.top_n < vocab ? p.top_n : vocab;
      const Cut cut = n < vocab ? select_cut<false>(l, vocab, static_cast<u64>(n),
                                                    [](int, uint32_t) -> u64 { return 1; }, sh)
                                : Cut{0, std::numeric_limits<int>::max()};
      if (threadIdx.x == 0) sh.top_count = 0;
      __syncthreads();
      for (int v = threadIdx.x; v < vocab; v += kThreads) {
        const uint32_t key = sm::order_key(l[v]);
        if (in_cut(key, v, cut)) {
          const int slot = atomicAdd(&sh.top_count, 1);
          if (slot < kSamplingTopNMax) {
            sh.top_key[slot] = key;
            sh.top_id[slot] = v;
          }
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int i = 1; i < n; ++i) {  // insertion sort: key descending, id ascending
          const uint32_t k = sh.top_key[i];
          const int id = sh.top_id[i];
          int j = i - 1;
          while (j >= 0 && (sh.top_key[j] < k || (sh.top_key[j] == k && sh.top_id[j] > id))) {
            sh.top_key[j + 1] = sh.top_key[j];
            sh.top_id[j + 1] = sh.top_id[j];
            --j;
          }
          sh.top_key[j + 1] = k;
          sh.top_id[j + 1] = id;
        }
        for (int i = 0; i < p.top_n; ++i) {
          p.top_ids[row * p.top_n + i] = i < n ? sh.top_id[i] : -1;
          p.top_logprobs[row * p.top_n + i] = i < n ? sm::key_value(sh.top_key[i]) - log_z : -INFINITY;
        }
      }
      __syncthreads();
    }
  }

  // Penalties, in place, each seen id once.
  const bool penalised = p.seen_offsets != nullptr && sm::penalties_on(prm);
  int seen_begin = 0, seen_end = 0;
  u64* scratch = p.scratch + row * p.vocab;
  if (penalised) {
    seen_begin = p.seen_offsets[row];
    seen_end = p.seen_offsets[row + 1];
    const int prompt_len = p.prompt_lens != nullptr ? p.prompt_lens[row] : 0;
    for (int j = seen_begin + threadIdx.x; j < seen_end; j += kThreads) {
      const int id = p.seen_ids[j];
      if (id < 0 || id >= vocab) continue;
      if (j - seen_begin < prompt_len) {
        atomicOr(&scratch[id], kPromptBit);
      } else {
        atomicAdd(&scratch[id], 1ull);
      }
    }
    __syncthreads();
    for (int j = seen_begin + threadIdx.x; j < seen_end; j += kThreads) {
      const int id = p.seen_ids[j];
      if (id < 0 || id >= vocab) continue;
      const u64 old = atomicOr(&scratch[id], kClaimBit);
      if ((old & kClaimBit) == 0) {
        const float raw = l[id];
        l[id] = sm::penalize(raw, static_cast<uint32_t>(old & kCountMask), prm);
        atomicOr(&scratch[id], static_cast<u64>(sm::bits_of(raw)) << 32);
      }
    }
    __syncthreads();
  }

  // The argmax (largest key, ties to the lowest id). 16-byte loads where the row allows: one block reads the whole
  // row (513 KB for Llama 3's vocabulary), and scalar loads made greedy sampling ~25 us a step on an H200.
  u64 best_packed = 0;
  auto consider = [&](int v, float x) {
    const u64 packed = (static_cast<u64>(sm::order_key(x)) << 32) | (0xffffffffu - static_cast<uint32_t>(v));
    best_packed = packed > best_packed ? packed : best_packed;
  };
  int scalar_from = 0;
  if (p.vec4) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    for (int q = threadIdx.x; q < vocab / 4; q += kThreads) {
      const float4 x = l4[q];
      consider(4 * q, x.x), consider(4 * q + 1, x.y), consider(4 * q + 2, x.z), consider(4 * q + 3, x.w);
    }
    scalar_from = vocab / 4 * 4;
  }
  for (int v = scalar_from + threadIdx.x; v < vocab; v += kThreads) consider(v, l[v]);
  best_packed = block_reduce<true>(best_packed, sh);
  const int best = static_cast<int>(0xffffffffu - static_cast<uint32_t>(best_packed));
  int chosen = best;

  if (!sm::greedy(prm)) {
    const float temperature = prm.temperature;
    const float s_max = sm::div(sm::key_value(static_cast<uint32_t>(best_packed >> 32)), temperature);
    Cut k_cut{0, std::numeric_limits<int>::max()};  // everything
    if (sm::top_k_on(prm, vocab)) {
      k_cut = select_cut<false>(l, vocab, static_cast<u64>(prm.top_k), [](int, uint32_t) -> u64 { return 1; }, sh);
    }
    Cut cut = k_cut;
    if (sm::top_p_on(prm)) {
      u64 k_mass = 0;
      for (int v = threadIdx.x; v < vocab; v += kThreads) {
        const float x = l[v];
        if (in_cut(sm::order_key(x), v, k_cut)) k_mass += sm::mass(x, s_max, temperature);
      }
      k_mass = block_reduce<false>(k_mass, sh);
      const u64 target = sm::top_p_target(prm.top_p, k_mass);
      cut = select_cut<true>(
          l, vocab, target,
          [&](int v, uint32_t key) -> u64 {
            if (v >= 0 && !in_cut(key, v, k_cut)) return 0;
            return sm::mass(sm::key_value(key), s_max, temperature);
          },
          sh);
    }
    const u64 floor = sm::min_p_floor(prm.min_p);
    auto kept_mass_of = [&](int v) -> u64 {
      const float x = l[v];
      const uint32_t key = sm::order_key(x);
      // Both cuts: the top-p cut may take every token tied at its threshold key, of which top-k kept only some.
      if (!in_cut(key, v, cut) || !in_cut(key, v, k_cut)) return 0;
      const u64 q = sm::mass(x, s_max, temperature);
      return q >= floor ? q : 0;
    };
    u64 kept = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) kept += kept_mass_of(v);
    kept = block_reduce<false>(kept, sh);
    const uint4 r = curand_Philox4x32_10(
        make_uint4(static_cast<uint32_t>(prm.step), static_cast<uint32_t>(prm.step >> 32), 0u, 0u),
        make_uint2(static_cast<uint32_t>(prm.seed), static_cast<uint32_t>(prm.seed >> 32)));
    const u64 target = sm::draw_target(sm::draw_bits(r.x, r.y), kept);
    chosen = first_reaching(vocab, target + 1, kept_mass_of, sh);
  }

  // The chosen id's raw logit (from the scratch if penalties overwrote it), then the scratch back to zero.
  if (penalised) {
    if (threadIdx.x == 0) sh.found = 0;
    __syncthreads();
    if (p.logprobs != nullptr) {
      for (int j = seen_begin + threadIdx.x; j < seen_end; j += kThreads) {
        if (p.seen_ids[j] == chosen) {
          sh.found = 1;
          sh.value = scratch[chosen];
        }
      }
    }
    __syncthreads();
    for (int j = seen_begin + threadIdx.x; j < seen_end; j += kThreads) {
      const int id = p.seen_ids[j];
      if (id >= 0 && id < vocab) scratch[id] = 0;
    }
  }
  if (threadIdx.x == 0) {
    p.ids[row] = chosen;
    if (p.logprobs != nullptr) {
      const float raw = penalised && sh.found ? sm::float_of(static_cast<uint32_t>(sh.value >> 32)) : l[chosen];
      p.logprobs[row] = raw - log_z;
    }
  }
}

}  // namespace

Status sample_tokens_cuda(const SamplingArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(validate_sampling_args(a, /*needs_scratch=*/true));
  if (a.rows == 0) return ok_status();
  if (a.rows > std::numeric_limits<int32_t>::max()) return invalid_argument("sample_tokens_cuda: too many rows");
  const bool vec4 = a.vocab_ld % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
  const Params p{a.logits,  a.vocab, a.vocab_ld,  a.params,        a.seen_offsets,
                 a.seen_ids, a.prompt_lens, reinterpret_cast<u64*>(a.scratch), a.ids, a.logprobs, static_cast<int>(a.top_n),
                 a.top_ids, a.top_logprobs, vec4};
  sample_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace mmserve::kernels
