// The server's per-image CPU path for one KServe v2 infer request carrying one PNG (issue 13 item 6), stage by
// stage, the code as it was (baseline) against the code as it is, in the same process:
//   json     parse_json_nlohmann (nlohmann's parser alone)      vs parse_json (the fast path)
//   base64   base64_decode_bitwise                               vs base64_decode
//   png      decode_png_libpng                                   vs decode_rgb (the fast path for these files)
//   resize   resize_and_crop + to_pixel_values (unchanged: measured for the total)
//   request  the whole path: parse_kserve_infer + decode_rgb + resize; the baseline chains the baseline stages.
//   body     the HTTP worker reading that body from a socket: httplib's 4 KiB reads through the transport's 16 KiB
//            buffer appended to a growing string (as before 2026-12-06) vs one recv'd buffer of Content-Length
//            (ConnectionServer::read_accepted_body); a local socket pair with the body already queued, so the
//            figures are the reader's CPU alone (user copies, syscalls, allocation), not the network's.
//   answer   writing a 512-float KServe answer's data array and its Server-Timing header: per-character appends and
//            snprintf (before) vs append_json_floats in place and to_chars (now); both must give the same bytes.
// The request body is exactly what `mmserve bench` sends (cli::prepare_requests: the synthetic PNG at 224x224
// and at 320x240, base64 in a BYTES element). Each stage also checks that both sides produce the same result.
//   build/cpu-release/bench/image_path_bench --benchmark_format=json --benchmark_min_time=0.5
// Results: docs/perf/server_image_path.md.
#include <benchmark/benchmark.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "api/base64.h"
#include "api/handlers.h"
#include "api/json_parse.h"
#include "api/json_writer.h"
#include "api/kserve_codec.h"
#include "cli/bench_payloads.h"
#include "engine/batch_image_decode.h"
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
  StatusOr<image::RgbImage> rgb =
      image::detail::decode_png_libpng(std::span(reinterpret_cast<const uint8_t*>(p.png.data()), p.png.size()), {});
  if (!rgb.ok()) die(rgb.status().to_string());
  p.rgb = std::move(*rgb);
  // The fast paths must give the baseline's results on this payload, and must be taken.
  if (api::parse_json_fast(p.body) != *root) die("the JSON fast path disagrees or gives up");
  if (api::base64_decode(p.base64).value() != p.png) die("base64 disagrees");
  auto fast =
      image::detail::decode_png_fast(std::span(reinterpret_cast<const uint8_t*>(p.png.data()), p.png.size()), {});
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

// With `image_decode: batch` the preparer only splits the PNG (chunk walk, CRCs, the zlib stream copied out) on
// the HTTP thread and the GPU inflates it: this is that host cost per image, against BM_png's full decode.
void BM_keep_png(benchmark::State& state) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    std::string bytes = p.png;
    auto kept = engine::keep_png_compressed(bytes, int64_t{1} << 30, "input 0");
    if (!kept || !kept->ok()) {
      state.SkipWithError("the bench PNG is not kept for the batch decoder");
      return;
    }
    benchmark::DoNotOptimize(kept);
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

// A connected local socket pair whose buffers hold a whole body, so one thread can queue it and then read it.
struct SocketPair {
  int writer = -1, reader = -1;
  SocketPair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) die("socketpair");
    writer = fds[0];
    reader = fds[1];
    const int size = 4 << 20;
    ::setsockopt(writer, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    ::setsockopt(reader, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  ~SocketPair() {
    ::close(writer);
    ::close(reader);
  }
  void queue(const std::string& bytes) const {
    for (size_t off = 0; off < bytes.size();) {
      const ssize_t n = ::send(writer, bytes.data() + off, bytes.size() - off, 0);
      if (n <= 0) die("send");
      off += static_cast<size_t>(n);
    }
  }
};

// The read path before 2026-12-06, as httplib 0.11 and the transport's stream ran it: httplib asks for 4 KiB at a
// time; the stream polls, recv's 16 KiB into its buffer and copies out; httplib appends to req.body.
std::string read_body_baseline(int fd, size_t length) {
  std::string body, buffer;
  size_t pos = 0;
  char chunk[4096];
  while (body.size() < length) {
    const size_t want = std::min(sizeof(chunk), length - body.size());
    if (pos == buffer.size()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) die("poll");
      buffer.resize(16384);
      const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n <= 0) die("recv");
      buffer.resize(static_cast<size_t>(n));
      pos = 0;
    }
    const size_t n = std::min(want, buffer.size() - pos);
    std::memcpy(chunk, buffer.data() + pos, n);
    pos += n;
    body.append(chunk, n);
  }
  return body;
}

