// Audio decoding for speech models: WAV/FLAC/Ogg/MP3 bytes -> mono float32 at the model's rate (16 kHz).
//
// libsndfile decodes from memory through its virtual I/O API, so request bodies never touch a temp file.
// The format is sniffed from the magic bytes first and only WAV (RIFF/RIFX/RF64), FLAC, Ogg (Vorbis, Opus)
// and MPEG audio (MP3, optionally behind ID3v2 tags) reach libsndfile: its parsers for the other two dozen
// formats it knows are attack surface a speech server does not need. Ogg Vorbis headers are checked with
// libvorbis first (libsndfile 1.2.0 leaks memory on malformed ones, see vorbis_headers.h). Samples are
// libsndfile's normalised floats (16-bit PCM reads as int16 / 32768, as soundfile and the reference
// `whisper` package do). Channels are averaged to mono (ffmpeg's `-ac 1` for stereo, the reference's
// loader), then libsamplerate (SRC_SINC_BEST_QUALITY) converts to the target rate when it differs; decoding,
// downmix and resampling stream in blocks, so memory is the output plus one block.
// Limits: the encoded size, then the duration the header declares, then the duration actually decoded, are
// checked against the caller's limits (kTooLarge) before anything large is allocated.
// Tests: tests/unit/frontends/audio/audio_decode_test.cpp; fuzz: fuzz/audio_decode_fuzz.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::audio {

enum class AudioFormat { kWav, kFlac, kOgg, kMp3, kUnknown };

struct AudioDecodeOptions {
  int64_t max_bytes = 64LL * 1024 * 1024;  // encoded input; above: kTooLarge before any parsing
  double max_seconds = 30.0 * 60;          // decoded duration; above: kTooLarge (header first, then while decoding)
  int sample_rate = 16000;                 // output rate; 0 keeps the source's rate (no resampling)
};

struct Audio {
  std::vector<float> samples;  // mono, nominally in [-1, 1]
  int sample_rate = 0;         // of `samples`
  AudioFormat format = AudioFormat::kUnknown;
  int source_channels = 0;
  int source_sample_rate = 0;
  int64_t source_frames = 0;  // frames decoded at the source rate
  double seconds() const { return sample_rate > 0 ? static_cast<double>(samples.size()) / sample_rate : 0.0; }
};

// The container from the magic bytes (ID3v2 tags are skipped, then MPEG audio must follow); kUnknown for
// anything else. Never reads past `bytes`.
AudioFormat sniff_audio_format(std::span<const uint8_t> bytes);
const char* audio_format_name(AudioFormat format);

// Decodes, downmixes to mono and resamples. Errors: kInvalidArgument for empty input, an unrecognised format,
// every libsndfile error ("not an audio file we can read: <libsndfile's message>"), no samples, a sample rate
// outside 1000..384000 Hz, more than 64 channels, or a non-finite sample; kUnimplemented for a recognised
// container holding an encoding we do not pass through (e.g. ADPCM WAV); kTooLarge above the limits.
StatusOr<Audio> decode_audio(std::span<const uint8_t> bytes, const AudioDecodeOptions& options = {});
// Reads a file (refused above max_bytes before reading) and decodes it; errors name the path.
StatusOr<Audio> decode_audio_file(const std::string& path, const AudioDecodeOptions& options = {});

}  // namespace mmserve::audio
