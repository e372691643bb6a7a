// Helpers for the audio frontend tests: fixture paths, encoding test signals with libsndfile into memory
// (its virtual I/O in write mode, so no temp files), and measuring a tone (frequency, amplitude, residual)
// with plain double-precision sums that share no code with the frontend.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mmserve::audio::testing {

std::string fixture(const std::string& name);
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Encodes interleaved samples with libsndfile (`sf_format` = major | subtype, e.g. SF_FORMAT_WAV |
// SF_FORMAT_FLOAT). Float input is written through libsndfile's float path (PCM subtypes scale by 32767);
// int16 input through its short path (exact for 16-bit PCM and FLAC). Fails the test (empty result) if
// libsndfile refuses.
std::vector<uint8_t> encode(int sf_format, int sample_rate, int channels, std::span<const float> interleaved);
std::vector<uint8_t> encode_pcm16(int sf_format, int sample_rate, int channels, std::span<const int16_t> interleaved);

// amplitude * sin(2 pi freq n / rate + phase), n < count, computed in double and rounded to float.
std::vector<float> sine(double freq, double amplitude, int sample_rate, int64_t count, double phase = 0.0);

struct ToneFit {
  double amplitude = 0.0;     // of the best-fitting sinusoid at the given frequency
  double residual_rms = 0.0;  // what the sinusoid does not explain
};
// Least-squares fit of a sinusoid at `freq` over samples [begin, end).
ToneFit fit_tone(std::span<const float> samples, int sample_rate, double freq, int64_t begin, int64_t end);
// The frequency (0.5 Hz resolution, 10..rate/2 Hz) with the largest DFT magnitude over [begin, end).
double dominant_frequency(std::span<const float> samples, int sample_rate, int64_t begin, int64_t end);

}  // namespace mmserve::audio::testing
