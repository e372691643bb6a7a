// Tests of sample_tokens_cuda() against its CPU twin sample_tokens() on the same logits and parameters: every
// parameter mix (temperature 0 / 0.7 / 1, top_k off / 1 / 50 / 2000, top_p off / 0.9 / 0.5, min_p off / 0.05,
// penalties off / repetition / presence+frequency) in 64-row launches, random logits with and without many exact
// ties (values on a 1/8 grid), vocab 152064 and odd sizes (1, 2, 7, 5003, padded rows), raw logprobs and top-20,
// the scratch left zeroed, and a captured CUDA graph replayed with new parameters written to device memory.
// Skipped, with the reason, where no GPU is visible.
//
// Token ids must be EQUAL: every decision (order keys, penalised logits, masses, thresholds, the Philox draw) is
// the same integer / f32 computation on both sides (sampling_math.h), so nothing is left to tolerance; the
// penalised logits are compared bit for bit too. Log-probabilities are values: the GPU sums exp in f32 in tree
// order (relative error of the sum <= ~log2(vocab) * 2^-24 ~ 1e-6, so log z within ~1e-6 of itself, plus the
// ulp of z ~ 2e-6 for |z| <= 30) against the twin's double: |gpu - cpu| <= 1e-4 (with a factor > 10 to spare).
#include "kernels/sampling/sampling_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/sampling/sampling.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;

struct Batch {
  int64_t rows = 0, vocab = 0, vocab_ld = 0, top_n = 0;
  std::vector<float> logits;
  std::vector<SamplingRowParams> params;
  std::vector<int32_t> offsets, seen, prompt_lens;
};

Batch random_batch(int64_t rows, int64_t vocab, int64_t pad, bool ties, uint32_t seed) {
  Batch b;
  b.rows = rows;
  b.vocab = vocab;
  b.vocab_ld = vocab + pad;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  b.logits.resize(rows * b.vocab_ld);
  for (float& x : b.logits) x = ties ? std::round(normal(rng) * 8.0f) / 8.0f : normal(rng);
  b.params.resize(rows);
  b.offsets.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int n = static_cast<int>(rng() % 300);
    for (int j = 0; j < n; ++j) b.seen.push_back(static_cast<int32_t>(rng() % (vocab + 3)) - 1);  // some invalid
    b.offsets.push_back(static_cast<int32_t>(b.seen.size()));
    b.prompt_lens.push_back(n == 0 ? 0 : static_cast<int32_t>(rng() % n));
    b.params[r].seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    b.params[r].step = rng() % 5000;
  }
  return b;
}

struct Result {
  std::vector<int32_t> ids, top_ids;
  std::vector<float> logprobs, top_logprobs, logits;
};

Result run_twin(Batch b) {
  Result out;
  out.ids.resize(b.rows);
  out.logprobs.resize(b.rows);
  out.top_ids.resize(b.rows * b.top_n);
  out.top_logprobs.resize(b.rows * b.top_n);
  SamplingArgs a;
  a.logits = b.logits.data();
  a.rows = b.rows;
  a.vocab = b.vocab;
  a.vocab_ld = b.vocab_ld;
  a.params = b.params.data();
  a.seen_offsets = b.offsets.data();
  a.seen_ids = b.seen.data();
  a.prompt_lens = b.prompt_lens.data();
  a.ids = out.ids.data();
  a.logprobs = out.logprobs.data();
  a.top_n = b.top_n;
  a.top_ids = out.top_ids.data();
  a.top_logprobs = out.top_logprobs.data();
  EXPECT_TRUE(sample_tokens(a).ok());
  out.logits = b.logits;
  return out;
}

// Device copies of a batch and the call's arguments over them.
struct DeviceBatch {
  explicit DeviceBatch(const Batch& b)
      : logits(b.logits), params(b.params), offsets(b.offsets), seen(b.seen.empty() ? std::vector<int32_t>{0} : b.seen),
        prompt_lens(b.prompt_lens), scratch(std::vector<uint64_t>(b.rows * b.vocab, 0)), ids(b.rows),
        logprobs(b.rows), top_ids(std::max<int64_t>(1, b.rows * b.top_n)),
        top_logprobs(std::max<int64_t>(1, b.rows * b.top_n)) {
    args.logits = logits.get();
    args.rows = b.rows;
    args.vocab = b.vocab;
    args.vocab_ld = b.vocab_ld;
    args.params = params.get();
    args.seen_offsets = offsets.get();
    args.seen_ids = seen.get();
    args.prompt_lens = prompt_lens.get();
    args.scratch = scratch.get();
    args.ids = ids.get();
    args.logprobs = logprobs.get();
    args.top_n = b.top_n;
    args.top_ids = top_ids.get();
    args.top_logprobs = top_logprobs.get();
  }
  Result download() const {
    return {ids.download(), top_ids.download(), logprobs.download(), top_logprobs.download(), logits.download()};
  }
  DeviceVector<float> logits;
  DeviceVector<SamplingRowParams> params;
  DeviceVector<int32_t> offsets, seen, prompt_lens;
  DeviceVector<uint64_t> scratch;
  DeviceVector<int32_t> ids;
  DeviceVector<float> logprobs;
  DeviceVector<int32_t> top_ids;
  DeviceVector<float> top_logprobs;
  SamplingArgs args;
};

