// Silero VAD v5 forward and get_speech_timestamps (see silero_vad.h).
//
// References, snakers4/silero-vad: src/silero_vad/tinygrad_model.py (TinySileroVAD.__call__, the v5 network
// written out over the same safetensors names), src/silero_vad/utils_vad.py (OnnxWrapper.__call__: the
// 64-sample context; get_speech_timestamps: zero padding of the last window and the span state machine, as of
// silero-vad 6.x (utils_vad.py @ 0a7d1f6c): neg_threshold = max(threshold - 0.15, 0.01), and a span over
// max_speech_s is cut at the LONGEST pause over 98 ms inside it (use_max_poss_sil_at_max_speech = True);
// earlier releases cut elsewhere).
// Tests: tests/unit/models/silero_vad_test.cpp.
#include "models/vad/silero_vad.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/safetensors.h"
#include "kernels/common/cpu_math.h"
#include "kernels/gemm/gemm.h"

extern "C" const uint8_t mmserve_silero_vad_begin[], mmserve_silero_vad_end[];

namespace mmserve::models {
namespace {

constexpr int64_t kFilter = 256;                                      // STFT filter length (n_fft)
constexpr int64_t kHop = 128;                                         // STFT stride
constexpr int64_t kPad = 64;                                          // right reflection padding
constexpr int64_t kBins = kFilter / 2 + 1;                            // 129 magnitude bins (the "cutoff")
constexpr int64_t kInput = SileroVad::kContext + SileroVad::kWindow;  // 576
constexpr int64_t kPadded = kInput + kPad;                            // 640
constexpr int64_t kFrames = (kPadded - kFilter) / kHop + 1;           // 4
constexpr int64_t kHidden = 128;                                      // LSTM cell size
constexpr int64_t kConvLayers = 4;
// Windows encoded per batch of GEMMs: big enough for efficient GEMMs, small enough (~2 MB of scratch) to stay
// in cache and to bound memory for hours of audio.
constexpr int64_t kBlockWindows = 128;
// get_speech_timestamps' min_silence_at_max_speech default (ms); use_max_poss_sil_at_max_speech = True.
constexpr double kMinSilenceAtMaxSpeechMs = 98;

struct ConvShape {
  int64_t in, out, stride;
};
// SileroVadBlock convs: kernel 3, padding 1.
constexpr std::array<ConvShape, kConvLayers> kConvs = {{{kBins, 128, 1}, {128, 64, 2}, {64, 64, 2}, {64, 128, 1}}};

// Independent partial sums so the loop vectorises without reassociation flags (the result is a fixed
// function of the inputs: the same on every run and build of one ISA clone).
MMSERVE_CPU_CLONES
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
};

std::vector<Spec> weight_specs() {
  std::vector<Spec> specs = {{"stft_conv.weight", {2 * kBins, 1, kFilter}}};
  for (int64_t l = 0; l < kConvLayers; ++l) {
    const std::string prefix = "conv" + std::to_string(l + 1);
    specs.push_back({prefix + ".weight", {kConvs[l].out, kConvs[l].in, 3}});
    specs.push_back({prefix + ".bias", {kConvs[l].out}});
  }
  specs.push_back({"lstm_cell.weight_ih", {4 * kHidden, kHidden}});
  specs.push_back({"lstm_cell.weight_hh", {4 * kHidden, kHidden}});
  specs.push_back({"lstm_cell.bias_ih", {4 * kHidden}});
  specs.push_back({"lstm_cell.bias_hh", {4 * kHidden}});
  specs.push_back({"final_conv.weight", {1, kHidden, 1}});
  specs.push_back({"final_conv.bias", {1}});
  return specs;
}

}  // namespace

// f32 copies in PyTorch's layouts: conv weights [out, in, 3] are rows of in * 3 (channel-major, tap-minor),
// which is exactly the im2col order used below.
struct SileroVad::Weights {
  std::vector<float> stft;  // [258, 256]: rows 0..128 the real parts, 129..257 the imaginary parts
  std::array<std::vector<float>, kConvLayers> conv_w, conv_b;
  std::vector<float> w_ih, w_hh, b_ih, b_hh;  // [512, 128], [512]: gates i, f, g, o
  std::vector<float> final_w;                 // [128]
  float final_b = 0;
};

SileroVad::SileroVad() = default;
SileroVad::~SileroVad() = default;

