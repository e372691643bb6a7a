// whisper_cpu_bench: the real-time factor of Whisper's tiny (or base) architecture on this machine's CPU.
//
// No real Whisper weights exist offline here, so it writes a random-weight checkpoint of the real architecture
// (HF names, f32) into a temporary directory and times, on one 30 s window of real speech (jfk.wav padded):
// the log-mel (HF's WhisperFeatureExtractor algorithm), the encoder, and the decoder: a 4-token prompt then
// --tokens greedy steps with the KV cache (argmax, end-of-text ignored so the count is exact). Random weights
// cost the same arithmetic as trained ones. Prints one JSON object; bench/run_whisper_cpu_bench.sh turns it
// into docs/perf/whisper_cpu.md's table.
//
//   whisper_cpu_bench [--arch tiny|base] [--threads N] [--tokens 128] [--iters 3] [--audio FILE.wav]
// The real-time factor is (mel + encoder + decoder time) / 30 s for one window with --tokens tokens (whisper.cpp
// and faster-whisper report the same ratio; a 30 s window of English speech is ~100 tokens).
// --vad also times WhisperExecutor::transcribe on speech with pauses (jfk, 25 s of silence, jfk, 25 s of
// silence: 72 s, 3 windows) with and without the Silero VAD, greedy without timestamps at one temperature:
// a random model never ends a window early, so each window costs the encoder plus --tokens decoder steps and
// the saving is the windows the VAD removes (the tokenizer and generation config come from the tiny fixture,
// which has the same 51,865-token vocabulary).
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/whisper_executor.h"
#include "frontends/audio/audio.h"
#include "frontends/audio/log_mel.h"
#include "kernels/common/blas_core.h"
#include "kernels/gemm/gemm.h"
#include "models/whisper/whisper.h"

namespace fs = std::filesystem;
using mmserve::Status;

namespace {

struct Arch {
  const char* name;
  int64_t d_model, layers, heads, ffn;
};
// openai/whisper-tiny and whisper-base (config.json of the released checkpoints).
constexpr Arch kArchs[] = {{"tiny", 384, 4, 6, 1536}, {"base", 512, 6, 8, 2048}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double time_ms(int iters, Fn&& fn) {
  fn();  // warm-up: first touch of the buffers, thread start
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(times);
}

// A random checkpoint of `arch` (weights N(0, 0.02), layer norms 1): config.json + model.safetensors.
Status write_checkpoint(const Arch& arch, const fs::path& dir) {
  nlohmann::json config = {{"model_type", "whisper"},
                           {"architectures", {"WhisperForConditionalGeneration"}},
                           {"vocab_size", 51865},
                           {"num_mel_bins", 80},
                           {"d_model", arch.d_model},
                           {"encoder_layers", arch.layers},
                           {"decoder_layers", arch.layers},
                           {"encoder_attention_heads", arch.heads},
                           {"decoder_attention_heads", arch.heads},
                           {"encoder_ffn_dim", arch.ffn},
                           {"decoder_ffn_dim", arch.ffn},
                           {"max_source_positions", 1500},
                           {"max_target_positions", 448}};
  std::ofstream(dir / "config.json") << config.dump(1);
  auto parsed = mmserve::models::parse_whisper_config(config, "bench config");
  if (!parsed.ok()) return parsed.status();
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::vector<float>> storage;
  std::vector<mmserve::TensorToWrite> tensors;
  for (const auto& spec : mmserve::models::whisper_weight_specs(*parsed)) {
    if (spec.optional) continue;  // proj_out.weight: tied to embed_tokens
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    std::vector<float>& data = storage.emplace_back(static_cast<size_t>(n));
    const bool norm_weight = spec.name.find("layer_norm") != std::string::npos &&
                             spec.name.ends_with(".weight");
    for (float& x : data) x = norm_weight ? 1.0f : normal(rng);
    tensors.push_back({spec.name, mmserve::DType::kF32, spec.shape, data.data()});
  }
  return mmserve::write_safetensors((dir / "model.safetensors").string(), tensors);
}

}  // namespace

int main(int argc, char** argv) {
  mmserve::kernels::reexec_with_blas_coretype_if_needed(argv);
  std::string arch_name = "tiny", audio_path = MMSERVE_JFK_WAV;
  int threads = 0, tokens = 128, iters = 3;
  bool vad = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--arch") arch_name = next();
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--tokens") tokens = std::atoi(next().c_str());
    else if (a == "--iters") iters = std::atoi(next().c_str());
    else if (a == "--audio") audio_path = next();
    else if (a == "--vad") vad = true;
    else {
      std::fprintf(stderr, "usage: whisper_cpu_bench [--arch tiny|base] [--threads N] [--tokens N] [--iters N] "
                           "[--audio FILE] [--vad]\n");
      return 2;
    }
  }
  const Arch* arch = nullptr;
  for (const Arch& a : kArchs) {
    if (arch_name == a.name) arch = &a;
  }
  if (arch == nullptr || tokens < 1 || tokens > 440 || iters < 1) {
    std::fprintf(stderr, "whisper_cpu_bench: --arch tiny|base, --tokens 1..440, --iters >= 1\n");
    return 2;
  }
  if (threads > 0) mmserve::kernels::set_cpu_threads(threads);

