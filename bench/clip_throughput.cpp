// clip_throughput: images/s and texts/s of mmserve's CLIP at given batch sizes, on a real HF checkpoint
// (bench/run_clip_cpu_bench.sh and run_clip_gpu_bench.sh write random-weight checkpoints with HF and time HF
// on the same weights in the same run). Prints one JSON object:
// {"threads": N, "device", "dtype", "results": [{"tower", "batch", "median_ms", "per_s"}]}.
//
//   clip_throughput --model DIR [--threads N] [--batches 1,16] [--iters 20] [--seq 77]
//                   [--device cpu|cuda[:N]] [--dtype bf16|f16|f32] [--tower vision|text|both] [--input device|host]
//                   [--tp-devices 0,1] [--pipeline-devices 0,1] [--micro-batches 8,4] [--no-overlap]
// --pipeline-devices: two pipeline stages (micro-batches of --micro-batches VISION,TEXT; --no-overlap runs each
// micro-batch through both stages before the next, the baseline for the overlap).
// --tp-devices: tensor parallel over these GPUs (NCCL; one entry is a group of one, the NCCL path on one GPU).
// On cuda, images are timed from pixels already on the GPU (`--input device`, as HF's benchmark gives
// torch tensors on the GPU); `--input host` adds the host-to-device copy of the f32 pixels; `--input levels` gives
// 8-bit levels in one host buffer per image (what the server's batches hold for decoded images) and the
// executor's level path (a quarter of the bytes copied, expanded on the GPU). Each call
// includes the copy of the embeddings back to the host and the stream synchronisation.
// `--input png` feeds 224x224-class PNG files (the pictures `mmserve bench` sends, one image a request) through the
// model's own preparer and executor.run(), as the server does minus HTTP: a thread prepares the requests (with
// `--image-decode stage`, the default, that submits each PNG to the GPU decode stage) up to 4 batches ahead while the
// main thread runs batch after batch; `--image-decode batch` decodes inside run(). The ceiling of a server with that
// image_decode mode and one instance; per_s from the median batch.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <nlohmann/json.hpp>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/synthetic_image.h"
#include "engine/clip_executor.h"
#include "engine/clip_inputs.h"
#include "frontends/image/png_encode.h"
#if MMSERVE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif
#include "kernels/common/blas_core.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double time_ms(int iters, Fn&& fn) {
  fn();  // warm-up (first-touch of the arena, OpenBLAS thread start)
  fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(times);
}

