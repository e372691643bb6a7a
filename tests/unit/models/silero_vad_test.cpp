// Silero VAD v5 with the REAL pretrained weights (compiled in from assets/vad) on the real jfk.wav: speech
// scores high, inserted digital silence and low-level white noise score low and are left out of the spans;
// the get_speech_timestamps state machine on hand-made probability sequences (expected spans worked out by
// hand from utils_vad.py, one case per option); broken weight files; empty, short and non-finite input; and
// Silero's official ONNX model run by onnxruntime (tests/fixtures/vad, from tools/reference/make_silero_vad_golden.py):
// its per-window probabilities and get_speech_timestamps spans, for the compiled-in weights put into the official
// graph and for the official file's own weights.
#include "models/vad/silero_vad.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "core/safetensors.h"
#include "frontends/audio/audio.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kWin = SileroVad::kWindow;
constexpr int64_t kRate = SileroVad::kSampleRate;
// Where the 2 s of silence / noise go into jfk.wav: 1.28 s, inside "And so my fellow Americans" (between
// "so" and "my"), window-aligned. make_silero_vad_golden.py uses the same numbers.
constexpr int64_t kInsertAt = 20480;
constexpr int64_t kInsertLength = 2 * kRate;

const SileroVad& vad() {
  static std::unique_ptr<SileroVad> instance = [] {
    auto loaded = SileroVad::load_default();
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    return loaded.ok() ? std::move(*loaded) : nullptr;
  }();
  MMSERVE_CHECK(instance != nullptr, "the compiled-in Silero VAD weights did not load");
  return *instance;
}

const std::vector<float>& jfk() {
  static const std::vector<float> samples = [] {
    auto audio = audio::decode_audio_file(std::string(MMSERVE_FIXTURES_DIR) + "/audio/jfk.wav");
    EXPECT_TRUE(audio.ok()) << audio.status().to_string();
    return audio.ok() ? audio->samples : std::vector<float>();
  }();
  return samples;
}

std::vector<float> jfk_with(const std::vector<float>& inserted) {
  std::vector<float> x = jfk();
  x.insert(x.begin() + kInsertAt, inserted.begin(), inserted.end());
  return x;
}

