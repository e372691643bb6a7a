// WhisperExecutor on the CPU against HF transformers 5.17's outputs (tests/fixtures/whisper/*/golden.json, made
// by tools/reference/make_whisper_fixtures.py) for both tiny random models: generate() greedy with the generation
// config's suppression, beam search (num_beams=4), long-form transcription of 33 s (its segments: times and
// token ids), detect_language; token ids exact. Also: a batch equals each request alone, bad options are
// kInvalidArgument, the output formats, the VAD hook.
#include "engine/whisper_executor.h"
#include "whisper_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frontends/audio/audio.h"
#include "frontends/text/whisper_languages.h"

namespace mmserve::engine {
namespace {

namespace fs = std::filesystem;
using namespace mmserve::engine::testing;  // NOLINT: the shared fixture helpers

const auto& kModels = kWhisperFixtures;

std::unique_ptr<WhisperExecutor> load(const std::string& name) {
  auto executor = WhisperExecutor::create(model_dir(name), ExecutorOptions{});
  EXPECT_TRUE(executor.ok()) << executor.status().to_string();
  return executor.ok() ? std::move(*executor) : nullptr;
}


std::vector<int32_t> ids(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

class WhisperGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(WhisperGolden, GreedyWithSuppressionMatchesHf) {
  auto ex = load(GetParam());
  ASSERT_TRUE(ex);
  TranscribeOptions o = golden_options();
  o.timestamps = false;
  auto t = ex->transcribe(jfk(), o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->segments.size(), 1u);
  EXPECT_EQ(t->segments[0].tokens, ids(golden(GetParam())["generate"]["greedy"]["tokens"]));
  EXPECT_EQ(t->language, "en");
  EXPECT_NEAR(t->duration, 11.0, 0.01);
}

TEST_P(WhisperGolden, BeamSearchMatchesHf) {
  auto ex = load(GetParam());
  ASSERT_TRUE(ex);
  TranscribeOptions o = golden_options();
  o.timestamps = false;
  o.beam_size = 4;
  auto t = ex->transcribe(jfk(), o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->segments.size(), 1u);
  const auto expected = ids(golden(GetParam())["generate"]["beam4"]["tokens"]);
  EXPECT_EQ(t->segments[0].tokens, expected);
  // The golden differs from greedy: the beam search is really exercised.
  EXPECT_NE(expected, ids(golden(GetParam())["generate"]["greedy"]["tokens"]));
}

// HF's single-call timestamp decoding (golden "timestamps") cut into segments as _retrieve_segment cuts it: the
// first window's segments are the golden's tokens up to its last timestamp pair.
TEST_P(WhisperGolden, TimestampSegmentsArePrefixOfHfTimestampDecoding) {
  auto ex = load(GetParam());
  ASSERT_TRUE(ex);
  TranscribeOptions o = golden_options();
  auto t = ex->transcribe(jfk(), o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const auto expected = ids(golden(GetParam())["generate"]["timestamps"]["tokens"]);
  std::vector<int32_t> first_window;
  for (const TranscriptSegment& s : t->segments) {
    if (s.seek != 0) break;
    first_window.insert(first_window.end(), s.tokens.begin(), s.tokens.end());
  }
  ASSERT_FALSE(first_window.empty());
  ASSERT_LE(first_window.size(), expected.size());
  EXPECT_EQ(first_window, std::vector<int32_t>(expected.begin(), expected.begin() + first_window.size()));
}

TEST_P(WhisperGolden, LongFormSegmentsMatchHf) {
  auto ex = load(GetParam());
  ASSERT_TRUE(ex);
  std::vector<float> audio;
  for (int i = 0; i < 3; ++i) audio.insert(audio.end(), jfk().begin(), jfk().end());
  const nlohmann::json longform = golden(GetParam())["generate"]["longform"];
  ASSERT_EQ(static_cast<int64_t>(audio.size()), longform["samples"].get<int64_t>());
  auto t = ex->transcribe(audio, golden_options());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const auto& expected = longform["segments"];
  ASSERT_EQ(t->segments.size(), expected.size());
  std::vector<int32_t> all;
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("segment " + std::to_string(i));
    EXPECT_EQ(t->segments[i].tokens, ids(expected[i]["tokens"]));
    EXPECT_NEAR(t->segments[i].start, expected[i]["start"].get<double>(), 1e-9);
    EXPECT_NEAR(t->segments[i].end, expected[i]["end"].get<double>(), 1e-9);
  }
}

TEST_P(WhisperGolden, DetectLanguageMatchesHf) {
  auto ex = load(GetParam());
  ASSERT_TRUE(ex);
  TranscribeOptions o = golden_options();
  o.language = "";
  o.max_new_tokens = 2;
  auto t = ex->transcribe(jfk(), o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const nlohmann::json g = golden(GetParam());
  const int32_t token = g["detect_language"][0].get<int32_t>();
  const int32_t first = g["special"]["<|en|>"].get<int32_t>();  // the first language token
  EXPECT_EQ(t->language, std::string(text::whisper_languages()[token - first].code));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WhisperGolden, ::testing::ValuesIn(kModels));

TEST(WhisperExecutor, BatchEqualsAlone) {
  auto ex = load(kModels[0]);
  ASSERT_TRUE(ex);
  std::vector<float> longer;
  for (int i = 0; i < 3; ++i) longer.insert(longer.end(), jfk().begin(), jfk().end());
  std::vector<float> tail(jfk().begin() + 16000 * 3, jfk().end());
  std::vector<TranscribeOptions> options(4, golden_options());
  options[1].beam_size = 3;
  options[2].timestamps = false;
  options[3].language = "";
  options[3].condition_on_previous_text = true;
  options[3].initial_prompt = "The president speaks.";
  const std::vector<const std::vector<float>*> audios = {&jfk(), &longer, &tail, &longer};
  auto batch = ex->transcribe_batch(audios, options);
  ASSERT_EQ(batch.size(), 4u);
  for (size_t i = 0; i < audios.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    auto alone = ex->transcribe(*audios[i], options[i]);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    ASSERT_TRUE(batch[i].ok()) << batch[i].status().to_string();
    EXPECT_EQ(batch[i]->text, alone->text);
    EXPECT_EQ(batch[i]->language, alone->language);
    ASSERT_EQ(batch[i]->segments.size(), alone->segments.size());
    for (size_t s = 0; s < alone->segments.size(); ++s) {
      EXPECT_EQ(batch[i]->segments[s].tokens, alone->segments[s].tokens);
      EXPECT_EQ(batch[i]->segments[s].start, alone->segments[s].start);
    }
  }
}

// decoder_rows bounds the CPU's rows as a GPU model's are bounded: the same admission (whisper_test_util.h).
TEST(WhisperExecutor, RequestsNeedingMoreRowsThanDecoderRowsWaitForThem) {
  for (const char* fixture : kModels) {
    SCOPED_TRACE(fixture);
    WhisperOptions whisper;
    whisper.decoder_rows = 5;
    auto ex = WhisperExecutor::create(model_dir(fixture), {}, whisper);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    expect_requests_wait_for_decoder_rows(**ex, fixture);
  }
  WhisperOptions too_few;
  too_few.decoder_rows = 4;  // a default request (best_of 5 on fallback) could never run
  auto refused = WhisperExecutor::create(model_dir(kModels[0]), {}, too_few);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("decoder_rows 4"), std::string::npos) << refused.status().to_string();
}

// Compressed cross-attention K/V is a CUDA feature: the CPU path refuses it by name instead of ignoring it.
TEST(WhisperExecutor, CompressedCrossKvNeedsCuda) {
  WhisperOptions whisper;
  whisper.cross_kv = "int8";
  auto executor = WhisperExecutor::create(model_dir(kModels[0]), {}, whisper);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(executor.status().message().find("cross_kv int8"), std::string::npos) << executor.status().message();
}

TEST(WhisperExecutor, BadOptionsAreInvalidArgument) {
  auto ex = load(kModels[0]);
  ASSERT_TRUE(ex);
  auto expect_invalid = [&](const std::vector<float>& audio, const TranscribeOptions& o, const char* what) {
    auto t = ex->transcribe(audio, o);
    ASSERT_FALSE(t.ok()) << what;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << what << ": " << t.status().to_string();
  };
  TranscribeOptions o = golden_options();
  o.beam_size = 0;
  expect_invalid(jfk(), o, "beam 0");
  o = golden_options();
  o.language = "klingon";
  expect_invalid(jfk(), o, "unknown language");
  o = golden_options();
  o.temperatures = {};
  expect_invalid(jfk(), o, "no temperatures");
  o.temperatures = {-0.5f};
  expect_invalid(jfk(), o, "negative temperature");
  o = golden_options();
  o.max_new_tokens = -1;
  expect_invalid(jfk(), o, "negative max_new_tokens");
  expect_invalid({}, golden_options(), "empty audio");
  std::vector<float> nan_audio(1600, 0.0f);
  nan_audio[7] = NAN;
  expect_invalid(nan_audio, golden_options(), "NaN sample");
  // A bad request in a batch fails alone.
  std::vector<TranscribeOptions> options(2, golden_options());
  options[0].beam_size = -3;
  options[1].timestamps = false;
  auto batch = ex->transcribe_batch({&jfk(), &jfk()}, options);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(batch[1].ok());
  EXPECT_EQ(batch[1]->segments[0].tokens, ids(golden(kModels[0])["generate"]["greedy"]["tokens"]));
}

TEST(WhisperExecutor, FallbackAndCallback) {
  auto ex = load(kModels[0]);
  ASSERT_TRUE(ex);
  // A random model's text is repetitive: the compression-ratio check rejects temperature 0 and the sampled
  // retries run (seeded: the same seed gives the same transcript).
  TranscribeOptions o = golden_options();
  o.temperatures = {0.0f, 0.6f};
  o.compression_ratio_threshold = 1.0f;
  o.best_of = 3;
  o.seed = 7;
  auto a = ex->transcribe(jfk(), o);
  auto b = ex->transcribe(jfk(), o);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok());
  ASSERT_FALSE(a->segments.empty());
  EXPECT_FLOAT_EQ(a->segments[0].temperature, 0.6f);
  EXPECT_EQ(a->text, b->text);
  // The callback sees every segment and can cancel.
  int seen = 0;
  auto all = ex->transcribe(jfk(), golden_options(), [&](const TranscriptSegment&) { return ++seen > 0; });
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(seen, static_cast<int>(all->segments.size()));
  auto cancelled = ex->transcribe(jfk(), golden_options(), [](const TranscriptSegment&) { return false; });
  EXPECT_EQ(cancelled.status().code(), StatusCode::kCancelled);
}

TEST(WhisperExecutor, VadSkipsSilence) {
  auto ex = load(kModels[0]);
  ASSERT_TRUE(ex);
  std::vector<float> audio(16000 * 3, 0.0f);  // 3 s of silence, then the speech
  audio.insert(audio.end(), jfk().begin(), jfk().end());
  TranscribeOptions o = golden_options();
  o.vad = true;
  auto t = ex->transcribe(audio, o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_GT(t->vad_skipped_seconds, 2.5);
  ASSERT_FALSE(t->segments.empty());
  // Times are in the original audio: nothing starts inside the leading silence.
  EXPECT_GE(t->segments[0].start, 2.5);
  auto silence = ex->transcribe(std::vector<float>(16000 * 2, 0.0f), o);
  ASSERT_TRUE(silence.ok());
  EXPECT_TRUE(silence->segments.empty());
  EXPECT_NEAR(silence->vad_skipped_seconds, 2.0, 1e-9);
}

TEST(TranscriptFormat, AllFormats) {
  Transcript t;
  t.text = " Hello there. General Kenobi.";
  t.language = "en";
  t.duration = 3725.5;
  TranscriptSegment a;
  a.start = 0.0;
  a.end = 1.5;
  a.text = " Hello there.";
  a.tokens = {1, 2};
  TranscriptSegment b = a;
  b.id = 1;
  b.start = 3723.25;
  b.end = 3725.5;
  b.text = " General Kenobi.";
  t.segments = {a, b};
  EXPECT_EQ(nlohmann::json::parse(format_transcript(t, TranscriptFormat::kJson, WhisperTask::kTranscribe))["text"],
            t.text);
  EXPECT_EQ(format_transcript(t, TranscriptFormat::kText, WhisperTask::kTranscribe), t.text + "\n");
  EXPECT_EQ(format_transcript(t, TranscriptFormat::kSrt, WhisperTask::kTranscribe),
            "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:02:03,250 --> 01:02:05,500\nGeneral Kenobi.\n\n");
  EXPECT_EQ(
      format_transcript(t, TranscriptFormat::kVtt, WhisperTask::kTranscribe),
      "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n01:02:03.250 --> 01:02:05.500\nGeneral Kenobi.\n\n");
  auto v = nlohmann::json::parse(format_transcript(t, TranscriptFormat::kVerboseJson, WhisperTask::kTranslate));
  EXPECT_EQ(v["task"], "translate");
  EXPECT_EQ(v["language"], "english");
  EXPECT_EQ(v["segments"].size(), 2u);
  for (const char* key : {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                          "compression_ratio", "no_speech_prob"}) {
    EXPECT_TRUE(v["segments"][1].contains(key)) << key;
  }
  EXPECT_EQ(parse_transcript_format("verbose_json").value(), TranscriptFormat::kVerboseJson);
  EXPECT_EQ(parse_transcript_format("xml").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(transcript_content_type(TranscriptFormat::kJson), "application/json");
}

}  // namespace
}  // namespace mmserve::engine