StatusOr<std::unique_ptr<SileroVad>> SileroVad::from_safetensors(const SafetensorsFile& file,
                                                                 const std::string& label) {
  // Every problem at once (as check_weights does for model directories), so a broken conversion is fixed in
  // one round.
  const std::vector<Spec> specs = weight_specs();
  std::vector<std::string> missing, misshaped, wrong_dtype, unexpected;
  for (const Spec& spec : specs) {
    const TensorInfo* info = file.find(spec.name);
    if (info == nullptr) {
      missing.push_back(spec.name);
    } else if (info->shape != spec.shape) {
      misshaped.push_back(spec.name + " " + shape_string(info->shape) + " (expected " + shape_string(spec.shape) + ")");
    } else if (info->dtype != DType::kF32) {
      wrong_dtype.push_back(spec.name + " " + dtype_name(info->dtype) + " (expected f32)");
    }
  }
  for (const auto& [name, info] : file.tensors()) {
    bool listed = false;
    for (const Spec& spec : specs) listed = listed || name == spec.name;
    if (!listed) unexpected.push_back(name);
  }
  if (!missing.empty() || !misshaped.empty() || !wrong_dtype.empty() || !unexpected.empty()) {
    std::string message = label + ": not Silero VAD v5 16 kHz weights:";
    auto append = [&message](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      message += std::string(" ") + std::to_string(names.size()) + " " + what + ":";
      for (size_t i = 0; i < names.size(); ++i) message += (i ? ", " : " ") + names[i];
      message += ";";
    };
    append("missing", missing);
    append("mis-shaped", misshaped);
    append("not f32", wrong_dtype);
    append("unexpected", unexpected);
    message.pop_back();
    return missing.empty() ? invalid_argument(message) : not_found(message);
  }

  auto copy = [&file](const std::string& name) {
    const TensorInfo* info = file.find(name);
    std::vector<float> v(static_cast<size_t>(info->numel()));
    std::memcpy(v.data(), info->data, v.size() * sizeof(float));  // the mapping may be unaligned
    return v;
  };
  auto weights = std::make_unique<Weights>();
  weights->stft = copy("stft_conv.weight");
  for (int64_t l = 0; l < kConvLayers; ++l) {
    const std::string prefix = "conv" + std::to_string(l + 1);
    weights->conv_w[l] = copy(prefix + ".weight");
    weights->conv_b[l] = copy(prefix + ".bias");
  }
  weights->w_ih = copy("lstm_cell.weight_ih");
  weights->w_hh = copy("lstm_cell.weight_hh");
  weights->b_ih = copy("lstm_cell.bias_ih");
  weights->b_hh = copy("lstm_cell.bias_hh");
  weights->final_w = copy("final_conv.weight");
  weights->final_b = copy("final_conv.bias")[0];
  std::vector<const std::vector<float>*> all = {&weights->stft, &weights->w_ih, &weights->w_hh,
                                                &weights->b_ih, &weights->b_hh, &weights->final_w};
  for (int64_t l = 0; l < kConvLayers; ++l) {
    all.push_back(&weights->conv_w[l]);
    all.push_back(&weights->conv_b[l]);
  }
  for (const std::vector<float>* v : all) {
    if (!std::all_of(v->begin(), v->end(), [](float x) { return std::isfinite(x); }) ||
        !std::isfinite(weights->final_b))
      return invalid_argument(label + ": Silero VAD weights hold a non-finite value");
  }

  std::unique_ptr<SileroVad> vad(new SileroVad());
  vad->weights_ = std::move(weights);
  return vad;
}

StatusOr<std::unique_ptr<SileroVad>> SileroVad::load(const std::string& safetensors_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(safetensors_path));
  return from_safetensors(*file, safetensors_path);
}

StatusOr<std::unique_ptr<SileroVad>> SileroVad::load_default() {
  const size_t size = static_cast<size_t>(mmserve_silero_vad_end - mmserve_silero_vad_begin);
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                   SafetensorsFile::from_buffer(mmserve_silero_vad_begin, size, "<compiled-in silero_vad_16k>"));
  return from_safetensors(*file, "<compiled-in silero_vad_16k>");
}

// The network is split where it becomes recurrent. Everything up to the LSTM's input projection depends only on
// a window's own 576 samples, so it runs for a block of windows at once as GEMMs (the STFT conv over all frames,
// each conv as im2col x weight^T, then W_ih x + b_ih); only W_hh h and the gates run window after window.
// Activations are channel-last here ([window * frames, channels]) so every step is one row-major GEMM.
struct SileroVad::Scratch {
  std::vector<float> frames, spectrum, x, col, y, xproj;
};