std::vector<float> white_noise(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

std::vector<float> probs(const std::vector<float>& audio) {
  auto p = vad().probabilities(audio);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : std::vector<float>();
}

std::vector<SpeechSpan> spans(const std::vector<float>& audio, const VadOptions& options = {}) {
  auto s = vad().speech_spans(audio, options);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : std::vector<SpeechSpan>();
}

// Windows whose 512 samples lie entirely in [begin_s, end_s).
std::pair<float, float> min_max_prob(const std::vector<float>& p, double begin_s, double end_s) {
  float lo = 1.0f, hi = 0.0f;
  for (size_t i = 0; i < p.size(); ++i) {
    const double t0 = static_cast<double>(i * kWin) / kRate, t1 = static_cast<double>((i + 1) * kWin) / kRate;
    if (t0 < begin_s || t1 > end_s) continue;
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  return {lo, hi};
}

std::string to_string(const std::vector<SpeechSpan>& s) {
  std::string out;
  for (const SpeechSpan& span : s) {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on the chained operator+ (its PR105329).
    out += '[';
    out += std::to_string(span.start);
    out += ", ";
    out += std::to_string(span.end);
    out += ") ";
  }
  return out;
}

// ---- real weights on real speech ----

TEST(SileroVad, CompiledInWeightsEqualTheAssetFile) {
  auto from_file = SileroVad::load(std::string(MMSERVE_SOURCE_DIR) + "/assets/vad/silero_vad_16k.safetensors");
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  auto p = (*from_file)->probabilities(jfk());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, probs(jfk()));
}

TEST(SileroVad, JfkSpeechScoresHighAndItsPausesLow) {
  ASSERT_EQ(jfk().size(), 176000u);
  const std::vector<float> p = probs(jfk());
  ASSERT_EQ(p.size(), 344u);  // ceil(176000 / 512)
  for (float v : p) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
  // The four phrases (from the waveform's energy: -8..-15 dBFS against a -40 dBFS room) and the two long
  // pauses between them.
  for (auto [b, e] : {std::pair{0.45, 2.0}, {3.35, 3.7}, {5.45, 7.5}, {8.2, 10.4}}) {
    EXPECT_GT(min_max_prob(p, b, e).first, 0.5f) << "speech at " << b << "-" << e << " s";
  }
  EXPECT_LT(min_max_prob(p, 2.45, 3.2).second, 0.15f);
  EXPECT_LT(min_max_prob(p, 4.6, 5.35).second, 0.15f);
  EXPECT_LT(min_max_prob(p, 0.0, 0.25).second, 0.5f);  // before the first word

  // Default spans: inside the file, sorted and disjoint; each phrase covered, neither long pause touched
  // (beyond the 30 ms padding and a window of reaction time).
  const std::vector<SpeechSpan> s = spans(jfk());
  ASSERT_GE(s.size(), 4u) << to_string(s);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_LT(s[i].start, s[i].end);
    EXPECT_GE(s[i].start, 0);
    EXPECT_LE(s[i].end, static_cast<int64_t>(jfk().size()));
    if (i > 0) {
      EXPECT_LE(s[i - 1].end, s[i].start);
    }
  }
  auto covered_in = [&s](double b, double e) {
    int64_t n = 0;
    for (const SpeechSpan& span : s)
      n += std::max<int64_t>(0, std::min<int64_t>(span.end, e * kRate) - std::max<int64_t>(span.start, b * kRate));
    return static_cast<double>(n) / ((e - b) * kRate);
  };
  for (auto [b, e] : {std::pair{0.45, 2.0}, {3.35, 3.7}, {5.45, 7.5}, {8.2, 10.4}}) {
    EXPECT_GT(covered_in(b, e), 0.9) << "speech at " << b << "-" << e << " s: " << to_string(s);
  }
  EXPECT_EQ(covered_in(2.45, 3.2), 0.0) << to_string(s);
  EXPECT_EQ(covered_in(4.6, 5.35), 0.0) << to_string(s);
  EXPECT_LT(s[0].start, 0.4 * kRate);  // the first word starts at ~0.3 s
}

TEST(SileroVad, InsertedDigitalSilenceIsExcluded) {
  const std::vector<float> x = jfk_with(std::vector<float>(kInsertLength, 0.0f));
  const std::vector<float> p = probs(x);
  const double silence_b = static_cast<double>(kInsertAt) / kRate;
  const double silence_e = static_cast<double>(kInsertAt + kInsertLength) / kRate;
  EXPECT_LT(min_max_prob(p, silence_b, silence_e).second, 0.05f);
  EXPECT_GT(min_max_prob(p, silence_b - 0.3, silence_b).first, 0.9f);  // the speech right before it

  const std::vector<SpeechSpan> s = spans(x);
  ASSERT_FALSE(s.empty());
  // Default padding is 30 ms = 480 samples; allow one more window for the detector's reaction time.
  const int64_t tolerance = 480 + kWin;
  bool ends_at_silence = false, starts_after_silence = false;
  for (const SpeechSpan& span : s) {
    const bool overlaps = span.start < kInsertAt + kInsertLength - tolerance && span.end > kInsertAt + tolerance;
    EXPECT_FALSE(overlaps) << "span [" << span.start << ", " << span.end << ") covers the inserted silence";
    ends_at_silence |= span.end > kInsertAt - 0.1 * kRate && span.end <= kInsertAt + tolerance;
    starts_after_silence |=
        span.start >= kInsertAt + kInsertLength - tolerance && span.start < kInsertAt + kInsertLength + 0.25 * kRate;
  }
  EXPECT_TRUE(ends_at_silence) << to_string(s);
  EXPECT_TRUE(starts_after_silence) << to_string(s);
}

