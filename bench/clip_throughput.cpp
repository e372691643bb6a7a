// clip_throughput: images/s and texts/s of mmserve's CPU CLIP at given batch sizes, on a real HF checkpoint
// (bench/run_clip_cpu_bench.sh writes a random-weight ViT-B/32 with HF and times HF on the same weights in
// the same run). Prints one JSON object: {"threads": N, "results": [{"tower", "batch", "median_ms", "per_s"}]}.
//
//   clip_throughput --model DIR [--threads N] [--batches 1,16] [--iters 20] [--seq 77]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/clip_executor.h"
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

}  // namespace

int main(int argc, char** argv) {
  mmserve::kernels::reexec_with_blas_coretype_if_needed(argv);
  std::string model_dir;
  int threads = 0, iters = 20, seq = 77;
  std::vector<int64_t> batches = {1, 16};
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
    else if (a == "--batches") {
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
  auto executor = mmserve::engine::ClipExecutor::create(model_dir, options);
  if (!executor.ok()) {
    std::fprintf(stderr, "%s\n", executor.status().to_string().c_str());
    return 1;
  }
  auto& exec = **executor;
  const int64_t size = exec.image_size();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  nlohmann::json results = nlohmann::json::array();
  for (int64_t batch : batches) {
    std::vector<float> pixels(static_cast<size_t>(batch * 3 * size * size));
    for (float& p : pixels) p = normal(rng);
    double ms = time_ms(iters, [&] {
      auto r = exec.embed_images(pixels, batch);
      if (!r.ok()) std::abort();
    });
    results.push_back({{"tower", "vision"}, {"batch", batch}, {"median_ms", ms}, {"per_s", batch * 1000.0 / ms}});
    // Texts of `seq` tokens: BOS, words, EOS (the padded length HF's processor gives with padding="max_length").
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(batch));
    for (auto& row : ids) {
      row.push_back(49406);
      for (int i = 1; i < seq - 1; ++i) row.push_back(static_cast<int32_t>(320 + rng() % 40000));
      row.push_back(49407);
    }
    ms = time_ms(iters, [&] {
      auto r = exec.embed_texts(ids);
      if (!r.ok()) std::abort();
    });
    results.push_back({{"tower", "text"}, {"batch", batch}, {"median_ms", ms}, {"per_s", batch * 1000.0 / ms}});
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("%s\n", nlohmann::json({{"impl", "mmserve"},
                                      {"threads", threads},
                                      {"blas_core", mmserve::kernels::blas_core_name()},
                                      {"openblas_coretype", coretype ? coretype : ""},
                                      {"results", results}})
                          .dump()
                          .c_str());
  return 0;
}
