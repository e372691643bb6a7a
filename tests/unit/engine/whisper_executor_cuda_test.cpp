// WhisperExecutor on the GPU (WhisperCudaModel behind the same decoding code as the CPU) against the HF goldens of
// tests/fixtures/whisper: in f32 the token ids must equal HF's for greedy with suppression, beam search and the
// 33 s long-form transcription (segment tokens and times); in f16, the executor's default on cuda, a batch of
// requests must equal each request alone, and the greedy ids must agree with HF's on >= 90% of the positions
// before the first disagreement is allowed to derail the rest (the per-step agreement of teacher-forced decoding,
// >= 99%, is tests/unit/models/whisper_cuda_test.cpp's). Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/cuda/cuda_status.h"
#include "engine/whisper_executor.h"
#include "frontends/audio/audio.h"
#include "whisper_test_util.h"

namespace mmserve::engine {
namespace {

namespace fs = std::filesystem;
using namespace mmserve::engine::testing;  // NOLINT: the shared fixture helpers

#define REQUIRE_GPU()                                                                          \
  do {                                                                                         \
    std::string reason;                                                                        \
    if (!::mmserve::cuda_device_available(&reason)) GTEST_SKIP() << "GPU test skipped: " << reason; \
  } while (0)

std::unique_ptr<WhisperExecutor> load(const std::string& name, DType dtype) {
  ExecutorOptions options;
  options.device = Device::cuda(0);
  options.dtype = dtype;
  options.batch_size_max = 8;
  auto executor = WhisperExecutor::create(model_dir(name), options);
  EXPECT_TRUE(executor.ok()) << executor.status().to_string();
  return executor.ok() ? std::move(*executor) : nullptr;
}


class WhisperExecutorCuda : public ::testing::TestWithParam<const char*> {};

TEST_P(WhisperExecutorCuda, F32MatchesHfGoldens) {
  REQUIRE_GPU();
  auto ex = load(GetParam(), DType::kF32);
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->device(), Device::cuda(0));
  const nlohmann::json g = golden(GetParam());

  TranscribeOptions greedy = golden_options();
  greedy.timestamps = false;
  auto t = ex->transcribe(jfk(), greedy);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->segments.size(), 1u);
  EXPECT_EQ(t->segments[0].tokens, g["generate"]["greedy"]["tokens"].get<std::vector<int32_t>>());

  TranscribeOptions beam = greedy;
  beam.beam_size = 4;
  auto b = ex->transcribe(jfk(), beam);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(b->segments.size(), 1u);
  EXPECT_EQ(b->segments[0].tokens, g["generate"]["beam4"]["tokens"].get<std::vector<int32_t>>());

  std::vector<float> audio;
  for (int i = 0; i < 3; ++i) audio.insert(audio.end(), jfk().begin(), jfk().end());
  auto l = ex->transcribe(audio, golden_options());
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  const nlohmann::json& expected = g["generate"]["longform"]["segments"];
  ASSERT_EQ(l->segments.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("segment " + std::to_string(i));
    EXPECT_EQ(l->segments[i].tokens, expected[i]["tokens"].get<std::vector<int32_t>>());
    EXPECT_NEAR(l->segments[i].start, expected[i]["start"].get<double>(), 1e-9);
    EXPECT_NEAR(l->segments[i].end, expected[i]["end"].get<double>(), 1e-9);
  }
}