TEST(SileroVad, LowLevelWhiteNoiseScoresLow) {
  // -50 dBFS white noise alone: no speech anywhere.
  const std::vector<float> noise = white_noise(3 * kRate, 0.00316f, 7);
  const std::vector<float> p = probs(noise);
  EXPECT_LT(*std::max_element(p.begin(), p.end()), 0.3f);
  EXPECT_TRUE(spans(noise).empty()) << to_string(spans(noise));

  // The same noise level inserted into jfk: left out of the spans but for the detector's decay time.
  const std::vector<float> x = jfk_with(white_noise(kInsertLength, 0.00316f, 11));
  const std::vector<float> px = probs(x);
  const double b = static_cast<double>(kInsertAt) / kRate, e = static_cast<double>(kInsertAt + kInsertLength) / kRate;
  // Unlike digital silence (zero STFT magnitude, the probability drops within a window), noise right after
  // speech keeps the LSTM's speech state up for ~0.2 s before it decays.
  EXPECT_LT(min_max_prob(px, b + 0.3, e).second, 0.3f);
  const int64_t tolerance = static_cast<int64_t>(0.3 * kRate) + 480;
  for (const SpeechSpan& span : spans(x)) {
    EXPECT_FALSE(span.start < kInsertAt + kInsertLength - tolerance && span.end > kInsertAt + tolerance)
        << "span [" << span.start << ", " << span.end << ") covers the inserted noise";
  }
}

TEST(SileroVad, StateIsPerCallAndTheLastWindowIsZeroPadded) {
  const std::vector<float> head(jfk().begin(), jfk().begin() + 20000);  // 39.06 windows
  const std::vector<float> p1 = probs(head);
  const std::vector<float> p2 = probs(head);
  EXPECT_EQ(p1, p2);  // no state leaks from one call into the next
  ASSERT_EQ(p1.size(), 40u);
  std::vector<float> padded = head;
  padded.resize(40 * kWin, 0.0f);
  EXPECT_EQ(probs(padded), p1);
  // Windows are encoded in blocks: a prefix of the audio scores as the same windows of the whole file, across
  // block boundaries (jfk has 344 windows; the GEMM shapes differ, so equal up to summation order).
  const std::vector<float> all = probs(jfk());
  const std::vector<float> prefix = probs(std::vector<float>(jfk().begin(), jfk().begin() + 200 * kWin + 100));
  ASSERT_EQ(prefix.size(), 201u);
  for (size_t i = 0; i < 200; ++i) EXPECT_NEAR(prefix[i], all[i], 1e-5f) << i;
  // The recurrent state matters: the second half alone is scored differently from the same samples seen
  // after the first half (the context and (h, c) start at zero for each call).
  const std::vector<float> tail(jfk().begin() + 10240, jfk().begin() + 20480);
  const std::vector<float> pt = probs(tail);
  const std::vector<float> pfull = probs(std::vector<float>(jfk().begin(), jfk().begin() + 20480));
  ASSERT_EQ(pt.size(), 20u);
  EXPECT_NE(pt[0], pfull[20]);
}

// ---- every option, on the real audio: changing it changes the spans in the expected direction ----

int64_t covered(const std::vector<SpeechSpan>& s) {
  int64_t n = 0;
  for (const SpeechSpan& span : s) n += span.end - span.start;
  return n;
}

TEST(SileroVad, EveryOptionHasAnEffectOnJfk) {
  const std::vector<SpeechSpan> base = spans(jfk());
  ASSERT_GE(base.size(), 4u);

  VadOptions strict;
  strict.threshold = 0.995f;
  EXPECT_LT(covered(spans(jfk(), strict)), covered(base));

  VadOptions long_speech;
  long_speech.min_speech_ms = 1500;  // the 1.2 s phrase "ask not what your country can do for you" goes
  const std::vector<SpeechSpan> fewer = spans(jfk(), long_speech);
  EXPECT_LT(fewer.size(), base.size()) << to_string(fewer);

  VadOptions long_silence;
  long_silence.min_silence_ms = 1200;  // only pauses over 1.2 s split: the 1 s pauses no longer do
  const std::vector<SpeechSpan> merged = spans(jfk(), long_silence);
  EXPECT_LT(merged.size(), base.size()) << to_string(merged);

  VadOptions padded;
  padded.speech_pad_ms = 100;
  const std::vector<SpeechSpan> wide = spans(jfk(), padded);
  ASSERT_EQ(wide.size(), base.size());
  EXPECT_EQ(wide[0].start, std::max<int64_t>(0, base[0].start + 480 - 1600));
  EXPECT_EQ(wide[1].end, base[1].end - 480 + 1600);

  VadOptions capped;
  capped.max_speech_s = 1.0;
  const std::vector<SpeechSpan> split = spans(jfk(), capped);
  EXPECT_GT(split.size(), base.size()) << to_string(split);
  // Each span is at most max_speech_s long before padding (the reference cuts at max - window - 2 pads).
  for (const SpeechSpan& span : split) EXPECT_LE(span.end - span.start, kRate + 2 * 480) << to_string(split);
}

