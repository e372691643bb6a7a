// See audio_test_util.h.
#include "audio_test_util.h"

#include <gtest/gtest.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numbers>
#include <type_traits>
#include "test_paths.h"

namespace mmserve::audio::testing {
namespace {

// A growable in-memory file for libsndfile's writers (they seek back to patch headers, FLAC and Ogg read).
struct GrowableFile {
  std::vector<uint8_t> data;
  sf_count_t position = 0;
};

sf_count_t grow_filelen(void* user) {
  return static_cast<sf_count_t>(static_cast<GrowableFile*>(user)->data.size());
}
sf_count_t grow_seek(sf_count_t offset, int whence, void* user) {
  auto* file = static_cast<GrowableFile*>(user);
  const sf_count_t base = whence == SEEK_SET   ? 0
                          : whence == SEEK_CUR ? file->position
                                               : static_cast<sf_count_t>(file->data.size());
  if (base + offset < 0) return -1;
  file->position = base + offset;
  return file->position;
}
sf_count_t grow_read(void* ptr, sf_count_t count, void* user) {
  auto* file = static_cast<GrowableFile*>(user);
  const auto size = static_cast<sf_count_t>(file->data.size());
  if (file->position >= size || count <= 0) return 0;
  const sf_count_t n = std::min(count, size - file->position);
  std::memcpy(ptr, file->data.data() + file->position, static_cast<size_t>(n));
  file->position += n;
  return n;
}
sf_count_t grow_write(const void* ptr, sf_count_t count, void* user) {
  auto* file = static_cast<GrowableFile*>(user);
  const auto end = static_cast<size_t>(file->position + count);
  if (end > file->data.size()) file->data.resize(end);
  std::memcpy(file->data.data() + file->position, ptr, static_cast<size_t>(count));
  file->position += count;
  return count;
}
sf_count_t grow_tell(void* user) {
  return static_cast<GrowableFile*>(user)->position;
}

template <typename T>
std::vector<uint8_t> encode_impl(int sf_format, int sample_rate, int channels, std::span<const T> interleaved) {
  GrowableFile file;
  SF_VIRTUAL_IO io{grow_filelen, grow_seek, grow_read, grow_write, grow_tell};
  SF_INFO info{};
  info.samplerate = sample_rate;
  info.channels = channels;
  info.format = sf_format;
  SNDFILE* sf = sf_open_virtual(&io, SFM_WRITE, &info, &file);
  if (sf == nullptr) {
    ADD_FAILURE() << "libsndfile cannot write format 0x" << std::hex << sf_format << ": " << sf_strerror(nullptr);
    return {};
  }
  const auto frames = static_cast<sf_count_t>(interleaved.size() / static_cast<size_t>(channels));
  // In blocks: libsndfile 1.2.0's Vorbis writer crashes on a single call of millions of frames.
  constexpr sf_count_t kBlock = 4096;
  sf_count_t written = 0;
  for (sf_count_t at = 0; at < frames; at += kBlock) {
    const T* block = interleaved.data() + at * channels;
    const sf_count_t n = std::min(kBlock, frames - at);
    if constexpr (std::is_same_v<T, float>) {
      written += sf_writef_float(sf, block, n);
    } else {
      written += sf_writef_short(sf, block, n);
    }
  }
  EXPECT_EQ(written, frames) << sf_strerror(sf);
  EXPECT_EQ(sf_close(sf), 0);
  return file.data;
}

// |sum_n x[n] e^(-i 2 pi f n / rate)| over [begin, end), the phasor advanced by rotation (no trig per sample).
double dft_magnitude(std::span<const float> x, int rate, double freq, int64_t begin, int64_t end) {
  const double w = 2.0 * std::numbers::pi * freq / rate;
  const double step_re = std::cos(w);
  const double step_im = -std::sin(w);
  double phasor_re = std::cos(w * begin);
  double phasor_im = -std::sin(w * begin);
  double re = 0.0;
  double im = 0.0;
  for (int64_t n = begin; n < end; ++n) {
    const double v = x[static_cast<size_t>(n)];
    re += v * phasor_re;
    im += v * phasor_im;
    const double next_re = phasor_re * step_re - phasor_im * step_im;
    phasor_im = phasor_re * step_im + phasor_im * step_re;
    phasor_re = next_re;
  }
  return std::hypot(re, im);
}

}  // namespace

std::string fixture(const std::string& name) {
  return std::string(MMSERVE_FIXTURES_DIR) + "/" + name;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> encode(int sf_format, int sample_rate, int channels, std::span<const float> interleaved) {
  return encode_impl<float>(sf_format, sample_rate, channels, interleaved);
}

std::vector<uint8_t> encode_pcm16(int sf_format, int sample_rate, int channels, std::span<const int16_t> interleaved) {
  return encode_impl<int16_t>(sf_format, sample_rate, channels, interleaved);
}

std::vector<float> sine(double freq, double amplitude, int sample_rate, int64_t count, double phase) {
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    out[static_cast<size_t>(n)] =
        static_cast<float>(amplitude * std::sin(2.0 * std::numbers::pi * freq * n / sample_rate + phase));
  }
  return out;
}

ToneFit fit_tone(std::span<const float> samples, int sample_rate, double freq, int64_t begin, int64_t end) {
  // Normal equations for x ~ a sin + b cos (+ c, the mean), solved exactly by 3x3 elimination.
  double s[3][4] = {};
  const double w = 2.0 * std::numbers::pi * freq / sample_rate;
  for (int64_t n = begin; n < end; ++n) {
    const double basis[3] = {std::sin(w * n), std::cos(w * n), 1.0};
    const double x = samples[static_cast<size_t>(n)];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) s[i][j] += basis[i] * basis[j];
      s[i][3] += basis[i] * x;
    }
  }
  for (int i = 0; i < 3; ++i) {
    for (int r = i + 1; r < 3; ++r) {
      const double f = s[r][i] / s[i][i];
      for (int c = i; c < 4; ++c) s[r][c] -= f * s[i][c];
    }
  }
  double coef[3];
  for (int i = 2; i >= 0; --i) {
    double v = s[i][3];
    for (int j = i + 1; j < 3; ++j) v -= s[i][j] * coef[j];
    coef[i] = v / s[i][i];
  }
  double residual = 0.0;
  for (int64_t n = begin; n < end; ++n) {
    const double model = coef[0] * std::sin(w * n) + coef[1] * std::cos(w * n) + coef[2];
    const double e = samples[static_cast<size_t>(n)] - model;
    residual += e * e;
  }
  return {std::hypot(coef[0], coef[1]), std::sqrt(residual / static_cast<double>(end - begin))};
}

double dominant_frequency(std::span<const float> samples, int sample_rate, int64_t begin, int64_t end) {
  double best = 0.0;
  double best_magnitude = -1.0;
  for (double f = 10.0; f <= sample_rate / 2.0; f += 10.0) {
    const double m = dft_magnitude(samples, sample_rate, f, begin, end);
    if (m > best_magnitude) best_magnitude = m, best = f;
  }
  const double coarse = best;
  for (double f = coarse - 10.0; f <= coarse + 10.0; f += 0.5) {
    const double m = dft_magnitude(samples, sample_rate, f, begin, end);
    if (m > best_magnitude) best_magnitude = m, best = f;
  }
  return best;
}

}  // namespace mmserve::audio::testing
