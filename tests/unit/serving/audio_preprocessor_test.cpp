// WhisperInputs (engine/whisper_inputs.h), the Whisper family's input preparation: the real jfk.wav decoded at 16 kHz with its QoS score from its duration (SPEC 3.2's audio
// term, computed by hand), and every bad input with its code: text or images sent to a speech model, several
// files, zero bytes, non-audio bytes, a truncated header, an unsupported encoding, and the byte and duration
// limits (413).
#include "engine/whisper_inputs.h"

#include <gtest/gtest.h>

#include <cstring>

#include "server_test_util.h"

namespace mmserve::serving {
namespace {

using testing::fixture;
using testing::read_bytes;

InputItem audio_input(std::string bytes) {
  InputItem item;
  item.kind = InputKind::kAudioBytes;
  item.audio_bytes = std::move(bytes);
  return item;
}

using AudioPreprocessorOptions = engine::PreparerOptions;

Status run(std::vector<InputItem> inputs, const AudioPreprocessorOptions& options = {}) {
  return engine::WhisperInputs(16000, options).prepare(inputs, nullptr).status();
}

// A 16-bit PCM WAV header (44 bytes) for `frames` mono frames at `rate`, with an arbitrary format tag.
std::string wav_header(uint32_t frames, uint32_t rate, uint16_t format_tag = 1) {
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  const uint32_t data = frames * 2;
  return "RIFF" + u32(36 + data) + "WAVEfmt " + u32(16) + u16(format_tag) + u16(1) + u32(rate) + u32(rate * 2) +
         u16(2) + u16(16) + "data" + u32(data);
}

TEST(AudioPreprocessor, JfkWavAndItsScore) {
  const std::string wav = read_bytes(fixture("audio/jfk.wav"));
  std::vector<InputItem> inputs = {audio_input(wav)};
  AudioPreprocessorOptions options;
  options.model = "whisper";
  auto prepared = engine::WhisperInputs(16000, options).prepare(inputs, nullptr);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  const auto& request = dynamic_cast<const engine::WhisperInput&>(*prepared->input);
  EXPECT_EQ(request.audio.size(), 176000u);  // 11 s at 16 kHz (the file is 16 kHz mono already)
  EXPECT_DOUBLE_EQ(request.audio_seconds, 11.0);
  EXPECT_EQ(prepared->items[0], 1);
  EXPECT_NEAR(prepared->score, 0.35 * 11.0 / 60.0, 1e-12);  // only the audio term: 0.35 min(11 / 60, 1)
  EXPECT_TRUE(inputs[0].audio_bytes.empty());             // released once decoded
  // Sample 1000 equals the file's int16 / 32768 (the reference loader's scale).
  const size_t data = wav.find("data") + 8;  // the PCM samples follow the data chunk's header
  int16_t s = 0;
  std::memcpy(&s, wav.data() + data + 2 * 1000, 2);
  EXPECT_FLOAT_EQ(request.audio[1000], static_cast<float>(s) / 32768.0f);
}

TEST(AudioPreprocessor, RefusesWhatIsNotOneAudioFile) {
  InputItem text;
  text.kind = InputKind::kText;
  text.text = "hello";
  AudioPreprocessorOptions options;
  options.model = "tiny";
  Status s = run({text}, options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model 'tiny' is a speech-to-text (Whisper) model"), std::string::npos) << s.message();
  s = run({audio_input("a"), audio_input("b")});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("one audio file per request"), std::string::npos) << s.message();
}

TEST(AudioPreprocessor, BrokenAudioIsInvalid) {
  const std::string wav = read_bytes(fixture("audio/jfk.wav"));
  struct Case {
    const char* what;
    std::string bytes;
    const char* needle;
  };
  const Case cases[] = {
      {"zero bytes", "", "empty"},
      {"text", "this is not audio at all, just some text", "audio: "},
      {"png", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, '\0'), "audio: "},
      {"truncated header", wav.substr(0, 30), "audio: "},
      {"header only", wav.substr(0, 44), "audio: "},
      {"random after RIFF", "RIFF" + std::string(200, '\x5a'), "audio: "},
      {"unsupported encoding (ADPCM tag)", wav_header(1000, 16000, 2) + std::string(2000, '\x01'), "audio: "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Status s = run({audio_input(c.bytes)});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
}

TEST(AudioPreprocessor, LimitsAre413) {
  const std::string wav = read_bytes(fixture("audio/jfk.wav"));
  AudioPreprocessorOptions options;
  options.audio_seconds_max = 5;  // jfk.wav is 11 s
  Status s = run({audio_input(wav)}, options);
  EXPECT_EQ(s.code(), StatusCode::kTooLarge) << s.to_string();
  options = {};
  options.audio_bytes_max = 1000;
  s = run({audio_input(wav)}, options);
  EXPECT_EQ(s.code(), StatusCode::kTooLarge) << s.to_string();
}

}  // namespace
}  // namespace mmserve::serving