// TinySileroVAD.__call__ up to the LSTM cell, for windows [first, first + count): fills s.xproj [count, 512].
void SileroVad::encode_windows(const std::vector<float>& audio, int64_t first, int64_t count, Scratch& s) const {
  const Weights& w = *weights_;
  const int64_t n = static_cast<int64_t>(audio.size());
  // Window i's input is audio[i * 512 - 64, i * 512 + 512): the last 64 samples of the previous input as
  // context (OnnxWrapper; zeros before the first window), zeros past the end (the last window's zero padding
  // in get_speech_timestamps, which then also is the next context). Then x.pad((0, 64), "reflect"):
  // x[576 + k] = x[574 - k], the edge sample not repeated. Its 4 STFT frames start every 128 samples.
  s.frames.resize(static_cast<size_t>(count * kFrames * kFilter));
  float padded[kPadded];
  for (int64_t i = 0; i < count; ++i) {
    const int64_t begin = (first + i) * kWindow - kContext;
    for (int64_t k = 0; k < kInput; ++k) {
      const int64_t src = begin + k;
      padded[k] = (src >= 0 && src < n) ? audio[src] : 0.0f;
    }
    for (int64_t k = 0; k < kPad; ++k) padded[kInput + k] = padded[kInput - 2 - k];
    for (int64_t f = 0; f < kFrames; ++f)
      std::memcpy(&s.frames[(i * kFrames + f) * kFilter], padded + f * kHop, kFilter * sizeof(float));
  }

  // stft_conv (no bias): [count * 4, 258] = frames x stft^T; then sqrt(real^2 + imag^2) over the 129 bins.
  const int64_t rows = count * kFrames;
  s.spectrum.resize(static_cast<size_t>(rows * 2 * kBins));
  kernels::gemm(false, true, rows, 2 * kBins, kFilter, 1.0f, s.frames.data(), kFilter, w.stft.data(), kFilter, 0.0f,
                s.spectrum.data(), 2 * kBins);
  s.x.resize(static_cast<size_t>(rows * kBins));
  for (int64_t r = 0; r < rows; ++r) {
    const float* spec = &s.spectrum[r * 2 * kBins];
    for (int64_t j = 0; j < kBins; ++j)
      s.x[r * kBins + j] = std::sqrt(spec[j] * spec[j] + spec[kBins + j] * spec[kBins + j]);
  }

  // conv1..conv4 (kernel 3, padding 1, strides 1, 2, 2, 1) + ReLU: 4 -> 4 -> 2 -> 1 -> 1 frames per window.
  // im2col row (window i, output frame t) holds input frames t * stride - 1 .. t * stride + 1 of window i only
  // (zeros outside it: each window is convolved on its own), in the weight's [in][tap] order.
  int64_t frames = kFrames;
  for (int64_t l = 0; l < kConvLayers; ++l) {
    const ConvShape& c = kConvs[l];
    const int64_t out_frames = (frames + 2 - 3) / c.stride + 1;
    const int64_t out_rows = count * out_frames;
    s.col.assign(static_cast<size_t>(out_rows * c.in * 3), 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t t = 0; t < out_frames; ++t) {
        float* col = &s.col[(i * out_frames + t) * c.in * 3];
        for (int64_t k = 0; k < 3; ++k) {
          const int64_t src = t * c.stride + k - 1;
          if (src < 0 || src >= frames) continue;
          const float* in = &s.x[(i * frames + src) * c.in];
          for (int64_t ch = 0; ch < c.in; ++ch) col[ch * 3 + k] = in[ch];
        }
      }
    }
    s.y.resize(static_cast<size_t>(out_rows * c.out));
    kernels::gemm(false, true, out_rows, c.out, c.in * 3, 1.0f, s.col.data(), c.in * 3, w.conv_w[l].data(), c.in * 3,
                  0.0f, s.y.data(), c.out);
    for (int64_t r = 0; r < out_rows; ++r) {
      for (int64_t o = 0; o < c.out; ++o) s.y[r * c.out + o] = std::max(s.y[r * c.out + o] + w.conv_b[l][o], 0.0f);
    }
    s.x.swap(s.y);
    frames = out_frames;
  }
  MMSERVE_CHECK(frames == 1, "the encoder must end at one frame per window");

  // The LSTM cell's input half: W_ih x + b_ih, [count, 512].
  s.xproj.resize(static_cast<size_t>(count * 4 * kHidden));
  kernels::gemm(false, true, count, 4 * kHidden, kHidden, 1.0f, s.x.data(), kHidden, w.w_ih.data(), kHidden, 0.0f,
                s.xproj.data(), 4 * kHidden);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t r = 0; r < 4 * kHidden; ++r) s.xproj[i * 4 * kHidden + r] += w.b_ih[r];
  }
}

