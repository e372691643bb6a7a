// silero_vad_bench: the cost of Silero VAD v5 (the real compiled-in weights, CPU f32, one thread unless
// --threads says otherwise) per second of audio, and the fraction of audio its spans let Whisper skip.
//
// Inputs, all built from the real jfk.wav (11 s, natural pauses of ~1 s): `jfk` as is; `jfk_pauses`: 2 s of
// digital silence inserted at 1.28 s (inside a phrase) and 3 s more at the end, as in a recording with long
// pauses; `jfk_noise_pauses`: the same with -50 dBFS white noise instead of silence. For each: the median time
// of speech_spans() over --iters runs (the forward is ~all of it), ms per second of audio, the real-time factor,
// and the speech kept / skipped with the default options (get_speech_timestamps' defaults). The time this
// saves Whisper is measured by the executor, which runs the encoder only on the kept audio.
// Prints one JSON object.
//
//   silero_vad_bench [--iters 20] [--threads 1] [--audio FILE.wav]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "frontends/audio/audio.h"
#include "kernels/gemm/gemm.h"
#include "models/vad/silero_vad.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<float> noise(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  using mmserve::models::SileroVad;
  int iters = 20, threads = 1;
  std::string audio_path = MMSERVE_JFK_WAV;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--audio" && i + 1 < argc) {
      audio_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: silero_vad_bench [--iters N] [--threads N] [--audio FILE.wav]\n");
      return 2;
    }
  }
  mmserve::kernels::set_cpu_threads(threads);  // the block GEMMs; the recurrent part is one thread anyway
  auto vad = SileroVad::load_default();
  if (!vad.ok()) {
    std::fprintf(stderr, "%s\n", vad.status().to_string().c_str());
    return 1;
  }
  auto audio = mmserve::audio::decode_audio_file(audio_path);
  if (!audio.ok()) {
    std::fprintf(stderr, "%s\n", audio.status().to_string().c_str());
    return 1;
  }
  const std::vector<float>& speech = audio->samples;
  const int64_t rate = SileroVad::kSampleRate;
  const int64_t insert_at = std::min<int64_t>(20480, static_cast<int64_t>(speech.size()));
  auto with_pauses = [&](const std::vector<float>& mid, const std::vector<float>& end) {
    std::vector<float> x(speech.begin(), speech.begin() + insert_at);
    x.insert(x.end(), mid.begin(), mid.end());
    x.insert(x.end(), speech.begin() + insert_at, speech.end());
    x.insert(x.end(), end.begin(), end.end());
    return x;
  };
  const std::vector<std::pair<std::string, std::vector<float>>> inputs = {
      {"jfk", speech},
      {"jfk_pauses", with_pauses(std::vector<float>(2 * rate, 0.0f), std::vector<float>(3 * rate, 0.0f))},
      {"jfk_noise_pauses", with_pauses(noise(2 * rate, 0.00316f, 1), noise(3 * rate, 0.00316f, 2))},
  };

  nlohmann::json out = {{"bench", "silero_vad"}, {"threads", threads}, {"iters", iters}, {"audio", audio_path}};
  for (const auto& [name, x] : inputs) {
    std::vector<mmserve::models::SpeechSpan> spans;
    std::vector<double> times;
    for (int it = 0; it < iters + 1; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      auto s = (*vad)->speech_spans(x);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), s.status().to_string().c_str());
        return 1;
      }
      spans = *s;
      if (it > 0) times.push_back(ms);  // the first run warms the caches
    }
    int64_t kept = 0;
    nlohmann::json span_list = nlohmann::json::array();
    for (const auto& s : spans) {
      kept += s.end - s.start;
      span_list.push_back({static_cast<double>(s.start) / rate, static_cast<double>(s.end) / rate});
    }
    const double seconds = static_cast<double>(x.size()) / rate;
    const double ms = median(times);
    out["results"].push_back({{"input", name},
                              {"audio_s", seconds},
                              {"vad_ms", ms},
                              {"vad_ms_per_audio_s", ms / seconds},
                              {"real_time_factor", ms / 1000.0 / seconds},
                              {"speech_kept_s", static_cast<double>(kept) / rate},
                              {"skipped_fraction", 1.0 - static_cast<double>(kept) / static_cast<double>(x.size())},
                              {"spans_s", span_list}});
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