// --input png: `iters` batches of `batch` one-image requests through ClipInputs::prepare (a producer thread, up to
// kAhead batches ahead) and executor.run() (this thread). Returns the median ms per batch.
double time_png_batches(mmserve::engine::ClipExecutor& exec, const mmserve::engine::InputPreparer& preparer,
                        const std::vector<std::string>& pngs, int64_t batch, int iters) {
  using mmserve::engine::BatchItem;
  using mmserve::engine::ModelInput;
  constexpr size_t kAhead = 4;
  const int total = iters + 2;  // two warm-up batches, as time_ms
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::vector<std::unique_ptr<ModelInput>>> ready;
  std::thread producer([&] {
    for (int b = 0; b < total; ++b) {
      std::vector<std::unique_ptr<ModelInput>> inputs;
      for (int64_t i = 0; i < batch; ++i) {
        std::vector<mmserve::engine::InputItem> items(1);
        items[0].kind = mmserve::engine::InputKind::kImageBytes;
        items[0].image_bytes = pngs[static_cast<size_t>(b * batch + i) % pngs.size()];
        auto prepared = preparer.prepare(items, nullptr);
        if (!prepared.ok()) {
          std::fprintf(stderr, "prepare: %s\n", prepared.status().to_string().c_str());
          std::exit(1);
        }
        inputs.push_back(std::move(prepared->input));
      }
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return ready.size() < kAhead; });
      ready.push_back(std::move(inputs));
      changed.notify_all();
    }
  });
  std::vector<double> times;
  for (int b = 0; b < total; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<ModelInput>> inputs;
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return !ready.empty(); });
      inputs = std::move(ready.front());
      ready.pop_front();
      changed.notify_all();
    }
    std::vector<BatchItem> items;
    for (auto& input : inputs) items.push_back({input.get(), input.get(), {}});
    mmserve::engine::BatchHooks hooks;
    hooks.finish = [](size_t, mmserve::StatusOr<std::shared_ptr<const mmserve::engine::ModelOutput>> out, double) {
      if (!out.ok()) {
        std::fprintf(stderr, "run: %s\n", out.status().to_string().c_str());
        std::exit(1);
      }
    };
    exec.run(items, hooks);
    if (b >= 2) times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  producer.join();
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  mmserve::kernels::reexec_with_blas_coretype_if_needed(argv);
  std::string model_dir;
  int threads = 0, iters = 20, seq = 77;
  std::string device_name = "cpu", dtype_name = "", tower = "both", input = "device", image_decode = "stage";
  std::vector<int64_t> batches = {1, 16};
  std::vector<int> tp_devices, pipeline_devices;
  int64_t vision_micro = 8, text_micro = 4;
  bool overlap = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model")
      model_dir = next();
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--iters")
      iters = std::atoi(next().c_str());
    else if (a == "--seq")
      seq = std::atoi(next().c_str());
    else if (a == "--device")
      device_name = next();
    else if (a == "--dtype")
      dtype_name = next();
    else if (a == "--tower")
      tower = next();
    else if (a == "--input")
      input = next();
    else if (a == "--image-decode")
      image_decode = next();
    else if (a == "--tp-devices" || a == "--pipeline-devices" || a == "--micro-batches") {
      std::string list = next();
      std::vector<int> values;
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        const std::string item = list.substr(p, q == std::string::npos ? std::string::npos : q - p);
        if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) {
          std::fprintf(stderr, "%s: '%s' is not a comma list of non-negative integers\n", a.c_str(), list.c_str());
          return 2;
        }
        values.push_back(std::atoi(item.c_str()));
        p = q == std::string::npos ? list.size() : q + 1;
      }
      if (values.empty() || (a == "--micro-batches" && values.size() != 2)) {
        std::fprintf(stderr, "%s: expected %s\n", a.c_str(),
                     a == "--micro-batches" ? "VISION,TEXT" : "a comma list of GPU ordinals");
        return 2;
      }
      if (a == "--tp-devices") tp_devices = values;
      if (a == "--pipeline-devices") pipeline_devices = values;
      if (a == "--micro-batches") vision_micro = values[0], text_micro = values[1];
    } else if (a == "--no-overlap") {
      overlap = false;
    } else if (a == "--batches") {
      batches.clear();
      std::string list = next();
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        batches.push_back(std::atoll(list.substr(p, q - p).c_str()));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (model_dir.empty()) {
    std::fprintf(stderr, "usage: clip_throughput --model DIR [--threads N] [--batches 1,16] [--iters 20]\n");
    return 2;
  }
  mmserve::engine::ExecutorOptions options;
  options.threads = threads;
  options.batch_size_max = *std::max_element(batches.begin(), batches.end());
  auto device = mmserve::parse_device(device_name);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", device.status().to_string().c_str());
    return 2;
  }
  options.device = *device;
  if (!dtype_name.empty()) {
    std::string upper = dtype_name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto dtype = mmserve::dtype_from_safetensors(upper);
    if (!dtype) {
      std::fprintf(stderr, "unknown dtype %s\n", dtype_name.c_str());
      return 2;
    }
    options.dtype = *dtype;
  }
  // Exactly the measured batch sizes get graphs (plus the largest).
  options.batch_buckets = batches;
  options.tp_devices = tp_devices;
  options.pipeline_devices = pipeline_devices;
  mmserve::engine::ClipOptions clip;
  clip.vision_micro_batch = vision_micro;
  clip.text_micro_batch = text_micro;
  clip.pipeline_overlap = overlap;
  if (input == "png") {
    if (image_decode != "stage" && image_decode != "batch") {
      std::fprintf(stderr, "--image-decode: stage or batch (the preprocess mode decodes on a pool the bench lacks)\n");
      return 2;
    }
    clip.image_decode = image_decode == "stage" ? mmserve::engine::ClipOptions::ImageDecode::kStage
                                                : mmserve::engine::ClipOptions::ImageDecode::kBatch;
  }
  auto executor = mmserve::engine::ClipExecutor::create(model_dir, options, clip);
  if (!executor.ok()) {
    std::fprintf(stderr, "%s\n", executor.status().to_string().c_str());
    return 1;
  }
  auto& exec = **executor;
  const int64_t size = exec.image_size();
  std::unique_ptr<mmserve::engine::ClipInputs> preparer;
  std::vector<std::string> pngs;  // --input png: the 4 pictures `mmserve bench` sends at this size
  if (input == "png") {
    auto made = mmserve::engine::ClipInputs::create(model_dir, exec, mmserve::engine::PreparerOptions{});
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().to_string().c_str());
      return 1;
    }
    preparer = std::move(*made);
    for (unsigned seed = 1; seed <= 4; ++seed) {  // bench_payloads.cpp's seeds
      const int side = static_cast<int>(size);
      const std::vector<uint8_t> px = mmserve::synthetic_image_pixels(side, side, seed);
      pngs.push_back(mmserve::image::encode_png(px.data(), side, side, 3));
    }
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  nlohmann::json results = nlohmann::json::array();
  for (int64_t batch : batches) {
    double ms = 0;
    if (tower != "text") {
      std::vector<float> pixels(static_cast<size_t>(batch * 3 * size * size));
      for (float& p : pixels) p = normal(rng);
      const float* device_pixels = nullptr;
#if MMSERVE_HAS_CUDA
      if (!options.device.is_cpu() && input == "device") {
        void* p = nullptr;
        if (cudaMalloc(&p, pixels.size() * sizeof(float)) != cudaSuccess ||
            cudaMemcpy(p, pixels.data(), pixels.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
          std::fprintf(stderr, "cudaMalloc/cudaMemcpy of the pixels failed\n");
          return 1;
        }
        device_pixels = static_cast<const float*>(p);
      }
#endif
      // --input levels: one buffer per image, as a server batch holds one per request.
      std::vector<std::vector<uint8_t>> levels;
      std::vector<std::span<const uint8_t>> level_pieces;
      std::vector<float> table(3 * 256);
      if (input == "levels") {
        for (int64_t b = 0; b < batch; ++b) {
          std::vector<uint8_t>& image = levels.emplace_back(static_cast<size_t>(3 * size * size));
          for (uint8_t& l : image) l = static_cast<uint8_t>(rng());
        }
        for (const std::vector<uint8_t>& image : levels) level_pieces.emplace_back(image);
        for (size_t i = 0; i < table.size(); ++i) table[i] = (static_cast<float>(i % 256) / 255.0f - 0.45f) / 0.27f;
      }
      ms = input == "png" ? time_png_batches(exec, *preparer, pngs, batch, iters) : time_ms(iters, [&] {
        auto r = device_pixels          ? exec.embed_images_on_device(device_pixels, batch)
                 : input == "levels" ? exec.embed_image_levels(level_pieces, table, 0, batch)
                                     : exec.embed_images(pixels, batch);
        if (!r.ok()) {
          std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
          std::exit(1);
        }
      });
#if MMSERVE_HAS_CUDA
      if (device_pixels) cudaFree(const_cast<float*>(device_pixels));
#endif
      results.push_back({{"tower", "vision"}, {"batch", batch}, {"median_ms", ms}, {"per_s", batch * 1000.0 / ms}});
    }
    if (tower == "vision") continue;
    // Texts of `seq` tokens: BOS, words, EOS (the padded length HF's processor gives with padding="max_length").
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(batch));
    for (auto& row : ids) {
      row.push_back(49406);
      for (int i = 1; i < seq - 1; ++i) row.push_back(static_cast<int32_t>(320 + rng() % 40000));
      row.push_back(49407);
    }
    ms = time_ms(iters, [&] {
      auto r = exec.embed_texts(ids);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
        std::exit(1);
      }
    });
    results.push_back({{"tower", "text"}, {"batch", batch}, {"median_ms", ms}, {"per_s", batch * 1000.0 / ms}});
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(stderr, "clip_throughput: %s\n", exec.describe().c_str());
  std::printf("%s\n", nlohmann::json({{"impl", "mmserve"},
                                      {"device", options.device.to_string()},
                                      {"dtype", mmserve::dtype_name(exec.dtype())},
                                      {"input", options.device.is_cpu() && input != "png" ? "host" : input},
                                      {"image_decode", input == "png" ? image_decode : ""},
                                      {"memory_bytes", exec.memory_bytes()},
                                      {"tp_devices", tp_devices},
                                      {"pipeline_devices", pipeline_devices},
                                      {"micro_batches", {vision_micro, text_micro}},
                                      {"pipeline_overlap", overlap},
                                      {"threads", threads},
                                      {"blas_core", mmserve::kernels::blas_core_name()},
                                      {"openblas_coretype", coretype ? coretype : ""},
                                      {"results", results}})
                          .dump()
                          .c_str());
  return 0;
}
