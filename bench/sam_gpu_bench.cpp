// SAM's image encoder and prompt decoder timed on the GPU (models/sam/sam_cuda.h) or the CPU (models/sam/sam.h), the
// mmserve side of bench/run_sam_gpu_bench.sh (HF's side: bench/hf_sam_gpu.py, on the same saved weights).
//
//   sam_gpu_bench --model DIR [--device cuda|cpu] [--dtype bf16|f16|f32] [--batches 1,4] [--iters 20] [--threads 16]
//                 [--parts encoder,decoder]   (GPU: "decoder" alone skips timing the encoder, for a profiler's run)
// What is timed (median of --iters after 3 warm-ups), as the HF script does:
//   encoder  B random images already on the device -> embeddings on the device (encode_images_on_device: one graph
//            replay), CUDA events on the model's stream; on the CPU, SamModel::encode_images (wall clock);
//   decoder  one click, multimask, against the embedding on the device (decode_on_device: the tokens' upload, one
//            graph replay, and the three low-res masks and scores copied back to the host; HF's masks stay on the
//            GPU, so ours pays one more copy); on the CPU, SamModel::decode.
// Prints one JSON object on stdout.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "models/sam/sam.h"
#include "models/sam/sam_cuda.h"

namespace {

using mmserve::DType;
using mmserve::Status;

struct Args {
  std::string model, device = "cuda", dtype = "bf16", batches = "1", parts = "encoder,decoder";
  int iters = 20, threads = 16;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Median and min milliseconds of fn() (3 warm-ups); `stream` non-null: CUDA events around each call on it.
std::pair<double, double> timed(const std::function<bool()>& fn, int iters, cudaStream_t stream, bool gpu) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  cudaEvent_t start = nullptr, end = nullptr;
  if (gpu) {
    cudaEventCreate(&start);
    cudaEventCreate(&end);
  }
  for (int i = 0; i < iters; ++i) {
    if (gpu) {
      cudaEventRecord(start, stream);
      if (!fn()) return {-1, -1};
      cudaEventRecord(end, stream);
      cudaEventSynchronize(end);
      float t = 0;
      cudaEventElapsedTime(&t, start, end);
      ms.push_back(t);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      if (!fn()) return {-1, -1};
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (gpu) {
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
  return {median(ms), *std::min_element(ms.begin(), ms.end())};
}

std::vector<float> random_pixels(size_t n) {
  std::mt19937 rng(0);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

int fail(const Status& s) {
  std::fprintf(stderr, "sam_gpu_bench: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--device") a.device = v;
    else if (k == "--dtype") a.dtype = v;
    else if (k == "--batches") a.batches = v;
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--parts") a.parts = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "usage: sam_gpu_bench --model DIR [--device cuda|cpu] [--dtype bf16|f16|f32] "
                         "[--batches 1,4] [--iters 20] [--threads 16] [--parts encoder,decoder]\n");
    return 2;
  }
  std::vector<int64_t> batches;
  for (size_t p = 0; p < a.batches.size();) {
    const size_t comma = a.batches.find(',', p);
    batches.push_back(std::stoll(a.batches.substr(p, comma - p)));
    p = comma == std::string::npos ? a.batches.size() : comma + 1;
  }
  nlohmann::json out = {{"side", "mmserve"}, {"model", a.model}, {"device", a.device}, {"dtype", a.dtype},
                        {"iters", a.iters}};
  nlohmann::json rows = nlohmann::json::array();
  mmserve::models::SamPrompt click;
  const bool gpu = a.device == "cuda";

  if (gpu) {
    mmserve::models::SamCudaOptions options;
    options.dtype = a.dtype == "f32" ? DType::kF32 : a.dtype == "f16" ? DType::kF16 : DType::kBF16;
    options.buckets = batches;
    const auto load_start = std::chrono::steady_clock::now();
    auto model = mmserve::models::SamCudaModel::load(a.model, options);
    if (!model.ok()) return fail(model.status());
    out["load_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    const mmserve::models::SamConfig& c = (*model)->config();
    const int64_t image_floats = c.vision.num_channels * c.vision.image_size * c.vision.image_size;
    const int64_t bmax = *std::max_element(batches.begin(), batches.end());
    std::vector<float> host = random_pixels(static_cast<size_t>(bmax * image_floats));
    float* pixels = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&pixels), host.size() * sizeof(float)) != cudaSuccess) return 1;
    cudaMemcpy(pixels, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaStream_t stream = (*model)->stream();
    const float* rows_ptr = nullptr;
    const bool time_encoder = a.parts.find("encoder") != std::string::npos;
    if (!time_encoder) {  // the decoder alone (a profiler's run): image 0's embedding once
      auto r = (*model)->encode_images_on_device(pixels, 1);
      if (!r.ok()) return fail(r.status());
      rows_ptr = *r;
    }
    for (int64_t b : time_encoder ? batches : std::vector<int64_t>{}) {
      auto [med, best] = timed(
          [&] {
            auto r = (*model)->encode_images_on_device(pixels, b);
            if (r.ok()) rows_ptr = *r;
            return r.ok();
          },
          a.iters, stream, true);
      rows.push_back({{"part", "encoder"}, {"batch", b}, {"median_ms", med}, {"min_ms", best},
                      {"per_image_ms", med / static_cast<double>(b)}});
      std::fprintf(stderr, "encoder b%lld: %.3f ms\n", static_cast<long long>(b), med);
    }
    // The decoder against image 0's embedding, copied aside (the encoder's buffer is reused by later encodes).
    float* embedding = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&embedding), sizeof(float) * (*model)->embedding_floats());
    cudaMemcpy(embedding, rows_ptr, sizeof(float) * (*model)->embedding_floats(), cudaMemcpyDeviceToDevice);
    click.points = {{c.prompt.image_size * 0.5f, c.prompt.image_size * 0.37f}};
    click.labels = {1};
    auto [med, best] =
        timed([&] { return (*model)->decode_on_device(embedding, click, true).ok(); }, a.iters, stream, true);
    rows.push_back({{"part", "decoder"}, {"batch", 1}, {"median_ms", med}, {"min_ms", best}, {"per_image_ms", med}});
    std::fprintf(stderr, "decoder: %.3f ms\n", med);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    out["gpu"] = prop.name;
    const mmserve::models::SamCudaMemory& m = (*model)->memory();
    out["memory_mib"] = {{"weights", m.weight_bytes >> 20}, {"activations", m.activation_bytes >> 20},
                         {"graphs", m.graph_bytes >> 20}};
    cudaFree(pixels);
    cudaFree(embedding);
  } else {
    auto model = mmserve::models::SamModel::load(a.model, a.threads);
    if (!model.ok()) return fail(model.status());
    const mmserve::models::SamConfig& c = (*model)->config();
    const int64_t image_floats = c.vision.num_channels * c.vision.image_size * c.vision.image_size;
    std::vector<float> embedding(static_cast<size_t>((*model)->embedding_floats()));
    for (int64_t b : batches) {
      std::vector<float> pixels = random_pixels(static_cast<size_t>(b * image_floats));
      std::vector<float> out_rows(static_cast<size_t>(b * (*model)->embedding_floats()));
      auto [med, best] = timed([&] { return (*model)->encode_images(pixels.data(), b, out_rows.data()).ok(); },
                               a.iters, nullptr, false);
      std::copy_n(out_rows.begin(), embedding.size(), embedding.begin());
      rows.push_back({{"part", "encoder"}, {"batch", b}, {"median_ms", med}, {"min_ms", best},
                      {"per_image_ms", med / static_cast<double>(b)}});
      std::fprintf(stderr, "encoder b%lld: %.1f ms\n", static_cast<long long>(b), med);
    }
    click.points = {{c.prompt.image_size * 0.5f, c.prompt.image_size * 0.37f}};
    click.labels = {1};
    auto [med, best] =
        timed([&] { return (*model)->decode(embedding.data(), click, true).ok(); }, a.iters, nullptr, false);
    rows.push_back({{"part", "decoder"}, {"batch", 1}, {"median_ms", med}, {"min_ms", best}, {"per_image_ms", med}});
    out["threads"] = a.threads;
  }
  out["results"] = rows;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
