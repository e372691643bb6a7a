// libFuzzer target for the audio frontend: decode_audio on arbitrary bytes (WAV, FLAC, Ogg, MP3 or garbage).
//
// Outside bytes reach our format sniffing and libsndfile's WAV/RF64, FLAC, Ogg Vorbis/Opus and MPEG parsers
// and decoders through the virtual I/O wrapper, then the downmix and libsamplerate; the decoder must return a
// Status, never crash, leak or hang. Decoded audio is capped at 20 s and 1 MiB of input so each input stays
// fast; short results also go through the Whisper log-mel (with a 2 s window to keep runs quick).
// Seeds (fuzz/corpus/audio_decode_fuzz): tiny files written by libsndfile 1.2.0 (a 440 Hz tone in each
// accepted format and encoding, mono/stereo, 8-48 kHz), a truncated WAV, headers with 0 channels or 2^31
// frames, an IMA ADPCM WAV (refused), and the Ogg file with which this fuzzer found libsndfile's Vorbis leak.
// Run: build/fuzz/fuzz/audio_decode_fuzz -max_total_time=60 fuzz/corpus/audio_decode_fuzz (docs/testing.md).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "frontends/audio/audio.h"
#include "frontends/audio/log_mel.h"

namespace {

const mmserve::audio::WhisperLogMel& log_mel() {
  static const mmserve::audio::WhisperLogMel instance = [] {
    mmserve::audio::WhisperFeatureConfig config;
    config.chunk_length = 2;
    return mmserve::audio::WhisperLogMel::create(config).value();
  }();
  return instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmserve::audio;
  AudioDecodeOptions options;
  options.max_bytes = 1 << 20;
  options.max_seconds = 20.0;
  mmserve::StatusOr<Audio> audio = decode_audio(std::span<const uint8_t>(data, size), options);
  if (!audio.ok()) return 0;
  if (audio->samples.empty() || audio->sample_rate != 16000) __builtin_trap();
  for (float v : audio->samples) {
    if (!std::isfinite(v)) __builtin_trap();
  }
  if (audio->samples.size() <= 16000 * 2) {
    const std::vector<float> features = log_mel().compute(audio->samples);
    for (float v : features) {
      if (!std::isfinite(v)) __builtin_trap();
    }
  }
  return 0;
}