// The rest of TinySileroVAD.__call__ for one window: LSTMCell(128, 128) (gates = (W_ih x + b_ih) + (W_hh h +
// b_hh), in PyTorch's order i, f, g, o), ReLU, final_conv (1x1), sigmoid; the mean over the single frame is the
// value itself. Updates (h, c).
float SileroVad::lstm_step(const float* xproj, float* h, float* c) const {
  const Weights& w = *weights_;
  float gates[4 * kHidden];
  for (int64_t r = 0; r < 4 * kHidden; ++r) gates[r] = xproj[r] + (dot(&w.w_hh[r * kHidden], h, kHidden) + w.b_hh[r]);
  for (int64_t j = 0; j < kHidden; ++j) {
    const float in_gate = sigmoid(gates[j]);
    const float forget_gate = sigmoid(gates[kHidden + j]);
    const float cell_gate = std::tanh(gates[2 * kHidden + j]);
    const float out_gate = sigmoid(gates[3 * kHidden + j]);
    c[j] = forget_gate * c[j] + in_gate * cell_gate;
    h[j] = out_gate * std::tanh(c[j]);
  }
  float relu_h[kHidden];
  for (int64_t j = 0; j < kHidden; ++j) relu_h[j] = std::max(h[j], 0.0f);
  return sigmoid(dot(w.final_w.data(), relu_h, kHidden) + w.final_b);
}

StatusOr<std::vector<float>> SileroVad::probabilities(const std::vector<float>& audio_16k) const {
  for (size_t i = 0; i < audio_16k.size(); ++i) {
    if (!std::isfinite(audio_16k[i]))
      return invalid_argument("VAD input sample " + std::to_string(i) + " is not finite");
  }
  const int64_t n = static_cast<int64_t>(audio_16k.size());
  const int64_t windows = (n + kWindow - 1) / kWindow;
  std::vector<float> probs(static_cast<size_t>(windows));
  // reset_states(): (h, c) start at zero for every call.
  float h[kHidden] = {}, c[kHidden] = {};
  Scratch scratch;
  for (int64_t first = 0; first < windows; first += kBlockWindows) {
    const int64_t count = std::min(kBlockWindows, windows - first);
    encode_windows(audio_16k, first, count, scratch);
    for (int64_t i = 0; i < count; ++i) probs[first + i] = lstm_step(&scratch.xproj[i * 4 * kHidden], h, c);
  }
  return probs;
}

namespace {

Status check_options(const VadOptions& o) {
  if (!(o.threshold >= 0.0f && o.threshold <= 1.0f))
    return invalid_argument("VAD threshold must be in [0, 1], got " + std::to_string(o.threshold));
  if (o.min_speech_ms < 0 || o.min_silence_ms < 0 || o.speech_pad_ms < 0)
    return invalid_argument("VAD min_speech_ms, min_silence_ms and speech_pad_ms must not be negative");
  if (std::isnan(o.max_speech_s) || o.max_speech_s <= 0)
    return invalid_argument("VAD max_speech_s must be positive (infinity for no limit)");
  return ok_status();
}

// Python's `//` on integers (floor division).
int64_t floor_div2(int64_t v) {
  return v >= 0 ? v / 2 : -((-v + 1) / 2);
}

}  // namespace