void expect_same(const Batch& b, const Result& gpu, const Result& cpu, const std::string& what) {
  int bad = 0;
  for (int64_t r = 0; r < b.rows && bad < 8; ++r) {
    const SamplingRowParams& p = b.params[r];
    if (gpu.ids[r] != cpu.ids[r]) {
      ++bad;
      ADD_FAILURE() << what << " row " << r << ": gpu " << gpu.ids[r] << " cpu " << cpu.ids[r] << " (T "
                    << p.temperature << " k " << p.top_k << " p " << p.top_p << " min_p " << p.min_p << " rep "
                    << p.repetition_penalty << " pres " << p.presence_penalty << ")";
    }
    if (!(std::fabs(gpu.logprobs[r] - cpu.logprobs[r]) <= 1e-4)) {
      ++bad;
      ADD_FAILURE() << what << " row " << r << " logprob gpu " << gpu.logprobs[r] << " cpu " << cpu.logprobs[r];
    }
    for (int64_t i = 0; i < b.top_n; ++i) {
      const int64_t at = r * b.top_n + i;
      if (gpu.top_ids[at] != cpu.top_ids[at] ||
          !(std::fabs(gpu.top_logprobs[at] - cpu.top_logprobs[at]) <= 1e-4 ||
            gpu.top_logprobs[at] == cpu.top_logprobs[at])) {
        ++bad;
        ADD_FAILURE() << what << " row " << r << " top " << i << ": gpu " << gpu.top_ids[at] << "/"
                      << gpu.top_logprobs[at] << " cpu " << cpu.top_ids[at] << "/" << cpu.top_logprobs[at];
        break;
      }
    }
  }
  for (int64_t i = 0; i < b.rows * b.vocab_ld && bad < 8; ++i) {
    if (std::memcmp(&gpu.logits[i], &cpu.logits[i], 4) != 0) {
      ++bad;
      ADD_FAILURE() << what << " penalised logit " << i << ": gpu " << gpu.logits[i] << " cpu " << cpu.logits[i];
    }
  }
}

void check(const Batch& b, const std::string& what) {
  SCOPED_TRACE(what);
  const Result cpu = run_twin(b);
  DeviceBatch d(b);
  const Status status = sample_tokens_cuda(d.args, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  expect_same(b, d.download(), cpu, what);
  for (uint64_t w : d.scratch.download()) ASSERT_EQ(w, 0u) << "scratch not restored";
}

// Every parameter mix, in rows of `vocab`, 64 rows a launch.
std::vector<SamplingRowParams> every_mix() {
  std::vector<SamplingRowParams> mixes;
  for (float t : {0.0f, 0.7f, 1.0f}) {
    for (int32_t k : {0, 1, 50, 2000}) {
      for (float p : {1.0f, 0.9f, 0.5f}) {
        for (float min_p : {0.0f, 0.05f}) {
          for (int pen = 0; pen < 3; ++pen) {
            SamplingRowParams s;
            s.temperature = t;
            s.top_k = k;
            s.top_p = p;
            s.min_p = min_p;
            if (pen == 1) s.repetition_penalty = 1.3f;
            if (pen == 2) {
              s.presence_penalty = 0.5f;
              s.frequency_penalty = 0.3f;
            }
            mixes.push_back(s);
          }
        }
      }
    }
  }
  return mixes;
}

void check_mixes(int64_t vocab, int64_t pad, bool ties, int64_t top_n, uint32_t seed, size_t stride = 1) {
  const std::vector<SamplingRowParams> mixes = every_mix();
  std::vector<SamplingRowParams> chosen;
  for (size_t i = 0; i < mixes.size(); i += stride) chosen.push_back(mixes[i]);
  for (size_t start = 0; start < chosen.size(); start += 64) {
    const int64_t rows = static_cast<int64_t>(std::min<size_t>(64, chosen.size() - start));
    Batch b = random_batch(rows, vocab, pad, ties, seed++);
    b.top_n = top_n;
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t s = b.params[r].seed, step = b.params[r].step;
      b.params[r] = chosen[start + r];
      b.params[r].seed = s;
      b.params[r].step = step;
    }
    check(b, "vocab " + std::to_string(vocab) + (ties ? " ties" : "") + " mixes from " + std::to_string(start));
  }
}

