// Decoding tests: the real jfk.wav against its PCM parsed by hand, signals encoded in the test with libsndfile
// (WAV, FLAC, Ogg Vorbis/Opus, MP3) through downmix and resampling, the limits, and broken input (empty,
// truncated, random bytes, random bytes behind every magic, bit flips of every format, headers claiming
// 2^31 frames, 0 channels or a 0 Hz rate) which must give an error Status, never a crash.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "audio_test_util.h"
#include "frontends/audio/audio.h"

namespace mmserve::audio {
namespace {

using testing::encode;
using testing::encode_pcm16;
using testing::fixture;
using testing::read_file_bytes;
using testing::sine;

Audio decode_ok(std::span<const uint8_t> bytes, const AudioDecodeOptions& options = {}) {
  StatusOr<Audio> audio = decode_audio(bytes, options);
  EXPECT_TRUE(audio.ok()) << audio.status().to_string();
  return audio.ok() ? std::move(audio).value() : Audio{};
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
uint32_t get_u32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t{b[at]} | uint32_t{b[at + 1]} << 8 | uint32_t{b[at + 2]} << 16 | uint32_t{b[at + 3]} << 24;
}

// A canonical 44-byte-header PCM WAV whose header fields can lie: `data_bytes_declared` in the data chunk,
// `payload` actually present.
std::vector<uint8_t> wav_with_header(uint16_t channels, uint32_t rate, uint16_t bits, uint32_t data_bytes_declared,
                                     const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {'R', 'I', 'F', 'F'};
  put_u32(out, 36 + data_bytes_declared);
  for (char c : std::string("WAVEfmt ")) out.push_back(static_cast<uint8_t>(c));
  put_u32(out, 16);
  put_u16(out, 1);  // PCM
  put_u16(out, channels);
  put_u32(out, rate);
  put_u32(out, rate * channels * (bits / 8));
  put_u16(out, static_cast<uint16_t>(channels * (bits / 8)));
  put_u16(out, bits);
  for (char c : std::string("data")) out.push_back(static_cast<uint8_t>(c));
  put_u32(out, data_bytes_declared);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<int16_t> to_pcm16(const std::vector<float>& samples) {
  std::vector<int16_t> out(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) out[i] = static_cast<int16_t>(std::lrint(samples[i] * 32767.0));
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Formats and the real fixture.

TEST(AudioDecode, SniffsFormatsFromMagicBytes) {
  auto bytes = [](std::initializer_list<int> v) {
    std::vector<uint8_t> out;
    for (int b : v) out.push_back(static_cast<uint8_t>(b));
    return out;
  };
  EXPECT_EQ(sniff_audio_format(read_file_bytes(fixture("audio/jfk.wav"))), AudioFormat::kWav);
  EXPECT_EQ(sniff_audio_format(bytes({'f', 'L', 'a', 'C', 0, 0, 0, 34})), AudioFormat::kFlac);
  EXPECT_EQ(sniff_audio_format(bytes({'O', 'g', 'g', 'S', 0, 2})), AudioFormat::kOgg);
  EXPECT_EQ(sniff_audio_format(bytes({0xFF, 0xFB, 0x90, 0x64})), AudioFormat::kMp3);
  // An ID3v2.3 tag of 3 bytes, then an MPEG frame header.
  EXPECT_EQ(sniff_audio_format(bytes({'I', 'D', '3', 3, 0, 0, 0, 0, 0, 3, 1, 2, 3, 0xFF, 0xF3, 0x64, 0xC4})),
            AudioFormat::kMp3);
  // An ID3 tag followed by a WAV is not passed through (libsndfile would parse the WAV).
  EXPECT_EQ(sniff_audio_format(
                bytes({'I', 'D', '3', 3, 0, 0, 0, 0, 0, 0, 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E'})),
            AudioFormat::kUnknown);
  EXPECT_EQ(sniff_audio_format(bytes({'I', 'D', '3', 3, 0, 0, 0x7F, 0x7F, 0x7F, 0x7F})), AudioFormat::kUnknown);
  EXPECT_EQ(sniff_audio_format(bytes({0xFF, 0xFF, 0xFF, 0xFF})), AudioFormat::kUnknown);  // reserved fields
  EXPECT_EQ(sniff_audio_format(bytes({'F', 'O', 'R', 'M', 0, 0, 0, 0, 'A', 'I', 'F', 'F'})), AudioFormat::kUnknown);
  EXPECT_EQ(sniff_audio_format(bytes({'R', 'I', 'F', 'F', 0, 0, 0, 0, 'A', 'V', 'I', ' '})), AudioFormat::kUnknown);
  EXPECT_EQ(sniff_audio_format({}), AudioFormat::kUnknown);
  EXPECT_STREQ(audio_format_name(AudioFormat::kOgg), "Ogg");
}

// jfk.wav: 16 kHz mono s16, 11 s. Every sample must be the raw PCM value / 32768 (the chunks are walked here
// by hand, independently of libsndfile).
TEST(AudioDecode, JfkWavEqualsItsRawPcm) {
  const std::vector<uint8_t> bytes = read_file_bytes(fixture("audio/jfk.wav"));
  ASSERT_GE(bytes.size(), 12u);
  size_t at = 12;
  size_t data_offset = 0;
  size_t data_size = 0;
  while (at + 8 <= bytes.size()) {
    const std::string id(reinterpret_cast<const char*>(&bytes[at]), 4);
    const size_t size = get_u32(bytes, at + 4);
    if (id == "fmt ") {
      EXPECT_EQ(bytes[at + 8] | bytes[at + 9] << 8, 1);     // PCM
      EXPECT_EQ(bytes[at + 10] | bytes[at + 11] << 8, 1);   // mono
      EXPECT_EQ(get_u32(bytes, at + 12), 16000u);           // rate
      EXPECT_EQ(bytes[at + 22] | bytes[at + 23] << 8, 16);  // bits
    }
    if (id == "data") {
      data_offset = at + 8;
      data_size = size;
      break;
    }
    at += 8 + size + (size & 1);
  }
  ASSERT_EQ(data_size, 352000u);
  ASSERT_LE(data_offset + data_size, bytes.size());

  const Audio audio = decode_ok(bytes);
  EXPECT_EQ(audio.format, AudioFormat::kWav);
  EXPECT_EQ(audio.sample_rate, 16000);
  EXPECT_EQ(audio.source_sample_rate, 16000);
  EXPECT_EQ(audio.source_channels, 1);
  EXPECT_EQ(audio.source_frames, 176000);
  ASSERT_EQ(audio.samples.size(), 176000u);
  int mismatches = 0;
  for (size_t i = 0; i < audio.samples.size(); ++i) {
    const auto pcm = static_cast<int16_t>(bytes[data_offset + 2 * i] | bytes[data_offset + 2 * i + 1] << 8);
    if (audio.samples[i] != pcm / 32768.0f) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
  // A few values spelled out (from `xxd` of the data chunk), so a wrong walk above cannot hide a bug.
  const size_t probes[] = {0, 1, 1000, 88000, 175999};
  for (size_t i : probes) {
    const auto pcm = static_cast<int16_t>(bytes[data_offset + 2 * i] | bytes[data_offset + 2 * i + 1] << 8);
    EXPECT_FLOAT_EQ(audio.samples[i], pcm / 32768.0f) << i;
  }
  EXPECT_NEAR(audio.seconds(), 11.0, 1e-9);
}

TEST(AudioDecode, FileApiMatchesBytesAndNamesThePath) {
  const Audio from_file = [] {
    StatusOr<Audio> a = decode_audio_file(fixture("audio/jfk.wav"));
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    return a.ok() ? std::move(a).value() : Audio{};
  }();
  EXPECT_EQ(from_file.samples, decode_ok(read_file_bytes(fixture("audio/jfk.wav"))).samples);

  StatusOr<Audio> missing = decode_audio_file(fixture("audio/missing.wav"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  StatusOr<Audio> directory = decode_audio_file(fixture("audio"));
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  AudioDecodeOptions small;
  small.max_bytes = 1000;
  StatusOr<Audio> too_big = decode_audio_file(fixture("audio/jfk.wav"), small);
  EXPECT_EQ(too_big.status().code(), StatusCode::kTooLarge);
  EXPECT_NE(too_big.status().message().find("jfk.wav"), std::string::npos) << too_big.status().message();
}

// ---------------------------------------------------------------------------------------------------------
// Downmix and resampling.

// Stereo 44.1 kHz: left 0.6 sin(1 kHz), right 0.2 sin(1 kHz) -> mono 0.4 sin(1 kHz) at 16 kHz.
TEST(AudioDecode, StereoAt44kIsDownmixedAndResampledTo16k) {
  constexpr int kRate = 44100;
  constexpr int64_t kFrames = 2 * int64_t{kRate};
  const std::vector<float> left = sine(1000.0, 0.6, kRate, kFrames);
  const std::vector<float> right = sine(1000.0, 0.2, kRate, kFrames);
  std::vector<float> interleaved;
  for (int64_t i = 0; i < kFrames; ++i) {
    interleaved.push_back(left[static_cast<size_t>(i)]);
    interleaved.push_back(right[static_cast<size_t>(i)]);
  }
  const Audio audio = decode_ok(encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, kRate, 2, interleaved));
  EXPECT_EQ(audio.sample_rate, 16000);
  EXPECT_EQ(audio.source_sample_rate, kRate);
  EXPECT_EQ(audio.source_channels, 2);
  EXPECT_EQ(audio.source_frames, kFrames);
  EXPECT_NEAR(static_cast<double>(audio.samples.size()), 32000.0, 2.0);
  // Away from the edges (the converter's filter rings there), the tone is intact.
  EXPECT_NEAR(testing::dominant_frequency(audio.samples, 16000, 4000, 28000), 1000.0, 0.5);
  const testing::ToneFit fit = testing::fit_tone(audio.samples, 16000, 1000.0, 4000, 28000);
  EXPECT_NEAR(fit.amplitude, 0.4, 1e-4);
  EXPECT_LT(fit.residual_rms, 1e-4);
}

TEST(AudioDecode, SampleRateZeroKeepsTheSourceRate) {
  const std::vector<float> tone = sine(440.0, 0.5, 22050, 22050);
  AudioDecodeOptions options;
  options.sample_rate = 0;
  const Audio audio = decode_ok(encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 1, tone), options);
  EXPECT_EQ(audio.sample_rate, 22050);
  EXPECT_EQ(audio.samples, tone);  // float WAV, no conversion: bit-exact
}

// Four channels averaged exactly: (0.125 + 0.25 + 0.5 - 0.25) / 4 = 0.15625 for every frame.
TEST(AudioDecode, ChannelsAreAveraged) {
  std::vector<float> interleaved;
  for (int i = 0; i < 1000; ++i) interleaved.insert(interleaved.end(), {0.125f, 0.25f, 0.5f, -0.25f});
  const Audio audio = decode_ok(encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 4, interleaved));
  EXPECT_EQ(audio.source_channels, 4);
  ASSERT_EQ(audio.samples.size(), 1000u);
  for (float v : audio.samples) ASSERT_EQ(v, 0.15625f);
}

// ---------------------------------------------------------------------------------------------------------
// Round trips through the other formats, encoded here with libsndfile.

TEST(AudioDecode, FlacRoundTripIsLossless) {
  const std::vector<int16_t> pcm = to_pcm16(sine(523.25, 0.7, 16000, 20000));
  const std::vector<uint8_t> flac = encode_pcm16(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, pcm);
  ASSERT_EQ(sniff_audio_format(flac), AudioFormat::kFlac);
  const Audio audio = decode_ok(flac);
  EXPECT_EQ(audio.format, AudioFormat::kFlac);
  ASSERT_EQ(audio.samples.size(), pcm.size());
  for (size_t i = 0; i < pcm.size(); ++i) ASSERT_EQ(audio.samples[i], pcm[i] / 32768.0f) << i;
}

TEST(AudioDecode, Flac24BitStereoAt48kIsResampled) {
  constexpr int kRate = 48000;
  const std::vector<float> tone = sine(2000.0, 0.5, kRate, kRate);
  std::vector<float> interleaved;
  for (float v : tone) interleaved.insert(interleaved.end(), {v, v});
  const Audio audio = decode_ok(encode(SF_FORMAT_FLAC | SF_FORMAT_PCM_24, kRate, 2, interleaved));
  EXPECT_EQ(audio.source_sample_rate, kRate);
  EXPECT_NEAR(static_cast<double>(audio.samples.size()), 16000.0, 2.0);
  const testing::ToneFit fit = testing::fit_tone(audio.samples, 16000, 2000.0, 2000, 14000);
  EXPECT_NEAR(fit.amplitude, 0.5, 1e-4);
  EXPECT_LT(fit.residual_rms, 1e-4);
}

TEST(AudioDecode, OggVorbisRoundTripKeepsTheTone) {
  const std::vector<float> tone = sine(1000.0, 0.5, 16000, 32000);
  const std::vector<uint8_t> ogg = encode(SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, tone);
  ASSERT_EQ(sniff_audio_format(ogg), AudioFormat::kOgg);
  const Audio audio = decode_ok(ogg);
  EXPECT_EQ(audio.format, AudioFormat::kOgg);
  EXPECT_EQ(audio.samples.size(), tone.size());
  EXPECT_NEAR(testing::dominant_frequency(audio.samples, 16000, 4000, 28000), 1000.0, 0.5);
  EXPECT_NEAR(testing::fit_tone(audio.samples, 16000, 1000.0, 4000, 28000).amplitude, 0.5, 0.02);
}

TEST(AudioDecode, OggOpusRoundTripKeepsTheTone) {
  const std::vector<float> tone = sine(1000.0, 0.5, 16000, 32000);
  const Audio audio = decode_ok(encode(SF_FORMAT_OGG | SF_FORMAT_OPUS, 16000, 1, tone));
  EXPECT_EQ(audio.sample_rate, 16000);
  EXPECT_NEAR(static_cast<double>(audio.samples.size()), 32000.0, 960.0);
  EXPECT_NEAR(testing::dominant_frequency(audio.samples, 16000, 4000, 28000), 1000.0, 0.5);
  EXPECT_NEAR(testing::fit_tone(audio.samples, 16000, 1000.0, 4000, 28000).amplitude, 0.5, 0.05);
}

TEST(AudioDecode, Mp3RoundTripKeepsTheTone) {
  const std::vector<float> tone = sine(1000.0, 0.5, 16000, 32000);
  const std::vector<uint8_t> mp3 = encode(SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, 1, tone);
  ASSERT_EQ(sniff_audio_format(mp3), AudioFormat::kMp3);
  const Audio audio = decode_ok(mp3);
  EXPECT_EQ(audio.format, AudioFormat::kMp3);
  EXPECT_EQ(audio.sample_rate, 16000);
  // LAME pads to whole frames (576 samples at 16 kHz) plus its encoder delay.
  EXPECT_NEAR(static_cast<double>(audio.samples.size()), 32000.0, 2500.0);
  EXPECT_NEAR(testing::dominant_frequency(audio.samples, 16000, 4000, 28000), 1000.0, 0.5);
  EXPECT_NEAR(testing::fit_tone(audio.samples, 16000, 1000.0, 4000, 28000).amplitude, 0.5, 0.05);
}

// ---------------------------------------------------------------------------------------------------------
// Limits.

TEST(AudioDecode, RefusesInputAboveMaxBytesBeforeParsing) {
  AudioDecodeOptions options;
  options.max_bytes = 100;
  const std::vector<uint8_t> garbage(101, 0x55);  // not even audio: the size is checked first
  StatusOr<Audio> audio = decode_audio(garbage, options);
  EXPECT_EQ(audio.status().code(), StatusCode::kTooLarge) << audio.status().to_string();
}

TEST(AudioDecode, RefusesAudioLongerThanMaxSecondsFromTheHeader) {
  AudioDecodeOptions options;
  options.max_seconds = 5.0;
  StatusOr<Audio> wav = decode_audio(read_file_bytes(fixture("audio/jfk.wav")), options);
  EXPECT_EQ(wav.status().code(), StatusCode::kTooLarge) << wav.status().to_string();
  EXPECT_NE(wav.status().message().find("11.0 s"), std::string::npos) << wav.status().message();

  // Ten minutes of FLAC silence is a few kilobytes: the header's length is what refuses it.
  const std::vector<int16_t> silence(static_cast<size_t>(16000) * 600, 0);
  const std::vector<uint8_t> flac = encode_pcm16(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, silence);
  EXPECT_LT(flac.size(), 200000u);
  options.max_seconds = 60.0;
  StatusOr<Audio> long_flac = decode_audio(flac, options);
  EXPECT_EQ(long_flac.status().code(), StatusCode::kTooLarge) << long_flac.status().to_string();
  EXPECT_NE(long_flac.status().message().find("600.0 s"), std::string::npos) << long_flac.status().message();

  options.max_seconds = 11.0;  // exactly the length: accepted
  EXPECT_TRUE(decode_audio(read_file_bytes(fixture("audio/jfk.wav")), options).ok());
}

TEST(AudioDecode, RejectsInvalidOptions) {
  const std::vector<uint8_t> wav = read_file_bytes(fixture("audio/jfk.wav"));
  AudioDecodeOptions options;
  options.sample_rate = 100;
  EXPECT_EQ(decode_audio(wav, options).status().code(), StatusCode::kInvalidArgument);
  options = {};
  options.max_seconds = 0.0;
  EXPECT_EQ(decode_audio(wav, options).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------------
// Encodings we refuse, and broken input.

TEST(AudioDecode, RefusesOtherContainersAndCodecs) {
  const std::vector<float> tone = sine(440.0, 0.5, 16000, 4000);
  // AIFF is a fine format, but not one we pass to libsndfile.
  StatusOr<Audio> aiff = decode_audio(encode(SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 16000, 1, tone));
  EXPECT_EQ(aiff.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(aiff.status().message().find("not an audio file we can read"), std::string::npos);
  // IMA ADPCM inside a WAV: a recognised container with an encoding we do not decode.
  StatusOr<Audio> adpcm = decode_audio(encode(SF_FORMAT_WAV | SF_FORMAT_IMA_ADPCM, 16000, 1, tone));
  EXPECT_EQ(adpcm.status().code(), StatusCode::kUnimplemented) << adpcm.status().to_string();
  EXPECT_NE(adpcm.status().message().find("IMA ADPCM"), std::string::npos) << adpcm.status().message();
}

TEST(AudioDecode, RejectsNonFiniteSamples) {
  std::vector<float> samples = sine(440.0, 0.5, 16000, 5000);
  samples[4321] = std::nanf("");
  StatusOr<Audio> audio = decode_audio(encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, samples));
  EXPECT_EQ(audio.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(audio.status().message().find("sample 4321"), std::string::npos) << audio.status().message();
  samples[4321] = INFINITY;
  EXPECT_EQ(decode_audio(encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, samples)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AudioDecode, EmptyAndTruncatedInputAreInvalid) {
  StatusOr<Audio> empty = decode_audio({});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(), "audio: empty input");

  const std::vector<uint8_t> jfk = read_file_bytes(fixture("audio/jfk.wav"));
  const std::vector<uint8_t> header_only(jfk.begin(), jfk.begin() + 20);
  StatusOr<Audio> truncated = decode_audio(header_only);
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(truncated.status().message().rfind("not an audio file we can read: ", 0), 0u)
      << truncated.status().message();

  // A WAV with a header and an empty data chunk holds no samples.
  StatusOr<Audio> no_samples = decode_audio(wav_with_header(1, 16000, 16, 0, {}));
  EXPECT_EQ(no_samples.status().code(), StatusCode::kInvalidArgument) << no_samples.status().to_string();

  // Every prefix of a small WAV: an error, or the samples that are complete.
  const std::vector<uint8_t> wav =
      encode_pcm16(SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, to_pcm16(sine(300.0, 0.5, 16000, 300)));
  for (size_t n = 1; n < wav.size(); ++n) {
    StatusOr<Audio> audio = decode_audio(std::span<const uint8_t>(wav.data(), n));
    if (audio.ok()) {
      EXPECT_LE(audio->samples.size(), 300u) << n;
    } else {
      EXPECT_EQ(audio.status().code(), StatusCode::kInvalidArgument) << n << ": " << audio.status().to_string();
    }
  }
}

TEST(AudioDecode, RandomBytesAreInvalid) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint8_t> bytes(1 + rng() % 4096);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    if (sniff_audio_format(bytes) != AudioFormat::kUnknown) continue;  // a random MPEG sync: covered below
    StatusOr<Audio> audio = decode_audio(bytes);
    ASSERT_EQ(audio.status().code(), StatusCode::kInvalidArgument) << trial;
    ASSERT_EQ(audio.status().message().rfind("not an audio file we can read: ", 0), 0u) << trial;
  }
}

// Random bytes behind each accepted magic, and bit flips and truncations of a valid file of each format, reach
// libsndfile's parsers and decoders: they must come back as a Status (or decode), never crash.
TEST(AudioDecode, CorruptFilesOfEveryFormatNeverCrash) {
  const std::vector<float> tone = sine(700.0, 0.5, 16000, 8000);
  const std::vector<std::vector<uint8_t>> valid = {
      encode_pcm16(SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, to_pcm16(tone)),
      encode(SF_FORMAT_WAV | SF_FORMAT_ULAW, 16000, 1, tone),
      encode(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, tone),
      encode(SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, tone),
      encode(SF_FORMAT_OGG | SF_FORMAT_OPUS, 16000, 1, tone),
      encode(SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, 1, tone),
  };
  std::mt19937 rng(99);
  AudioDecodeOptions options;
  options.max_seconds = 60.0;
  auto expect_status_or_audio = [&](const std::vector<uint8_t>& bytes, const std::string& what) {
    StatusOr<Audio> audio = decode_audio(bytes, options);
    if (audio.ok()) {
      EXPECT_FALSE(audio->samples.empty()) << what;
      return;
    }
    const StatusCode code = audio.status().code();
    EXPECT_TRUE(code == StatusCode::kInvalidArgument || code == StatusCode::kUnimplemented ||
                code == StatusCode::kTooLarge)
        << what << ": " << audio.status().to_string();
  };
  for (size_t f = 0; f < valid.size(); ++f) {
    ASSERT_GE(valid[f].size(), 64u);
    ASSERT_TRUE(decode_audio(valid[f]).ok()) << f;
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<uint8_t> bytes = valid[f];
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int i = 0; i < flips; ++i) bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      expect_status_or_audio(bytes, "format " + std::to_string(f) + " flip trial " + std::to_string(trial));
      bytes.resize(1 + rng() % bytes.size());
      expect_status_or_audio(bytes, "format " + std::to_string(f) + " cut trial " + std::to_string(trial));
    }
    // The header kept, everything after it random.
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<uint8_t> bytes(64 + rng() % 8192);
      std::copy(valid[f].begin(), valid[f].begin() + 64, bytes.begin());
      for (size_t i = 64; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(rng());
      expect_status_or_audio(bytes, "format " + std::to_string(f) + " random body " + std::to_string(trial));
    }
  }
}

// libsndfile 1.2.0 leaks its vorbis_info when Vorbis headers are malformed; we check them first. An Ogg Vorbis
// file cut after its first page (the identification header alone) is refused by that check, with our message.
TEST(AudioDecode, VorbisWithIncompleteHeadersIsRefusedBeforeLibsndfile) {
  const std::vector<uint8_t> ogg = encode(SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, sine(440.0, 0.5, 16000, 8000));
  size_t second_page = 0;
  for (size_t i = 4; i + 4 <= ogg.size() && second_page == 0; ++i) {
    if (std::memcmp(&ogg[i], "OggS", 4) == 0) second_page = i;
  }
  ASSERT_GT(second_page, 0u);
  StatusOr<Audio> audio = decode_audio(std::span<const uint8_t>(ogg.data(), second_page));
  EXPECT_EQ(audio.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(audio.status().message(), "not an audio file we can read: Vorbis headers are incomplete");
}

// The data chunk claims 2^31 frames of 8-bit mono; 100 bytes follow. libsndfile clamps the data length to
// the bytes present (the header is not trusted for the allocation), so exactly those 100 frames decode.
TEST(AudioDecode, WavHeaderClaimingTwoToThe31FramesDecodesWhatIsThere) {
  std::vector<uint8_t> payload(100);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(128 + (i % 2 == 0 ? 64 : -64));
  StatusOr<Audio> audio = decode_audio(wav_with_header(1, 16000, 8, 0x80000000u, payload));
  ASSERT_TRUE(audio.ok()) << audio.status().to_string();
  ASSERT_EQ(audio->samples.size(), 100u);
  EXPECT_EQ(audio->samples[0], 0.5f);  // unsigned 8-bit: (192 - 128) / 128
  EXPECT_EQ(audio->samples[1], -0.5f);
}

TEST(AudioDecode, ZeroChannelsOrZeroRateIsInvalid) {
  const std::vector<uint8_t> payload(400, 0);
  StatusOr<Audio> no_channels = decode_audio(wav_with_header(0, 16000, 16, 400, payload));
  EXPECT_EQ(no_channels.status().code(), StatusCode::kInvalidArgument) << no_channels.status().to_string();
  StatusOr<Audio> no_rate = decode_audio(wav_with_header(1, 0, 16, 400, payload));
  EXPECT_EQ(no_rate.status().code(), StatusCode::kInvalidArgument) << no_rate.status().to_string();
  StatusOr<Audio> low_rate = decode_audio(wav_with_header(1, 500, 16, 400, payload));
  EXPECT_EQ(low_rate.status().code(), StatusCode::kInvalidArgument) << low_rate.status().to_string();
  EXPECT_NE(low_rate.status().message().find("500 Hz"), std::string::npos) << low_rate.status().message();
  StatusOr<Audio> many_channels = decode_audio(wav_with_header(100, 16000, 16, 400, payload));
  EXPECT_EQ(many_channels.status().code(), StatusCode::kInvalidArgument) << many_channels.status().to_string();
}

}  // namespace
}  // namespace mmserve::audio