StatusOr<std::vector<SpeechSpan>> SileroVad::spans_from_probabilities(const std::vector<float>& probs,
                                                                      int64_t audio_samples,
                                                                      const VadOptions& options) {
  RETURN_IF_ERROR(check_options(options));
  if (audio_samples < 0) return invalid_argument("VAD audio length must not be negative");
  if (static_cast<int64_t>(probs.size()) != (audio_samples + kWindow - 1) / kWindow)
    return invalid_argument("VAD: " + std::to_string(probs.size()) + " probabilities for " +
                            std::to_string(audio_samples) + " samples (one per 512 expected)");

  // get_speech_timestamps, step by step (same names; Python floats are doubles here).
  const double sr = kSampleRate;
  const double threshold = options.threshold;
  const double neg_threshold = std::max(threshold - 0.15, 0.01);
  const double min_speech_samples = sr * options.min_speech_ms / 1000;
  const double speech_pad_samples = sr * options.speech_pad_ms / 1000;
  const double max_speech_samples = sr * options.max_speech_s - kWindow - 2 * speech_pad_samples;
  const double min_silence_samples = sr * options.min_silence_ms / 1000;
  const double min_silence_samples_at_max_speech = sr * kMinSilenceAtMaxSpeechMs / 1000;

  bool triggered = false;
  bool have_current = false;  // Python's `current_speech` dict is non-empty (has 'start')
  int64_t current_start = 0;
  std::vector<SpeechSpan> speeches;
  int64_t temp_end = 0;                  // potential end of a span (tolerating some silence); 0 = none
  int64_t prev_end = 0, next_start = 0;  // span limits used when the maximum span length is reached
  std::vector<std::pair<int64_t, int64_t>> possible_ends;  // (silence start, silence duration)

  for (size_t i = 0; i < probs.size(); ++i) {
    const double speech_prob = probs[i];
    const int64_t pos = kWindow * static_cast<int64_t>(i);
    if (speech_prob >= threshold && temp_end != 0) {
      const int64_t sil_dur = pos - temp_end;
      if (sil_dur > min_silence_samples_at_max_speech) possible_ends.emplace_back(temp_end, sil_dur);
      temp_end = 0;
      if (next_start < prev_end) next_start = pos;
    }

    if (speech_prob >= threshold && !triggered) {
      triggered = true;
      current_start = pos;
      have_current = true;
      continue;
    }

    if (triggered && pos - current_start > max_speech_samples) {
      if (!possible_ends.empty()) {
        // use_max_poss_sil_at_max_speech: the longest silence (Python's max keeps the first of equals).
        auto best = possible_ends.begin();
        for (auto it = possible_ends.begin(); it != possible_ends.end(); ++it)
          if (it->second > best->second) best = it;
        prev_end = best->first;
        const int64_t dur = best->second;
        speeches.push_back({current_start, prev_end});
        have_current = false;
        next_start = prev_end + dur;
        if (next_start < prev_end + pos) {  // the reference's condition, kept as written
          current_start = next_start;
          have_current = true;
        } else {
          triggered = false;
        }
        std::erase_if(possible_ends, [&](const auto& e) { return !(e.first > next_start); });
        prev_end = next_start = temp_end = 0;
      } else {
        speeches.push_back({current_start, pos});
        have_current = false;
        prev_end = next_start = temp_end = 0;
        triggered = false;
        possible_ends.clear();
        continue;
      }
    }

    if (speech_prob < neg_threshold && triggered) {
      if (temp_end == 0) temp_end = pos;
      if (pos - temp_end < min_silence_samples) continue;
      if (temp_end - current_start > min_speech_samples) speeches.push_back({current_start, temp_end});
      have_current = false;
      prev_end = next_start = temp_end = 0;
      triggered = false;
      possible_ends.clear();
      continue;
    }
  }

  if (have_current && audio_samples - current_start > min_speech_samples)
    speeches.push_back({current_start, audio_samples});

  // Padding: speech_pad_samples on each side, or half the gap when two spans are closer than two pads.
  for (size_t i = 0; i < speeches.size(); ++i) {
    SpeechSpan& speech = speeches[i];
    if (i == 0) speech.start = static_cast<int64_t>(std::max(0.0, speech.start - speech_pad_samples));
    if (i + 1 != speeches.size()) {
      SpeechSpan& next = speeches[i + 1];
      const int64_t silence_duration = next.start - speech.end;
      if (silence_duration < 2 * speech_pad_samples) {
        speech.end += floor_div2(silence_duration);
        next.start = std::max<int64_t>(0, next.start - floor_div2(silence_duration));
      } else {
        speech.end = static_cast<int64_t>(std::min<double>(audio_samples, speech.end + speech_pad_samples));
        next.start = static_cast<int64_t>(std::max(0.0, next.start - speech_pad_samples));
      }
    } else {
      speech.end = static_cast<int64_t>(std::min<double>(audio_samples, speech.end + speech_pad_samples));
    }
  }
  return speeches;
}

StatusOr<std::vector<SpeechSpan>> SileroVad::speech_spans(const std::vector<float>& audio_16k,
                                                          const VadOptions& options) const {
  RETURN_IF_ERROR(check_options(options));  // before the forward, so bad options cost nothing
  ASSIGN_OR_RETURN(std::vector<float> probs, probabilities(audio_16k));
  return spans_from_probabilities(probs, static_cast<int64_t>(audio_16k.size()), options);
}

}  // namespace mmserve::models