// ---- the get_speech_timestamps state machine on hand-made probabilities (expected values by hand) ----

// 40 windows = 20480 samples; `runs` sets windows [first, last) to a probability, the rest are 0.
std::vector<float> sequence(std::initializer_list<std::tuple<int, int, float>> runs) {
  std::vector<float> p(40, 0.0f);
  for (auto [first, last, v] : runs)
    for (int i = first; i < last; ++i) p[i] = v;
  return p;
}

std::vector<SpeechSpan> machine(const std::vector<float>& p, const VadOptions& options = {}) {
  auto s = SileroVad::spans_from_probabilities(p, static_cast<int64_t>(p.size()) * kWin, options);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : std::vector<SpeechSpan>();
}

using Spans = std::vector<SpeechSpan>;

TEST(SileroVadSpans, ThresholdAndItsHysteresis) {
  // Speech in windows 5..14 (samples 2560..7680): ends after 4 silent windows (2048 >= 1600 samples of
  // min silence) at temp_end = 7680; padded by 480 on both sides.
  const std::vector<float> p = sequence({{5, 15, 0.6f}});
  EXPECT_EQ(machine(p), (Spans{{2080, 8160}}));
  VadOptions high;
  high.threshold = 0.7f;
  EXPECT_TRUE(machine(p, high).empty());
  // 0.4 after the speech is above neg_threshold = 0.35: still speech until window 25.
  const std::vector<float> q = sequence({{5, 15, 0.9f}, {15, 25, 0.4f}});
  EXPECT_EQ(machine(q), (Spans{{2080, 13280}}));
  VadOptions t6;
  t6.threshold = 0.6f;  // neg_threshold 0.45: the 0.4 run is silence
  EXPECT_EQ(machine(q, t6), (Spans{{2080, 8160}}));
}

TEST(SileroVadSpans, MinSpeech) {
  const std::vector<float> p = sequence({{5, 15, 0.9f}});  // 5120 samples of speech
  VadOptions o;
  o.min_speech_ms = 300;  // 4800 < 5120: kept
  EXPECT_EQ(machine(p, o), (Spans{{2080, 8160}}));
  o.min_speech_ms = 400;  // 6400: dropped
  EXPECT_TRUE(machine(p, o).empty());
}

TEST(SileroVadSpans, MinSilenceAndPadding) {
  // Two bursts with a 3-window (1536-sample) gap.
  const std::vector<float> p = sequence({{5, 15, 0.9f}, {18, 28, 0.9f}});
  EXPECT_EQ(machine(p), (Spans{{2080, 14816}}));  // 1536 < 1600: one span
  VadOptions o;
  o.min_silence_ms = 50;  // 800 samples: two spans, gap 1536 >= 2 pads, so each gets the full 480
  EXPECT_EQ(machine(p, o), (Spans{{2080, 8160}, {8736, 14816}}));
  o.speech_pad_ms = 60;  // 960 samples: the gap is under 2 pads, so it is split in the middle
  EXPECT_EQ(machine(p, o), (Spans{{1600, 8448}, {8448, 15296}}));
  o.speech_pad_ms = 0;
  EXPECT_EQ(machine(p, o), (Spans{{2560, 7680}, {9216, 14336}}));
}