  const fs::path dir = fs::temp_directory_path() / ("mmserve-whisper-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "whisper_cpu_bench: %s\n", s.to_string().c_str());
    fs::remove_all(dir);
    return 1;
  };
  if (Status s = write_checkpoint(*arch, dir); !s.ok()) return fail(s);
  auto model = mmserve::models::WhisperModel::load(dir.string());
  if (!model.ok()) return fail(model.status());
  auto audio = mmserve::audio::decode_audio_file(audio_path);
  if (!audio.ok()) return fail(audio.status());
  auto mel_fe = mmserve::audio::WhisperLogMel::create({});
  if (!mel_fe.ok()) return fail(mel_fe.status());

  std::vector<float> mel;
  const double mel_ms = time_ms(iters, [&] { mel = mel_fe->compute(audio->samples); });
  const mmserve::Tensor mel_view(mel.data(), mmserve::DType::kF32, {1, 80, 3000});
  std::vector<float> encoded;
  Status status;
  auto keep = [&status](const Status& s) {  // the first error of a timed loop
    if (status.ok() && !s.ok()) status = s;
  };
  const double encoder_ms = time_ms(iters, [&] { keep((*model)->encode(mel_view, encoded)); });
  if (!status.ok()) return fail(status);

  // <|startoftranscript|><|en|><|transcribe|><|notimestamps|>, then `tokens` greedy steps.
  const std::vector<int32_t> prompt = {50258, 50259, 50359, 50363};
  const int64_t vocab = (*model)->config().vocab_size;
  double prefill_ms = 0.0;
  const double decoder_ms = time_ms(iters, [&] {
    auto state = (*model)->start_decoder(encoded, 1, 1500, static_cast<int64_t>(prompt.size()) + tokens);
    if (!state.ok()) {
      keep(state.status());
      return;
    }
    std::vector<float> logits;
    auto t0 = std::chrono::steady_clock::now();
    keep((*model)->prefill(*state, {prompt}, logits));
    prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (int t = 1; t < tokens && status.ok(); ++t) {
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + vocab) -
                                                logits.begin());
      keep((*model)->step(*state, {next}, logits));
    }
  });
  if (!status.ok()) return fail(status);

  nlohmann::json vad_result;
  if (vad) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                             "processor_config.json"}) {
      fs::copy_file(fs::path(MMSERVE_WHISPER_FIXTURE) / file, dir / file);
    }
    mmserve::engine::ExecutorOptions options;
    options.threads = threads;
    auto executor = mmserve::engine::WhisperExecutor::create(dir.string(), options);
    if (!executor.ok()) return fail(executor.status());
    std::vector<float> paused;
    for (int i = 0; i < 2; ++i) {
      paused.insert(paused.end(), audio->samples.begin(), audio->samples.end());
      paused.insert(paused.end(), 25 * 16000, 0.0f);
    }
    mmserve::engine::TranscribeOptions o;
    o.language = "en";
    o.timestamps = false;
    o.temperatures = {0.0f};
    o.compression_ratio_threshold = 0.0f;
    o.logprob_threshold = NAN;
    o.no_speech_threshold = NAN;
    o.condition_on_previous_text = false;
    o.max_new_tokens = tokens;
    for (bool on : {false, true}) {
      o.vad = on;
      size_t windows = 0;
      double skipped = 0.0;
      const double ms = time_ms(1, [&] {
        auto t = (*executor)->transcribe(paused, o);
        if (!t.ok()) {
          keep(t.status());
          return;
        }
        windows = t->segments.size();  // one segment per window without timestamps
        skipped = t->vad_skipped_seconds;
      });
      if (!status.ok()) return fail(status);
      vad_result[on ? "with_vad" : "without_vad"] = {{"ms", ms}, {"windows", windows}, {"skipped_s", skipped}};
    }
    vad_result["audio_s"] = static_cast<double>(paused.size()) / 16000.0;
  }
  fs::remove_all(dir);

  const double total_ms = mel_ms + encoder_ms + decoder_ms;
  nlohmann::json out = {{"arch", arch->name},
                        {"threads", mmserve::kernels::cpu_threads()},
                        {"tokens", tokens},
                        {"log_mel_ms", mel_ms},
                        {"encoder_ms", encoder_ms},
                        {"decoder_ms", decoder_ms},
                        {"decoder_ms_per_token", decoder_ms / tokens},
                        {"cross_kv_and_prefill_ms", prefill_ms},
                        {"window_ms", total_ms},
                        {"real_time_factor", total_ms / 30000.0}};
  if (vad) out["transcribe_speech_with_pauses"] = vad_result;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
