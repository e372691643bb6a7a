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

}  // namespace mmserve::engine::testing
