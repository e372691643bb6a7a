// Audio decoding through libsndfile's virtual I/O over an in-memory buffer, with streaming downmix and
// resampling (see audio.h for the contract).
//
// libsndfile is a C library that reports errors through return values (no longjmp, no exceptions): every
// failure it reports becomes kInvalidArgument with its own message. One wrinkle: a failed sf_open_virtual
// stores its error in process-wide variables (sf_errno, sf_parselog) that sf_strerror(NULL) reads back, so
// opens are serialised by a mutex to keep concurrent requests from reading (or racing on) each other's
// errors. Opening parses headers only; decoding, the expensive part, runs without the lock.
// Tests: tests/unit/frontends/audio/audio_decode_test.cpp; fuzz: fuzz/audio_decode_fuzz.cpp.
#include <sndfile.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "frontends/audio/audio.h"
#include "frontends/audio/resample.h"
#include "frontends/audio/vorbis_headers.h"

namespace mmserve::audio {
namespace {

constexpr int kSampleRateMin = 1000;
constexpr int kSampleRateMax = 384000;
constexpr int kChannelsMax = 64;
constexpr sf_count_t kBlockFrames = 4096;
constexpr int kId3TagsMax = 8;
// The output is reserved up front only up to this many samples (a header's frame count is not trusted).
constexpr size_t kReserveMax = size_t{1} << 22;
constexpr const char* kNotAudio = "not an audio file we can read: ";

bool has_magic(std::span<const uint8_t> bytes, size_t offset, const char* magic) {
  const size_t n = std::strlen(magic);
  return offset <= bytes.size() && bytes.size() - offset >= n && std::memcmp(bytes.data() + offset, magic, n) == 0;
}

// An MPEG-1/2/2.5 audio frame header at `offset`: sync, no reserved version/layer, a valid bitrate and rate.
bool is_mpeg_frame_header(std::span<const uint8_t> bytes, size_t offset) {
  if (offset > bytes.size() || bytes.size() - offset < 4) return false;
  const uint8_t* h = bytes.data() + offset;
  return h[0] == 0xFF && (h[1] & 0xE0) == 0xE0 && ((h[1] >> 3) & 3) != 1 && ((h[1] >> 1) & 3) != 0 &&
         (h[2] >> 4) != 15 && ((h[2] >> 2) & 3) != 3;
}

// An in-memory, read-only file for libsndfile's virtual I/O.
struct MemoryFile {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t position;
};

sf_count_t vio_get_filelen(void* user) {
  return static_cast<MemoryFile*>(user)->size;
}

sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  auto* file = static_cast<MemoryFile*>(user);
  sf_count_t base = 0;
  switch (whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = file->position; break;
    case SEEK_END: base = file->size; break;
    default: return -1;
  }
  // Positions past the end are allowed (reads there return 0 bytes); before the start, or overflowing, not.
  if ((offset > 0 && base > std::numeric_limits<sf_count_t>::max() - offset) || base + offset < 0) return -1;
  file->position = base + offset;
  return file->position;
}

sf_count_t vio_read(void* ptr, sf_count_t count, void* user) {
  auto* file = static_cast<MemoryFile*>(user);
  if (count <= 0 || file->position >= file->size) return 0;
  const sf_count_t n = std::min(count, file->size - file->position);
  std::memcpy(ptr, file->data + file->position, static_cast<size_t>(n));
  file->position += n;
  return n;
}

sf_count_t vio_write(const void* /*ptr*/, sf_count_t /*count*/, void* /*user*/) {
  return 0;
}

sf_count_t vio_tell(void* user) {
  return static_cast<MemoryFile*>(user)->position;
}

struct SndfileCloser {
  void operator()(SNDFILE* file) const { sf_close(file); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

std::mutex& open_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string subtype_name(int subtype) {
  SF_FORMAT_INFO info{};
  info.format = subtype;
  if (sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof(info)) == 0 && info.name != nullptr) return info.name;
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%04x", subtype);
  return hex;
}

// The container libsndfile found must be the one we sniffed, holding an encoding we pass through.
Status check_encoding(AudioFormat format, int sf_format) {
  const int major = sf_format & SF_FORMAT_TYPEMASK;
  const int subtype = sf_format & SF_FORMAT_SUBMASK;
  bool major_ok = false;
  bool subtype_ok = false;
  const char* allowed = "";
  switch (format) {
    case AudioFormat::kWav:
      major_ok = major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX || major == SF_FORMAT_RF64;
      subtype_ok = subtype == SF_FORMAT_PCM_U8 || subtype == SF_FORMAT_PCM_16 || subtype == SF_FORMAT_PCM_24 ||
                   subtype == SF_FORMAT_PCM_32 || subtype == SF_FORMAT_FLOAT || subtype == SF_FORMAT_DOUBLE ||
                   subtype == SF_FORMAT_ULAW || subtype == SF_FORMAT_ALAW;
      allowed = "PCM, float, u-law or A-law";
      break;
    case AudioFormat::kFlac:
      major_ok = major == SF_FORMAT_FLAC;
      subtype_ok = subtype == SF_FORMAT_PCM_S8 || subtype == SF_FORMAT_PCM_16 || subtype == SF_FORMAT_PCM_24;
      allowed = "8, 16 or 24-bit";
      break;
    case AudioFormat::kOgg:
      major_ok = major == SF_FORMAT_OGG;
      subtype_ok = subtype == SF_FORMAT_VORBIS || subtype == SF_FORMAT_OPUS;
      allowed = "Vorbis or Opus";
      break;
    case AudioFormat::kMp3:
      major_ok = major == SF_FORMAT_MPEG;
      subtype_ok = subtype == SF_FORMAT_MPEG_LAYER_I || subtype == SF_FORMAT_MPEG_LAYER_II ||
                   subtype == SF_FORMAT_MPEG_LAYER_III;
      allowed = "MPEG layer I, II or III";
      break;
    case AudioFormat::kUnknown: break;
  }
  if (!major_ok) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%06x", major);
    return invalid_argument(std::string(kNotAudio) + "libsndfile found container " + hex + ", not the " +
                            audio_format_name(format) + " the header announced");
  }
  if (!subtype_ok) {
    return unimplemented(std::string("audio: ") + audio_format_name(format) + " holding " + subtype_name(subtype) +
                         " is not supported (" + allowed + ")");
  }
  return ok_status();
}

Status check_options(const AudioDecodeOptions& options) {
  if (options.max_bytes < 0 || !(options.max_seconds > 0)) {
    return invalid_argument("audio: max_bytes must be >= 0 and max_seconds > 0");
  }
  if (options.sample_rate != 0 && (options.sample_rate < kSampleRateMin || options.sample_rate > kSampleRateMax)) {
    return invalid_argument("audio: output sample rate " + std::to_string(options.sample_rate) +
                            " Hz is outside 1000..384000");
  }
  return ok_status();
}

std::string seconds_string(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

// Reads every frame, averaging the channels and feeding the resampler (or the output) block by block.
Status decode_frames(SNDFILE* file, const SF_INFO& info, const AudioDecodeOptions& options,
                     std::optional<StreamResampler>& resampler, Audio& audio) {
  const int channels = info.channels;
  const double frames_max = options.max_seconds * info.samplerate;
  std::vector<float> block(static_cast<size_t>(kBlockFrames) * channels);
  std::vector<float> mono(kBlockFrames);
  int64_t decoded = 0;
  for (;;) {
    const sf_count_t got = sf_readf_float(file, block.data(), kBlockFrames);
    if (got <= 0) break;
    decoded += got;
    // The header may understate the length (MP3 and Ogg estimates): the limit holds while decoding too.
    if (static_cast<double>(decoded) > frames_max) {
      return too_large("audio: longer than the limit of " + seconds_string(options.max_seconds));
    }
    for (sf_count_t i = 0; i < got; ++i) {
      double sum = 0.0;
      for (int c = 0; c < channels; ++c) sum += block[static_cast<size_t>(i) * channels + c];
      const float value = static_cast<float>(sum / channels);
      // NaN or infinity in a float file would poison every later step (HF would return NaN features).
      if (!std::isfinite(value)) {
        return invalid_argument("audio: sample " + std::to_string(decoded - got + i) + " is not a finite number");
      }
      mono[static_cast<size_t>(i)] = value;
    }
    const std::span<const float> chunk(mono.data(), static_cast<size_t>(got));
    if (resampler) {
      RETURN_IF_ERROR(resampler->push(chunk, audio.samples));
    } else {
      audio.samples.insert(audio.samples.end(), chunk.begin(), chunk.end());
    }
  }
  if (sf_error(file) != SF_ERR_NO_ERROR) return invalid_argument(std::string(kNotAudio) + sf_strerror(file));
  if (decoded == 0) return invalid_argument("audio: no samples");
  audio.source_frames = decoded;
  if (resampler) RETURN_IF_ERROR(resampler->finish(audio.samples));
  if (audio.samples.empty()) {  // e.g. one frame at 44.1 kHz rounds to no sample at 16 kHz
    return invalid_argument("audio: " + std::to_string(decoded) + " frames at " + std::to_string(info.samplerate) +
                            " Hz are too short to resample to " + std::to_string(audio.sample_rate) + " Hz");
  }
  return ok_status();
}

}  // namespace

AudioFormat sniff_audio_format(std::span<const uint8_t> bytes) {
  if ((has_magic(bytes, 0, "RIFF") || has_magic(bytes, 0, "RIFX") || has_magic(bytes, 0, "RF64")) &&
      has_magic(bytes, 8, "WAVE")) {
    return AudioFormat::kWav;
  }
  if (has_magic(bytes, 0, "fLaC")) return AudioFormat::kFlac;
  if (has_magic(bytes, 0, "OggS")) return AudioFormat::kOgg;
  // ID3v2 tags (libsndfile skips versions 2..4, possibly several in a row), then an MPEG audio frame.
  size_t offset = 0;
  for (int tags = 0; tags < kId3TagsMax && has_magic(bytes, offset, "ID3"); ++tags) {
    if (bytes.size() - offset < 10) return AudioFormat::kUnknown;
    const uint8_t* h = bytes.data() + offset;
    if (h[3] < 2 || h[3] > 4) return AudioFormat::kUnknown;
    const size_t size = (size_t{h[6] & 0x7Fu} << 21) | (size_t{h[7] & 0x7Fu} << 14) | (size_t{h[8] & 0x7Fu} << 7) |
                        size_t{h[9] & 0x7Fu};
    offset += 10 + size;
  }
  return is_mpeg_frame_header(bytes, offset) ? AudioFormat::kMp3 : AudioFormat::kUnknown;
}

const char* audio_format_name(AudioFormat format) {
  switch (format) {
    case AudioFormat::kWav: return "WAV";
    case AudioFormat::kFlac: return "FLAC";
    case AudioFormat::kOgg: return "Ogg";
    case AudioFormat::kMp3: return "MP3";
    case AudioFormat::kUnknown: break;
  }
  return "unknown";
}

StatusOr<Audio> decode_audio(std::span<const uint8_t> bytes, const AudioDecodeOptions& options) {
  RETURN_IF_ERROR(check_options(options));
  if (bytes.empty()) return invalid_argument("audio: empty input");
  if (static_cast<int64_t>(bytes.size()) > options.max_bytes) {
    return too_large("audio: " + std::to_string(bytes.size()) + " bytes exceed the limit of " +
                     std::to_string(options.max_bytes) + " bytes");
  }
  Audio audio;
  audio.format = sniff_audio_format(bytes);
  if (audio.format == AudioFormat::kUnknown) {
    return invalid_argument(std::string(kNotAudio) + "unrecognised format (expected WAV, FLAC, Ogg or MP3)");
  }

  // libsndfile leaks on malformed Vorbis headers: those are refused before it sees them (vorbis_headers.h).
  if (audio.format == AudioFormat::kOgg) RETURN_IF_ERROR(detail::check_vorbis_headers(bytes));

  MemoryFile memory{bytes.data(), static_cast<sf_count_t>(bytes.size()), 0};
  SF_VIRTUAL_IO io{vio_get_filelen, vio_seek, vio_read, vio_write, vio_tell};
  SF_INFO info{};
  SndfilePtr file;
  {
    std::lock_guard<std::mutex> lock(open_mutex());
    file.reset(sf_open_virtual(&io, SFM_READ, &info, &memory));
    if (file == nullptr) return invalid_argument(std::string(kNotAudio) + sf_strerror(nullptr));
  }
  RETURN_IF_ERROR(check_encoding(audio.format, info.format));
  if (info.channels < 1 || info.channels > kChannelsMax) {
    return invalid_argument("audio: " + std::to_string(info.channels) + " channels (1..64 supported)");
  }
  if (info.samplerate < kSampleRateMin || info.samplerate > kSampleRateMax) {
    return invalid_argument("audio: sample rate " + std::to_string(info.samplerate) + " Hz is outside 1000..384000");
  }
  // The declared length is refused before decoding (SF_COUNT_MAX means unknown; WAV lengths are already
  // clamped by libsndfile to the bytes present).
  const double frames_max = options.max_seconds * info.samplerate;
  if (info.frames != SF_COUNT_MAX && static_cast<double>(info.frames) > frames_max) {
    return too_large("audio: " + seconds_string(static_cast<double>(info.frames) / info.samplerate) +
                     " long, above the limit of " + seconds_string(options.max_seconds));
  }
  audio.source_channels = info.channels;
  audio.source_sample_rate = info.samplerate;
  audio.sample_rate = options.sample_rate == 0 ? info.samplerate : options.sample_rate;

  std::optional<StreamResampler> resampler;
  if (audio.sample_rate != info.samplerate) {
    ASSIGN_OR_RETURN(StreamResampler created, StreamResampler::create(info.samplerate, audio.sample_rate));
    resampler.emplace(std::move(created));
  }
  if (info.frames > 0 && info.frames != SF_COUNT_MAX) {
    const double expected = static_cast<double>(info.frames) * audio.sample_rate / info.samplerate + 16;
    audio.samples.reserve(std::min(static_cast<size_t>(expected), kReserveMax));
  }
  RETURN_IF_ERROR(decode_frames(file.get(), info, options, resampler, audio));
  return audio;
}

StatusOr<Audio> decode_audio_file(const std::string& path, const AudioDecodeOptions& options) {
  RETURN_IF_ERROR(check_options(options));
  struct stat stat_info {};
  if (::stat(path.c_str(), &stat_info) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return not_found(path + ": no such file");
    return invalid_argument(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(stat_info.st_mode)) return invalid_argument(path + ": not a regular file");
  if (stat_info.st_size > options.max_bytes) {
    return too_large(path + ": file of " + std::to_string(stat_info.st_size) + " bytes exceeds the limit of " +
                     std::to_string(options.max_bytes) + " bytes");
  }
  std::FILE* handle = std::fopen(path.c_str(), "rb");
  if (handle == nullptr) return invalid_argument(path + ": cannot open: " + std::strerror(errno));
  // At most st_size bytes (bounded above); a file that shrank since stat() decodes as truncated data.
  std::vector<uint8_t> bytes(static_cast<size_t>(stat_info.st_size));
  const size_t filled = std::fread(bytes.data(), 1, bytes.size(), handle);
  const bool read_error = std::ferror(handle) != 0;
  std::fclose(handle);
  if (read_error) return invalid_argument(path + ": read error");
  bytes.resize(filled);
  StatusOr<Audio> audio = decode_audio(bytes, options);
  if (!audio.ok()) return audio.status().with_context(path);
  return audio;
}

}  // namespace mmserve::audio
