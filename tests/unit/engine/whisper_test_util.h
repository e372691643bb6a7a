// Shared by the Whisper executor tests (CPU and GPU): the fixture models of tests/fixtures/whisper, their HF
// goldens, the real speech of jfk.wav, and the decoding settings the goldens were made with.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/whisper_executor.h"
#include "frontends/audio/audio.h"
#include "test_paths.h"

namespace mmserve::engine::testing {

inline const char* const kWhisperFixtures[] = {"whisper-tiny-mel80-f32", "whisper-v3-mel128-f16"};

inline std::string model_dir(const std::string& name) {
  return (std::filesystem::path(MMSERVE_FIXTURES_DIR) / "whisper" / name).string();
}

inline nlohmann::json golden(const std::string& name) {
  std::ifstream in(std::filesystem::path(model_dir(name)) / "golden.json");
  return nlohmann::json::parse(in);
}

// tests/fixtures/audio/jfk.wav decoded once (11 s, 16 kHz mono).
inline const std::vector<float>& jfk() {
  static const std::vector<float> samples = [] {
    auto audio = audio::decode_audio_file(std::string(MMSERVE_FIXTURES_DIR) + "/audio/jfk.wav");
    EXPECT_TRUE(audio.ok()) << audio.status().to_string();
    return audio.ok() ? audio->samples : std::vector<float>{};
  }();
  return samples;
}

// tools/reference/make_whisper_fixtures.py's decoding settings: one temperature, no fallback checks, no
// previous-text context, 32 new tokens per window, English.
inline TranscribeOptions golden_options() {
  TranscribeOptions o;
  o.language = "en";
  o.temperatures = {0.0f};
  o.compression_ratio_threshold = 0.0f;
  o.logprob_threshold = NAN;
  o.no_speech_threshold = NAN;
  o.condition_on_previous_text = false;
  o.max_new_tokens = 32;
  return o;
}

// An executor whose model holds 5 decoder rows (decoder_rows, or a GPU model's max_batch): 3 requests of 4 beams
// (12 rows) and 3 of best_of 5 samples (15 rows) must wait for rows, not fail, and each equal the request alone
// (beams, also HF's beam-4 ids of `fixture`); a request that alone needs 6 rows is kInvalidArgument before any
// work, and the executor serves on.
inline void expect_requests_wait_for_decoder_rows(WhisperExecutor& ex, const std::string& fixture) {
  TranscribeOptions beams = golden_options();
  beams.timestamps = false;
  beams.beam_size = 4;
  TranscribeOptions samples = beams;
  samples.beam_size = 1;
  samples.temperatures = {1.0f};
  samples.best_of = 5;
  samples.seed = 7;
  for (const TranscribeOptions* o : {&beams, &samples}) {
    SCOPED_TRACE(o == &beams ? "3 x 4 beams on 5 rows" : "3 x best_of 5 on 5 rows");
    const std::vector<const std::vector<float>*> audios(3, &jfk());
    auto batch = ex.transcribe_batch(audios, std::vector<TranscribeOptions>(3, *o));
    auto alone = ex.transcribe(jfk(), *o);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    ASSERT_EQ(batch.size(), 3u);
    for (size_t i = 0; i < batch.size(); ++i) {
      ASSERT_TRUE(batch[i].ok()) << i << ": " << batch[i].status().to_string();
      ASSERT_EQ(batch[i]->segments.size(), alone->segments.size()) << i;
      for (size_t s = 0; s < alone->segments.size(); ++s) {
        EXPECT_EQ(batch[i]->segments[s].tokens, alone->segments[s].tokens) << i;
      }
    }
    if (o == &beams) {
      EXPECT_EQ(alone->segments.at(0).tokens,
                golden(fixture)["generate"]["beam4"]["tokens"].get<std::vector<int32_t>>());
    }
  }
  TranscribeOptions too_wide = beams;
  too_wide.beam_size = 6;
  auto refused = ex.transcribe(jfk(), too_wide);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("beam_size 6"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("holds 5"), std::string::npos) << refused.status().to_string();
  EXPECT_TRUE(ex.transcribe(jfk(), beams).ok()) << "the executor serves on after a refused request";
}

}  // namespace mmserve::engine::testing