TEST(SamplingCudaTest, EveryParameterMixMatchesTheTwin) {
  MMSERVE_REQUIRE_GPU();
  check_mixes(5003, 5, false, 5, 1);
  check_mixes(5003, 0, true, 20, 100);
}

TEST(SamplingCudaTest, QwenVocabularyAndLlamaVocabulary) {
  MMSERVE_REQUIRE_GPU();
  check_mixes(152064, 0, false, 20, 200, 3);
  check_mixes(128256, 16, true, 3, 300, 5);
}

TEST(SamplingCudaTest, TinyAndOddVocabularies) {
  MMSERVE_REQUIRE_GPU();
  for (int64_t vocab : {1, 2, 7, 33, 1025}) check_mixes(vocab, 1, vocab > 2, vocab == 7 ? 20 : 2, 400 + vocab, 2);
}

// All tokens tied: top-k keeps the lowest ids; a top-p cut at the same threshold key must not widen that set
// (the bug this guards against: the top-p cut took every tied token, top-k's id cut forgotten).
TEST(SamplingCudaTest, TopPCutInsideTopKTies) {
  MMSERVE_REQUIRE_GPU();
  Batch b = random_batch(4, 3001, 0, false, 700);
  std::fill(b.logits.begin(), b.logits.end(), 1.25f);
  const int32_t ks[4] = {1, 2, 7, 3000};
  for (int64_t r = 0; r < 4; ++r) {
    b.params[r].temperature = 1.0f;
    b.params[r].top_k = ks[r];
    b.params[r].top_p = 0.5f;
  }
  const Result cpu = run_twin(b);
  EXPECT_EQ(cpu.ids[0], 0);
  EXPECT_LT(cpu.ids[1], 1);  // top-p 0.5 of two equal tokens: the first reaches it
  EXPECT_LT(cpu.ids[2], 4);
  check(b, "all tied");
}

TEST(SamplingCudaTest, GraphReplaysWithNewParametersInDeviceMemory) {
  MMSERVE_REQUIRE_GPU();
  Batch b = random_batch(17, 32000, 0, false, 500);
  b.top_n = 4;
  DeviceBatch d(b);
  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status status = sample_tokens_cuda(d.args, stream);
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(status.ok()) << status.to_string();
  cudaGraphExec_t exec;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  const std::vector<SamplingRowParams> mixes = every_mix();
  for (int replay = 0; replay < 4; ++replay) {
    for (int64_t r = 0; r < b.rows; ++r) {
      const uint64_t seed = b.params[r].seed;
      b.params[r] = mixes[(r * 13 + replay * 29) % mixes.size()];
      b.params[r].seed = seed;
      b.params[r].step = static_cast<uint64_t>(replay);  // the engine advances the step per token
    }
    d.params.upload(b.params);
    d.logits.upload(b.logits);  // penalties overwrote the last replay's
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    expect_same(b, d.download(), run_twin(b), "replay " + std::to_string(replay));
  }
  for (uint64_t w : d.scratch.download()) ASSERT_EQ(w, 0u) << "scratch not restored";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(SamplingCudaTest, WithoutSeenTokensOrLogprobs) {
  MMSERVE_REQUIRE_GPU();
  Batch b = random_batch(8, 1000, 0, false, 600);
  for (auto& p : b.params) {
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.5f;  // no seen ids given: no effect
  }
  Result cpu;
  {
    Batch c = b;
    c.offsets.clear();
    std::vector<int32_t> ids(b.rows);
    SamplingArgs a;
    a.logits = c.logits.data();
    a.rows = c.rows;
    a.vocab = a.vocab_ld = c.vocab;
    a.params = c.params.data();
    a.ids = ids.data();
    ASSERT_TRUE(sample_tokens(a).ok());
    cpu.ids = ids;
  }
  DeviceBatch d(b);
  d.args.seen_offsets = nullptr;
  d.args.scratch = nullptr;
  d.args.logprobs = nullptr;
  ASSERT_TRUE(sample_tokens_cuda(d.args, nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(d.ids.download(), cpu.ids);
  SamplingArgs bad = d.args;
  bad.seen_offsets = d.offsets.get();  // seen tokens without scratch
  EXPECT_FALSE(sample_tokens_cuda(bad, nullptr).ok());
}

}  // namespace
}  // namespace mmserve::kernels