TEST(SileroVadSpans, MaxSpeechSplitsHardWithoutAPause) {
  // Speech from window 2 to 37: max_speech_s = 0.5 gives max_speech_samples = 8000 - 512 - 960 = 6528.
  const std::vector<float> p = sequence({{2, 38, 0.9f}});
  EXPECT_EQ(machine(p), (Spans{{544, 20480}}));
  VadOptions o;
  o.max_speech_s = 0.5;
  EXPECT_EQ(machine(p, o), (Spans{{544, 7936}, {7936, 15104}, {15104, 20480}}));
}

TEST(SileroVadSpans, MaxSpeechSplitsAtTheLongestPause) {
  // A 4-window pause (2048 samples > 98 ms) that min_silence (200 ms) does not split on its own; max_speech_s
  // = 1 s splits there: [1024, 6144) and [8192, end).
  const std::vector<float> p = sequence({{2, 12, 0.9f}, {16, 38, 0.9f}});
  VadOptions o;
  o.min_silence_ms = 200;
  EXPECT_EQ(machine(p, o), (Spans{{544, 20480}}));
  o.max_speech_s = 1.0;
  EXPECT_EQ(machine(p, o), (Spans{{544, 6624}, {7712, 20480}}));
}

TEST(SileroVadSpans, SpeechRunningToTheEnd) {
  // Open at the end of the audio: closed at the audio's length (not the padded window end).
  const std::vector<float> p(5, 0.9f);
  auto s = SileroVad::spans_from_probabilities(p, 2500, {});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());  // 2500 < min speech 4000
  VadOptions o;
  o.min_speech_ms = 100;
  s = SileroVad::spans_from_probabilities(p, 2500, o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Spans{{0, 2500}}));
}

// ---- bad input ----

TEST(SileroVad, EmptyShortAndNonFiniteAudio) {
  auto empty = vad().probabilities({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto no_spans = vad().speech_spans({});
  ASSERT_TRUE(no_spans.ok());
  EXPECT_TRUE(no_spans->empty());
  for (size_t n : {1u, 100u, 511u, 512u, 513u}) {
    const std::vector<float> x(jfk().begin() + 8000, jfk().begin() + 8000 + n);
    auto p = vad().probabilities(x);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->size(), (n + 511) / 512);
    auto s = vad().speech_spans(x);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(s->empty()) << n;  // shorter than min speech
  }
  std::vector<float> bad = jfk();
  bad[1234] = std::numeric_limits<float>::quiet_NaN();
  auto p = vad().probabilities(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("1234"), std::string::npos) << p.status().message();
  bad[1234] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(vad().speech_spans(bad).ok());
}

TEST(SileroVad, BadOptions) {
  const std::vector<float> x(1024, 0.0f);
  auto expect_bad = [&](const VadOptions& o, const char* what) {
    auto s = vad().speech_spans(x, o);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << what;
  };
  VadOptions o;
  o.threshold = 1.5f;
  expect_bad(o, "threshold");
  o = {};
  o.threshold = std::numeric_limits<float>::quiet_NaN();
  expect_bad(o, "NaN threshold");
  o = {};
  o.min_speech_ms = -1;
  expect_bad(o, "min_speech_ms");
  o = {};
  o.min_silence_ms = -1;
  expect_bad(o, "min_silence_ms");
  o = {};
  o.speech_pad_ms = -1;
  expect_bad(o, "speech_pad_ms");
  o = {};
  o.max_speech_s = 0;
  expect_bad(o, "max_speech_s");
  // Probabilities that do not fit the audio length.
  EXPECT_FALSE(SileroVad::spans_from_probabilities(std::vector<float>(3, 0.0f), 512, {}).ok());
  EXPECT_FALSE(SileroVad::spans_from_probabilities({}, -1, {}).ok());
}

// Rewrites the real weights with `edit` applied, into a temp file.
// `scratch` holds replacement data that must outlive the write.
using EditFn = std::function<void(std::vector<TensorToWrite>&, std::vector<std::vector<uint16_t>>& scratch)>;

fs::path write_edited(const std::string& tag, const EditFn& edit) {
  static auto real = SafetensorsFile::open(std::string(MMSERVE_SOURCE_DIR) + "/assets/vad/silero_vad_16k.safetensors");
  EXPECT_TRUE(real.ok()) << real.status().to_string();
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, info] : (*real)->tensors()) tensors.push_back({name, info.dtype, info.shape, info.data});
  std::vector<std::vector<uint16_t>> scratch;
  edit(tensors, scratch);
  const fs::path path =
      fs::temp_directory_path() / ("mmserve_vad_" + tag + "_" + std::to_string(::getpid()) + ".safetensors");
  Status s = write_safetensors(path.string(), tensors);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return path;
}