TEST_P(WhisperExecutorCuda, F16BatchEqualsAloneAndTracksHf) {
  REQUIRE_GPU();
  auto ex = load(GetParam(), DType::kF16);
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->dtype(), DType::kF16);
  std::vector<float> longer;
  for (int i = 0; i < 3; ++i) longer.insert(longer.end(), jfk().begin(), jfk().end());
  std::vector<TranscribeOptions> options(3, golden_options());
  options[0].timestamps = false;
  options[1].beam_size = 3;
  const std::vector<const std::vector<float>*> audios = {&jfk(), &longer, &longer};
  auto batch = ex->transcribe_batch(audios, options);
  ASSERT_EQ(batch.size(), 3u);
  for (size_t i = 0; i < audios.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    auto alone = ex->transcribe(*audios[i], options[i]);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    ASSERT_TRUE(batch[i].ok()) << batch[i].status().to_string();
    ASSERT_EQ(batch[i]->segments.size(), alone->segments.size());
    for (size_t s = 0; s < alone->segments.size(); ++s) {
      EXPECT_EQ(batch[i]->segments[s].tokens, alone->segments[s].tokens);
    }
  }
  // Free-running greedy ids against HF's f32 decoding: a near-tie flipped in f16 changes everything after it,
  // so count agreement up to the first difference.
  const std::vector<int32_t> hf = golden(GetParam())["generate"]["greedy"]["tokens"].get<std::vector<int32_t>>();
  ASSERT_TRUE(batch[0].ok());
  const std::vector<int32_t>& ours = batch[0]->segments.at(0).tokens;
  size_t same = 0;
  while (same < hf.size() && same < ours.size() && hf[same] == ours[same]) ++same;
  std::cout << "  " << GetParam() << " f16 executor: first " << same << " of " << hf.size()
            << " greedy ids equal HF's\n";
  EXPECT_GE(same * 10, hf.size() * 9);
}

// Compressed cross K/V through the executor (mmserve.yaml `cross_kv`, `mmserve transcribe --cross-kv`): the
// model really stores them compressed (describe() says so) and greedy decoding stays close to the f16 path's
// (the per-step agreement and the memory saved are whisper_cuda_test's figures).
TEST_P(WhisperExecutorCuda, CompressedCrossKvTranscribes) {
  REQUIRE_GPU();
  auto reference = load(GetParam(), DType::kF16);
  ASSERT_TRUE(reference);
  TranscribeOptions o = golden_options();
  o.timestamps = false;
  auto expected = reference->transcribe(jfk(), o);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  for (const char* storage : {"int8", "fp8_e4m3"}) {
    SCOPED_TRACE(storage);
    ExecutorOptions options;
    options.device = Device::cuda(0);
    options.dtype = DType::kF16;
    WhisperOptions whisper;
    whisper.cross_kv = storage;
    auto ex = WhisperExecutor::create(model_dir(GetParam()), options, whisper);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    EXPECT_NE((*ex)->describe().find(std::string("cross K/V ") + storage), std::string::npos) << (*ex)->describe();
    auto t = (*ex)->transcribe(jfk(), o);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const std::vector<int32_t>& a = expected->segments.at(0).tokens;
    const std::vector<int32_t>& b = t->segments.at(0).tokens;
    size_t same = 0;
    while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
    std::cout << "  " << GetParam() << " cross K/V " << storage << ": first " << same << " of " << a.size()
              << " greedy ids equal the f16 path's\n";
    EXPECT_GE(same, 8u);  // FP8 flips a near-tie of the v3 fixture at step 9 (whisper_cuda_test's figures)
  }
  ExecutorOptions bad;
  bad.device = Device::cuda(0);
  WhisperOptions fp4;
  fp4.cross_kv = "fp4";
  EXPECT_EQ(WhisperExecutor::create(model_dir(GetParam()), bad, fp4).status().code(), StatusCode::kInvalidArgument);
}

// A GPU model holds a fixed number of decoder rows: max_batch_size, at least the default best_of 5 (here 1 -> 5).
TEST_P(WhisperExecutorCuda, RequestsNeedingMoreRowsThanTheModelHoldsWaitForThem) {
  REQUIRE_GPU();
  ExecutorOptions options;
  options.device = Device::cuda(0);
  options.dtype = DType::kF32;
  options.batch_size_max = 1;
  auto ex = WhisperExecutor::create(model_dir(GetParam()), options);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  expect_requests_wait_for_decoder_rows(**ex, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WhisperExecutorCuda,
                         ::testing::ValuesIn(kWhisperFixtures),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace mmserve::engine
