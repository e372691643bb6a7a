// whisper_gpu_bench: mmserve's Whisper on the GPU (models/whisper/whisper_cuda.h) on an HF checkpoint, timed as
// bench/hf_whisper_gpu.py times HF on the same checkpoint (bench/run_whisper_gpu_bench.sh runs both and prints
// the table). Prints one JSON object on stdout:
// {"side": "mmserve", "dtype", "encoder_ms": {"W": ms}, "decode": {"storage": {"B": {"ms", "tokens_per_s",
//  "ms_per_step"}}}, "memory": {...}}.
//
//   whisper_gpu_bench --model DIR [--windows 1,16] [--batches 1,16] [--new-tokens 128] [--iters 3]
//                     [--dtype f16|bf16|f32] [--cross-kv same,fp8_e4m3,int8] [--tp-devices 0,1]
// --tp-devices: tensor parallel over these GPUs (models/whisper/whisper_cuda_tp.h, NCCL; one entry is a group of
// one). The encoder is then timed from host mel (encode(), the copy included); decoding is timed as without.
// encoder: encode_on_device() of W random 30 s windows already on the GPU (median of max(iters, 5) after one
// warm-up; each call includes its output allocation and the final stream synchronisation).
// decoding: prefill of B rows with the 4-token prompt, then new_tokens - 1 steps, each row fed its own argmax
// (computed on the host from the logits the step copies back): new_tokens tokens per row, as HF's generate
// with min_new_tokens = max_new_tokens. The encoder is not in it (HF's side gets precomputed encoder outputs).
// Also reported per step: step_call_ms (inside step(): graph replay + logits copy + sync) and argmax_ms.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/whisper/whisper_cuda.h"
#include "models/whisper/whisper_cuda_tp.h"

