// The server's per-image CPU path for one KServe v2 infer request carrying one PNG (issue 13 item 6), stage by
// stage, the code as it was (baseline) against the code as it is, in the same process:
//   json     parse_json_nlohmann (nlohmann's parser alone)      vs parse_json (the fast path)
//   base64   base64_decode_bitwise                               vs base64_decode
//   png      decode_png_libpng                                   vs decode_rgb (the fast path for these files)
//   resize   resize_and_crop + to_pixel_values (unchanged: measured for the total)
//   request  the whole path: parse_kserve_infer + decode_rgb + resize; the baseline chains the baseline stages.
// The request body is exactly what `mmserve bench` sends (cli::prepare_requests: the synthetic PNG at 224x224
// and at 320x240, base64 in a BYTES element). Each stage also checks that both sides produce the same result.
//   build/cpu-release/bench/image_path_bench --benchmark_format=json --benchmark_min_time=0.5
// Results: docs/perf/server_image_path.md.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "api/base64.h"
#include "api/json_parse.h"
#include "api/kserve_codec.h"
#include "cli/bench_payloads.h"
#include "frontends/image/codecs.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"

namespace {

using namespace mmserve;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "image_path_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Payload {
  std::string body;    // the KServe request
  std::string base64;  // its image element
  std::string png;     // the decoded element
  image::RgbImage rgb;
};

const Payload& payload(int width, int height) {
  static std::vector<std::pair<std::pair<int, int>, Payload>> cache;
  for (const auto& [size, p] : cache) {
    if (size.first == width && size.second == height) return p;
  }
  cli::BenchClass c;
  c.name = "image";
  c.kind = cli::BenchKind::kImage;
  c.api = cli::BenchApi::kKserve;
  c.image_width = width;
  c.image_height = height;
  c.image_format = "png";
  cli::BenchProfile profile;
  profile.classes.push_back(c);
  StatusOr<std::vector<cli::PreparedClass>> prepared = cli::prepare_requests(profile, "clip", "");
  if (!prepared.ok()) die(prepared.status().to_string());
  Payload p;
  p.body = prepared->at(0).variants.at(0).body;
  StatusOr<nlohmann::json> root = api::parse_json_nlohmann(p.body);
  if (!root.ok()) die(root.status().to_string());
  p.base64 = (*root)["inputs"][0]["data"][0].get<std::string>();
  StatusOr<std::string> png = api::base64_decode_bitwise(p.base64);
  if (!png.ok()) die(png.status().to_string());
  p.png = *png;
  StatusOr<image::RgbImage> rgb = image::detail::decode_png_libpng(
      std::span(reinterpret_cast<const uint8_t*>(p.png.data()), p.png.size()), {});
  if (!rgb.ok()) die(rgb.status().to_string());
  p.rgb = std::move(*rgb);
  // The fast paths must give the baseline's results on this payload, and must be taken.
  if (api::parse_json_fast(p.body) != *root) die("the JSON fast path disagrees or gives up");
  if (api::base64_decode(p.base64).value() != p.png) die("base64 disagrees");
  auto fast = image::detail::decode_png_fast(std::span(reinterpret_cast<const uint8_t*>(p.png.data()), p.png.size()),
                                             {});
  if (!fast || !fast->ok() || (*fast)->pixels != p.rgb.pixels) die("the PNG fast path disagrees or gives up");
  cache.push_back({{width, height}, std::move(p)});
  return cache.back().second;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void preprocess(const image::RgbImage& rgb, std::vector<float>& out) {
  static const image::ClipPreprocessConfig config;  // ViT-B/32's: shortest edge 224, crop 224
  const image::RgbImage cropped = image::resize_and_crop(rgb, config);
  out.resize(static_cast<size_t>(3) * cropped.width * cropped.height);
  image::to_pixel_values(cropped, config, out.data());
}

void BM_json(benchmark::State& state, bool fast) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    StatusOr<nlohmann::json> root = fast ? api::parse_json(p.body) : api::parse_json_nlohmann(p.body);
    benchmark::DoNotOptimize(root);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(p.body.size()));
}

void BM_base64(benchmark::State& state, bool fast) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    StatusOr<std::string> bytes = fast ? api::base64_decode(p.base64) : api::base64_decode_bitwise(p.base64);
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(p.base64.size()));
}

void BM_png(benchmark::State& state, bool fast) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    StatusOr<image::RgbImage> rgb =
        fast ? image::decode_rgb(bytes_of(p.png)) : image::detail::decode_png_libpng(bytes_of(p.png), {});
    benchmark::DoNotOptimize(rgb);
  }
}

void BM_resize(benchmark::State& state) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::vector<float> pixels;
  for (auto _ : state) {
    preprocess(p.rgb, pixels);
    benchmark::DoNotOptimize(pixels.data());
  }
}

// The whole per-image path of the server's CPU work (less HTTP): the request parsed, its image decoded and
// preprocessed. The baseline runs the baseline stages in the same order.
void BM_request(benchmark::State& state, bool fast) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::vector<float> pixels;
  for (auto _ : state) {
    if (fast) {
      StatusOr<api::KServeInferRequest> request = api::parse_kserve_infer(p.body, std::nullopt);
      if (!request.ok()) die(request.status().to_string());
      StatusOr<image::RgbImage> rgb = image::decode_rgb(bytes_of(request->inputs[0].image_bytes));
      preprocess(*rgb, pixels);
    } else {
      StatusOr<nlohmann::json> root = api::parse_json_nlohmann(p.body);
      const std::string& element = (*root)["inputs"][0]["data"][0].get_ref<const std::string&>();
      StatusOr<std::string> png = api::base64_decode_bitwise(element);
      StatusOr<image::RgbImage> rgb = image::detail::decode_png_libpng(bytes_of(*png), {});
      preprocess(*rgb, pixels);
    }
    benchmark::DoNotOptimize(pixels.data());
  }
}

#define MM_SIZES ->Args({224, 224})->Args({320, 240})->Unit(benchmark::kMicrosecond)
BENCHMARK_CAPTURE(BM_json, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_json, fast, true) MM_SIZES;
BENCHMARK_CAPTURE(BM_base64, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_base64, fast, true) MM_SIZES;
BENCHMARK_CAPTURE(BM_png, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_png, fast, true) MM_SIZES;
BENCHMARK(BM_resize) MM_SIZES;
BENCHMARK_CAPTURE(BM_request, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_request, fast, true) MM_SIZES;

}  // namespace

BENCHMARK_MAIN();