TEST(SileroVad, BrokenWeightFilesGiveClearErrors) {
  const fs::path no_bias = write_edited("missing", [](auto& t, auto&) {
    std::erase_if(t, [](const TensorToWrite& x) { return x.name == "lstm_cell.bias_hh"; });
  });
  auto missing = SileroVad::load(no_bias.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing: lstm_cell.bias_hh"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find(no_bias.string()), std::string::npos) << "names the file";

  const fs::path transposed = write_edited("shape", [](auto& t, auto&) {
    for (TensorToWrite& x : t) {
      if (x.name == "conv2.weight") x.shape = {128, 64, 3};  // same bytes, transposed shape
    }
  });
  auto misshaped = SileroVad::load(transposed.string());
  ASSERT_FALSE(misshaped.ok());
  EXPECT_EQ(misshaped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(misshaped.status().message().find("conv2.weight [128, 64, 3] (expected [64, 128, 3])"), std::string::npos)
      << misshaped.status().message();

  const fs::path half = write_edited("dtype", [](auto& t, auto& scratch) {
    for (TensorToWrite& x : t) {
      if (x.name != "final_conv.weight") continue;
      scratch.emplace_back(128, 0);
      x.dtype = DType::kF16;
      x.data = scratch.back().data();
    }
  });
  auto f16 = SileroVad::load(half.string());
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.status().message().find("final_conv.weight f16 (expected f32)"), std::string::npos)
      << f16.status().message();

  const fs::path renamed = write_edited("extra", [](auto& t, auto&) {
    TensorToWrite copy = t.front();
    copy.name = "decoder.rnn.weight_ih";  // e.g. a different export's naming
    t.push_back(copy);
  });
  auto extra = SileroVad::load(renamed.string());
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("unexpected: decoder.rnn.weight_ih"), std::string::npos)
      << extra.status().message();
  for (const fs::path& p : {no_bias, transposed, half, renamed}) fs::remove(p);

  auto absent = SileroVad::load("/nonexistent/silero_vad_16k.safetensors");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("/nonexistent/silero_vad_16k.safetensors"), std::string::npos)
      << absent.status().message();

  const fs::path garbage = fs::temp_directory_path() / ("mmserve_vad_garbage_" + std::to_string(::getpid()));
  std::ofstream(garbage) << "RIFF this is not a safetensors file";
  EXPECT_FALSE(SileroVad::load(garbage.string()).ok());
  fs::remove(garbage);
}

// ---- Silero's official ONNX model (tools/reference/make_silero_vad_golden.py, onnxruntime) ----

VadOptions options_from(const nlohmann::json& j) {
  VadOptions o;
  o.threshold = j.at("threshold").get<float>();
  o.min_speech_ms = j.at("min_speech_duration_ms").get<int>();
  o.min_silence_ms = j.at("min_silence_duration_ms").get<int>();
  o.speech_pad_ms = j.at("speech_pad_ms").get<int>();
  o.max_speech_s = j.at("max_speech_duration_s").is_null() ? INFINITY : j.at("max_speech_duration_s").get<double>();
  return o;
}

Spans spans_from(const nlohmann::json& j) {
  Spans s;
  for (const auto& pair : j) s.push_back({pair.at(0).get<int64_t>(), pair.at(1).get<int64_t>()});
  return s;
}

const nlohmann::json* golden() {
  static const std::unique_ptr<nlohmann::json> loaded = []() -> std::unique_ptr<nlohmann::json> {
    std::ifstream in(fs::path(MMSERVE_FIXTURES_DIR) / "vad" / "silero_vad_golden.json");
    if (!in) return nullptr;
    return std::make_unique<nlohmann::json>(nlohmann::json::parse(in));
  }();
  return loaded.get();
}