namespace {

using mmserve::models::WhisperCrossKv;
using mmserve::models::WhisperCudaModel;
using mmserve::models::WhisperCudaOptions;
using mmserve::models::WhisperCudaTpModel;
using mmserve::models::WhisperCudaTpOptions;
using mmserve::models::WhisperModel;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// First index of the row's maximum (what std::max_element and torch.argmax pick), in one pass the compiler
// vectorises: kLanes independent (max, first index) pairs, then the best lane (the lowest index on ties). A
// plain std::max_element is one dependent compare-and-branch per element, about twice as slow here.
int32_t first_argmax(const float* row, int64_t n) {
  constexpr int64_t kLanes = 16;
  float best[kLanes];
  int32_t at[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) {
    best[j] = -std::numeric_limits<float>::infinity();
    at[j] = static_cast<int32_t>(j);
  }
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const bool more = row[i + j] > best[j];
      best[j] = more ? row[i + j] : best[j];
      at[j] = more ? static_cast<int32_t>(i + j) : at[j];
    }
  }
  float m = -std::numeric_limits<float>::infinity();
  int32_t index = 0;
  bool found = false;
  for (int64_t j = 0; j < kLanes; ++j) {  // a lane that never moved holds -inf at index j: only a real -inf
    if (j >= whole) break;                // row reaches it, and then index j is that lane's first -inf
    if (!found || best[j] > m || (best[j] == m && at[j] < index)) {
      m = best[j];
      index = at[j];
      found = true;
    }
  }
  for (int64_t i = whole; i < n; ++i) {
    if (!found || row[i] > m) {
      m = row[i];
      index = static_cast<int32_t>(i);
      found = true;
    }
  }
  return index;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "whisper_gpu_bench: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, dtype_name = "f16", cross = "same";
  std::vector<int64_t> windows = {1, 16}, batches = {1, 16}, tp_devices;
  int64_t new_tokens = 128;
  int iters = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model")
      model_dir = next();
    else if (a == "--windows")
      windows = parse_list(next());
    else if (a == "--batches")
      batches = parse_list(next());
    else if (a == "--new-tokens")
      new_tokens = std::stoll(next());
    else if (a == "--iters")
      iters = std::max(1, std::stoi(next()));
    else if (a == "--dtype")
      dtype_name = next();
    else if (a == "--cross-kv")
      cross = next();
    else if (a == "--tp-devices")
      tp_devices = parse_list(next());
    else
      return fail("unknown argument " + a);
  }
  if (model_dir.empty()) return fail("--model DIR is required");
  const mmserve::DType dtype = dtype_name == "bf16"  ? mmserve::DType::kBF16
                               : dtype_name == "f32" ? mmserve::DType::kF32
                                                     : mmserve::DType::kF16;
  std::vector<WhisperCrossKv> storages;
  {
    std::stringstream in(cross);
    for (std::string item; std::getline(in, item, ',');) {
      if (item == "same")
        storages.push_back(WhisperCrossKv::kSame);
      else if (item == "fp8_e4m3" || item == "fp8")
        storages.push_back(WhisperCrossKv::kFp8E4M3);
      else if (item == "int8")
        storages.push_back(WhisperCrossKv::kInt8);
      else
        return fail("unknown --cross-kv " + item);
    }
  }
  const int64_t max_batch =
      std::max(*std::max_element(windows.begin(), windows.end()), *std::max_element(batches.begin(), batches.end()));
  const std::vector<int32_t> prompt = {50258, 50259, 50359, 50363};

  double t0 = now_ms();
  auto host = WhisperModel::load(model_dir);
  if (!host.ok()) return fail(host.status().to_string());
  std::fprintf(stderr, "host model loaded in %.1f s\n", (now_ms() - t0) / 1000);
  const mmserve::models::WhisperConfig& c = (*host)->config();

  nlohmann::json result = {{"side", "mmserve"},        {"dtype", dtype_name},
                           {"new_tokens", new_tokens}, {"prompt", prompt},
                           {"d_model", c.d_model},     {"decoder_layers", c.decoder_layers},
                           {"tp_devices", tp_devices}, {"encoder_input", tp_devices.empty() ? "device" : "host"}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t si = 0; si < storages.size(); ++si) {
    WhisperCudaOptions o;
    o.dtype = dtype;
    o.max_batch = max_batch;
    o.buckets = batches;
    o.cross_kv = storages[si];
    t0 = now_ms();
    std::unique_ptr<WhisperCudaModel> single;
    std::unique_ptr<WhisperCudaTpModel> group;
    if (tp_devices.empty()) {
      auto model = WhisperCudaModel::load(**host, o);
      if (!model.ok()) return fail(model.status().to_string());
      single = std::move(*model);
    } else {
      WhisperCudaTpOptions tp;
      tp.rank = o;
      tp.devices.assign(tp_devices.begin(), tp_devices.end());
      auto model = WhisperCudaTpModel::load(**host, tp);
      if (!model.ok()) return fail(model.status().to_string());
      group = std::move(*model);
    }
    mmserve::models::WhisperBackend& m = single ? static_cast<mmserve::models::WhisperBackend&>(*single) : *group;
    const mmserve::models::WhisperCudaMemory& memory = single ? single->memory() : group->rank(0).memory();
    const std::string storage = mmserve::models::whisper_cross_kv_name(storages[si]);
    std::fprintf(stderr, "GPU model (%s cross K/V) ready in %.1f s: %s%s\n", storage.c_str(), (now_ms() - t0) / 1000,
                 memory.to_string().c_str(), group ? " (rank 0 of the group)" : "");
    nlohmann::json& mem = result["memory"][storage];
    mem = {{"weights", memory.weight_bytes},
           {"self_kv", memory.self_kv_bytes},
           {"cross_kv", memory.cross_kv_bytes},
           {"cross_kv_uncompressed", memory.cross_kv_bytes_same},
           {"activations", memory.activation_bytes},
           {"workspace", memory.workspace_bytes},
           {"graphs", memory.graph_bytes}};

    // Random log-mel windows on the GPU, as HF's side has them.
    const int64_t window_floats = c.num_mel_bins * 3000;
    std::vector<float> mel_host(static_cast<size_t>(max_batch * window_floats));
    for (float& v : mel_host) v = normal(rng);
    float* mel = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&mel), mel_host.size() * sizeof(float)) != cudaSuccess) {
      return fail("cudaMalloc of the mel failed");
    }
    cudaMemcpy(mel, mel_host.data(), mel_host.size() * sizeof(float), cudaMemcpyHostToDevice);
    auto encode = [&](int64_t w) {
      if (single) return single->encode_on_device(mel, w, 3000);
      return group->encode(mmserve::Tensor(mel_host.data(), mmserve::DType::kF32, {w, c.num_mel_bins, 3000}));
    };

    if (si == 0) {
      for (int64_t w : windows) {
        std::vector<double> times;
        for (int it = 0; it < std::max(iters, 5) + 1; ++it) {
          const double start = now_ms();
          auto encoded = encode(w);
          if (!encoded.ok()) return fail(encoded.status().to_string());
          if (it > 0) times.push_back(now_ms() - start);
        }
        result["encoder_ms"][std::to_string(w)] = median(times);
        std::fprintf(stderr, "encoder %lld windows: %.2f ms\n", static_cast<long long>(w), median(times));
      }
    }
    for (int64_t b : batches) {
      auto encoded = encode(b);
      if (!encoded.ok()) return fail(encoded.status().to_string());
      std::vector<int64_t> rows_windows(b);
      for (int64_t i = 0; i < b; ++i) rows_windows[i] = i;
      const std::vector<std::vector<int32_t>> prompts(b, prompt);
      // step_times: inside step() (replay + logits copy), argmax_times: the host argmax of all rows, per step.
      std::vector<double> times, step_times, argmax_times;
      std::vector<float> logits;
      std::vector<int32_t> next(b);
      for (int it = 0; it < iters + 1; ++it) {
        auto rows = m.new_rows(static_cast<int64_t>(prompt.size()) + new_tokens);
        if (!rows.ok()) return fail(rows.status().to_string());
        const double start = now_ms();
        mmserve::Status s = (*rows)->prefill(*encoded, rows_windows, prompts, logits);
        for (int64_t t = 0; s.ok(); ++t) {
          const double argmax_start = now_ms();
          for (int64_t r = 0; r < b; ++r) next[r] = first_argmax(logits.data() + r * c.vocab_size, c.vocab_size);
          if (it > 0) argmax_times.push_back(now_ms() - argmax_start);
          if (t + 1 == new_tokens) break;
          const double step_start = now_ms();
          s = (*rows)->step(next, logits);
          if (it > 0) step_times.push_back(now_ms() - step_start);
        }
        if (!s.ok()) return fail(s.to_string());
        if (it > 0) times.push_back(now_ms() - start);
      }
      const double ms = median(times);
      result["decode"][storage][std::to_string(b)] = {{"ms", ms},
                                                      {"tokens_per_s", b * new_tokens / (ms / 1000.0)},
                                                      {"ms_per_step", ms / new_tokens},
                                                      {"step_call_ms", median(step_times)},
                                                      {"argmax_ms", median(argmax_times)}};
      std::fprintf(stderr, "decode (%s) batch %lld: %.1f ms, %.1f tokens/s, step() %.3f ms, argmax %.3f ms\n",
                   storage.c_str(), static_cast<long long>(b), ms, b * new_tokens / (ms / 1000.0), median(step_times),
                   median(argmax_times));
    }
    cudaFree(mel);
  }
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