// The read path now (BufferedSocketStream::read_planned_body): one buffer of Content-Length, recv'd into place,
// polling only when the socket has nothing.
std::string read_body_direct(int fd, size_t length) {
  std::string body(length, '\0');
  for (size_t got = 0; got < length;) {
    const ssize_t n = ::recv(fd, body.data() + got, length - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    if (n == 0 || ::poll(&p, 1, 1000) <= 0) die("recv");
  }
  return body;
}

void BM_body(benchmark::State& state, bool fast) {
  const Payload& p = payload(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  SocketPair pair;
  pair.queue(p.body);
  if ((fast ? read_body_direct : read_body_baseline)(pair.reader, p.body.size()) != p.body) die("body read differs");
  for (auto _ : state) {
    state.PauseTiming();
    pair.queue(p.body);
    state.ResumeTiming();
    std::string body =
        fast ? read_body_direct(pair.reader, p.body.size()) : read_body_baseline(pair.reader, p.body.size());
    benchmark::DoNotOptimize(body.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(p.body.size()));
}

// The answer's writers before 2026-12-06 (json_writer.cpp's float loop, kserve_handlers.cpp's Server-Timing).
void append_json_floats_baseline(std::string& out, std::span<const float> values) {
  out.push_back('[');
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    const float v = values[i];
    if (!std::isfinite(v)) {
      out += "null";
      continue;
    }
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  }
  out.push_back(']');
}

std::string server_timing_baseline(const serving::PhaseTimes& t) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "queue;dur=%.3f, preprocess;dur=%.3f, compute;dur=%.3f, total;dur=%.3f", t.queue_ms,
                t.preprocess_ms, t.compute_ms, t.total_ms);
  return buf;
}

std::string answer(bool fast, std::span<const float> embedding, const serving::PhaseTimes& times) {
  std::string out = R"({"model_name":"clip","model_version":"1","outputs":[{"name":"image_embeds","datatype":"FP32",)"
                    R"("shape":[1,512],"data":)";
  (fast ? api::append_json_floats : append_json_floats_baseline)(out, embedding);
  out += "}]}";
  out += fast ? api::server_timing(times) : server_timing_baseline(times);
  return out;
}

void BM_answer(benchmark::State& state, bool fast) {
  std::vector<float> embedding(512);
  uint32_t x = 12345;
  for (float& v : embedding) {  // unit-norm-like values, as an embedding's
    x = x * 1664525u + 1013904223u;
    v = (static_cast<float>(x >> 8) / 16777216.0f - 0.5f) * 0.09f;
  }
  const serving::PhaseTimes times{0.412, 1.137, 2.274, 4.051};
  if (answer(true, embedding, times) != answer(false, embedding, times)) die("the answers differ");
  for (auto _ : state) {
    std::string out = answer(fast, embedding, times);
    benchmark::DoNotOptimize(out.data());
  }
}

#define MM_SIZES ->Args({224, 224})->Args({320, 240})->Unit(benchmark::kMicrosecond)
BENCHMARK_CAPTURE(BM_json, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_json, fast, true) MM_SIZES;
BENCHMARK_CAPTURE(BM_base64, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_base64, fast, true) MM_SIZES;
BENCHMARK_CAPTURE(BM_png, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_png, fast, true) MM_SIZES;
BENCHMARK(BM_keep_png) MM_SIZES;
BENCHMARK(BM_resize) MM_SIZES;
BENCHMARK_CAPTURE(BM_request, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_request, fast, true) MM_SIZES;
BENCHMARK_CAPTURE(BM_body, baseline, false) MM_SIZES;
BENCHMARK_CAPTURE(BM_body, fast, true) MM_SIZES;
BENCHMARK_CAPTURE(BM_answer, baseline, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_answer, fast, true)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