// `model`'s probabilities and spans against the reference's for each input of `inputs`.
void expect_matches(const SileroVad& model, const nlohmann::json& inputs) {
  ASSERT_EQ(golden()->at("insert_at").get<int64_t>(), kInsertAt);
  ASSERT_EQ(golden()->at("insert_length").get<int64_t>(), kInsertLength);
  ASSERT_EQ(inputs.size(), 2u);
  for (const auto& [name, input] : inputs.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(name == "jfk" || name == "jfk_silence");
    const std::vector<float> x = name == "jfk" ? jfk() : jfk_with(std::vector<float>(kInsertLength, 0.0f));
    ASSERT_EQ(input.at("samples").get<size_t>(), x.size());
    const std::vector<float> ref = input.at("probs").get<std::vector<float>>();
    auto p = model.probabilities(x);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->size(), ref.size());
    float max_diff = 0.0f;
    for (size_t i = 0; i < p->size(); ++i) max_diff = std::max(max_diff, std::fabs((*p)[i] - ref[i]));
    // f32 against onnxruntime's f32: differences are summation order only, carried through the LSTM state.
    EXPECT_LE(max_diff, 1e-4f);
    ::testing::Test::RecordProperty(name + "_max_abs_diff", std::to_string(max_diff));
    std::printf("%s: max |mmserve - onnxruntime| over %zu windows: %.3g\n", name.c_str(), p->size(), max_diff);
    for (const auto& c : input.at("cases")) {
      SCOPED_TRACE(c.at("options").dump());
      const VadOptions o = options_from(c.at("options"));
      const Spans expected = spans_from(c.at("spans"));
      // The state machine exactly, on the reference's own probabilities.
      auto exact = SileroVad::spans_from_probabilities(ref, static_cast<int64_t>(x.size()), o);
      ASSERT_TRUE(exact.ok()) << exact.status().to_string();
      EXPECT_EQ(*exact, expected) << to_string(*exact) << " vs " << to_string(expected);
      // End to end: a probability within 1e-4 of a threshold could move a boundary by a window.
      auto ours = model.speech_spans(x, o);
      ASSERT_TRUE(ours.ok()) << ours.status().to_string();
      ASSERT_EQ(ours->size(), expected.size()) << to_string(*ours) << " vs " << to_string(expected);
      for (size_t i = 0; i < ours->size(); ++i) {
        EXPECT_LE(std::abs((*ours)[i].start - expected[i].start), kWin);
        EXPECT_LE(std::abs((*ours)[i].end - expected[i].end), kWin);
      }
    }
  }
}

#define MMSERVE_SKIP_WITHOUT_GOLDEN()                                                                          \
  if (golden() == nullptr) {                                                                                   \
    GTEST_SKIP() << "tests/fixtures/vad/silero_vad_golden.json has not been generated: run "                   \
                    "tools/reference/make_silero_vad_golden.py (numpy, onnx, onnxruntime; see its docstring)"; \
  }

// The weights mmserve compiles in, put into the official ONNX graph (the npm file ships an earlier v6 release's).
TEST(SileroVadGolden, CompiledInWeightsMatchTheOfficialGraph) {
  MMSERVE_SKIP_WITHOUT_GOLDEN();
  expect_matches(vad(), golden()->at("inputs"));
}

// The official ONNX file untouched, on its own weights (extracted to a safetensors file by the same script).
TEST(SileroVadGolden, OfficialOnnxWeightsMatchTheOfficialFile) {
  MMSERVE_SKIP_WITHOUT_GOLDEN();
  auto official = SileroVad::load(std::string(MMSERVE_FIXTURES_DIR) + "/vad/silero_vad_onnx_16k.safetensors");
  ASSERT_TRUE(official.ok()) << official.status().to_string();
  expect_matches(**official, golden()->at("official").at("inputs"));
}

}  // namespace
}  // namespace mmserve::models
