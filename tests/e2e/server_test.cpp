// End-to-end tests of `mmserve serve` as deployed: the real binary on a free port serving a copy of
// tests/fixtures/clip-tiny-quickgelu-f32, driven with curl (via popen), httplib and raw sockets. Covers every
// route; KServe (JSON, binary extension, pixel_values) and OpenAI results against HF's goldens (<= 1e-4);
// every error code (400 401 404 405 413 415 429 503 504); many slow connections while normal requests
// succeed; the access log; and SIGTERM with a request in flight (it completes, exit code 0).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../conformance/golden.h"
#include "server_process.h"
#if MMSERVE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_status.h"
#endif

namespace mmserve {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using namespace e2e;
using testing::fixture;

constexpr const char* kModel = "clip-tiny";
constexpr size_t kDim = 10;  // projection_dim of the fixture

// A temporary model repository holding a copy of the fixture as `clip-tiny` (plus an optional mmserve.yaml).
fs::path make_repository(const std::string& name, const std::string& yaml = "",
                         const std::string& model_fixture = "clip-tiny-quickgelu-f32") {
  const fs::path root = fs::temp_directory_path() / ("mmserve_e2e_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / kModel);
  for (const auto& entry : fs::directory_iterator(fixture(model_fixture))) {
    fs::copy_file(entry.path(), root / kModel / entry.path().filename());
  }
  if (!yaml.empty()) std::ofstream(root / kModel / "mmserve.yaml") << yaml;
  return root;
}

// The golden inputs: the first two texts and images of golden.json.
const std::vector<std::string> kTexts = {"a photo of a cat", ""};
const std::vector<std::string> kImages = {"images/rocket.jpg", "images/chelsea.png"};

json kserve_golden_request() {
  std::vector<std::string> images;
  for (const std::string& i : kImages) images.push_back(base64(read_file(fixture(i))));
  return {{"inputs",
           {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {kTexts.size()}}, {"data", kTexts}},
            {{"name", "image"}, {"datatype", "BYTES"}, {"shape", {images.size()}}, {"data", images}}}}};
}

void expect_rows_match(const std::vector<float>& got, const std::vector<float>& golden, size_t rows, const char* what) {
  ASSERT_EQ(got.size(), rows * kDim) << what;
  for (size_t r = 0; r < rows; ++r) {
    EXPECT_LE(testing::relative_error(got.data() + r * kDim, golden.data() + r * kDim, kDim), 1e-4) << what << " " << r;
  }
}

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repository_ = new fs::path(make_repository("main"));
    server_ = new ServerProcess(*repository_, {"--max-body-mb", "2", "--http-threads", "16"});
    ASSERT_TRUE(server_->wait_ready()) << server_->stderr_text();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->terminate(), 0) << server_->stderr_text();
    }
    delete server_;
    server_ = nullptr;
    fs::remove_all(*repository_);
    delete repository_;
  }
  static ServerProcess* server_;
  static fs::path* repository_;
};
ServerProcess* Server::server_ = nullptr;
fs::path* Server::repository_ = nullptr;

TEST_F(Server, EveryRouteAnswers) {
  const std::string u = server_->url();
  EXPECT_EQ(curl(u + "/v2").status, 200);
  EXPECT_EQ(json::parse(curl(u + "/v2").body)["name"], "mmserve");
  EXPECT_EQ(curl(u + "/v2/health/live").status, 200);
  EXPECT_EQ(curl(u + "/v2/health/ready").status, 200);
  CurlResult healthz = curl(u + "/healthz");
  EXPECT_EQ(healthz.status, 200);
  EXPECT_EQ(healthz.body, "ok");
  const json meta = json::parse(curl(u + "/v2/models/clip-tiny").body);
  EXPECT_EQ(meta["name"], kModel);
  EXPECT_EQ(meta["platform"], "mmserve_clip");
  EXPECT_EQ(curl(u + "/v2/models/clip-tiny/ready").status, 200);
  EXPECT_EQ(curl(u + "/v2/models/clip-tiny/versions/1/ready").status, 200);
  const json index = json::parse(curl("-X POST " + u + "/v2/repository/index").body);
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(index[0]["name"], kModel);
  EXPECT_EQ(index[0]["state"], "READY");
  const json models = json::parse(curl(u + "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], kModel);
  const CurlResult metrics = curl(u + "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("http_requests_total{method=\"GET\",route=\"/v2/models/{model}\",code=\"200\"}"),
            std::string::npos)
      << metrics.body.substr(0, 2000);
  EXPECT_NE(metrics.body.find("mmserve_model_ready"), std::string::npos);
}

TEST_F(Server, KServeJsonInferMatchesGoldens) {
  testing::Golden golden(fixture("clip-tiny-quickgelu-f32/golden.safetensors"));
  const std::string file =
      (fs::temp_directory_path() / ("mmserve_e2e_infer_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(file) << kserve_golden_request().dump();
  const CurlResult r = curl("-H 'Content-Type: application/json' --data-binary @" + file + " " + server_->url() +
                            "/v2/models/clip-tiny/infer");
  fs::remove(file);
  ASSERT_EQ(r.status, 200) << r.body;
  const json out = json::parse(r.body);
  EXPECT_EQ(out["model_name"], kModel);
  ASSERT_EQ(out["outputs"].size(), 3u);
  expect_rows_match(out["outputs"][0]["data"].get<std::vector<float>>(), golden.f32("text_embeds"), 2, "text");
  expect_rows_match(out["outputs"][1]["data"].get<std::vector<float>>(), golden.f32("image_embeds"), 2, "image");
  // logits_per_image [2 images, 2 texts] is the top-left block of HF's [8, 8]
  const std::vector<float> logits = out["outputs"][2]["data"].get<std::vector<float>>();
  const std::vector<float> ref = golden.f32("logits_per_image");
  ASSERT_EQ(logits.size(), 4u);
  const std::vector<float> block = {ref[0], ref[1], ref[8], ref[9]};
  EXPECT_LE(testing::relative_error(logits, block), 1e-4);
}

TEST_F(Server, KServeBinaryExtensionAndPixelValuesMatchGoldens) {
  testing::Golden golden(fixture("clip-tiny-quickgelu-f32/golden.safetensors"));
  std::string images;
  for (const std::string& i : kImages) {
    const std::string bytes = read_file(fixture(i));
    const uint32_t n = static_cast<uint32_t>(bytes.size());
    images.append(reinterpret_cast<const char*>(&n), 4);
    images += bytes;
  }
  const std::vector<float> all_pixels = golden.f32("pixel_values");  // [8, 3, 32, 32]
  const std::vector<float> pixels(all_pixels.begin(), all_pixels.begin() + 2 * 3 * 32 * 32);
  const std::string pixel_bytes(reinterpret_cast<const char*>(pixels.data()), pixels.size() * 4);
  const json header = {{"inputs",
                        {{{"name", "image"},
                          {"datatype", "BYTES"},
                          {"shape", {2}},
                          {"parameters", {{"binary_data_size", images.size()}}}},
                         {{"name", "pixel_values"},
                          {"datatype", "FP32"},
                          {"shape", {2, 3, 32, 32}},
                          {"parameters", {{"binary_data_size", pixel_bytes.size()}}}}}},
                       {"parameters", {{"binary_data_output", true}}}};
  const std::string text = header.dump();
  auto r = server_->client().Post("/v2/models/clip-tiny/infer",
                                  {{"Inference-Header-Content-Length", std::to_string(text.size())}},
                                  text + images + pixel_bytes, "application/octet-stream");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const size_t length = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
  const json out = json::parse(r->body.substr(0, length));
  ASSERT_EQ(out["outputs"].size(), 1u);
  EXPECT_EQ(out["outputs"][0]["name"], "image_embeds");
  EXPECT_EQ(out["outputs"][0]["shape"], json({4, kDim}));
  ASSERT_EQ(r->body.size(), length + 4 * kDim * 4);
  std::vector<float> embeds(4 * kDim);
  std::memcpy(embeds.data(), r->body.data() + length, embeds.size() * 4);
  const std::vector<float> ref = golden.f32("image_embeds");
  // the two encoded images, then the two preprocessed ones: the same pictures
  expect_rows_match(std::vector<float>(embeds.begin(), embeds.begin() + 2 * kDim), ref, 2, "binary image");
  expect_rows_match(std::vector<float>(embeds.begin() + 2 * kDim, embeds.end()), ref, 2, "pixel_values");
  EXPECT_FALSE(r->get_header_value("Server-Timing").empty());
}

TEST_F(Server, OpenAiEmbeddingsMatchGoldens) {
  testing::Golden golden(fixture("clip-tiny-quickgelu-f32/golden.safetensors"));
  const json request = {{"model", kModel},
                        {"input", {kTexts[0], "data:image/jpeg;base64," + base64(read_file(fixture(kImages[0])))}}};
  auto r = server_->client().Post("/v1/embeddings", request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json out = json::parse(r->body);
  ASSERT_EQ(out["data"].size(), 2u);
  expect_rows_match(out["data"][0]["embedding"].get<std::vector<float>>(), golden.f32("text_embeds"), 1, "text");
  expect_rows_match(out["data"][1]["embedding"].get<std::vector<float>>(), golden.f32("image_embeds"), 1, "image");
  EXPECT_EQ(out["usage"]["prompt_tokens"], 7);  // <|startoftext|> a photo of a cat <|endoftext|>
  EXPECT_EQ(out["usage"]["total_tokens"], 7);
  // base64: little-endian float32
  json b64 = request;
  b64["encoding_format"] = "base64";
  r = server_->client().Post("/v1/embeddings", b64.dump(), "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  out = json::parse(r->body);
  const std::string encoded = out["data"][0]["embedding"].get<std::string>();
  EXPECT_EQ(encoded.size(), 4 * ((kDim * 4 + 2) / 3));
  // decode with the test's own knowledge: re-encode the float reply and compare
  auto floats = server_->client().Post("/v1/embeddings", request.dump(), "application/json");
  const std::vector<float> values = json::parse(floats->body)["data"][0]["embedding"].get<std::vector<float>>();
  EXPECT_EQ(encoded, base64(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4)));
}

TEST_F(Server, TracingHeadersAndAccessLog) {
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  auto r =
      server_->client().Post("/v2/models/clip-tiny/infer", {{"traceparent", "00-" + trace + "-00f067aa0ba902b7-01"}},
                             kserve_golden_request().dump(), "application/json");
  ASSERT_EQ(r->status, 200);
  const std::string tp = r->get_header_value("traceparent");
  EXPECT_EQ(tp.substr(0, 36), "00-" + trace + "-");
  EXPECT_NE(tp.substr(36, 16), "00f067aa0ba902b7");
  const std::string timing = r->get_header_value("Server-Timing");
  for (const char* phase : {"queue;dur=", "preprocess;dur=", "compute;dur=", "total;dur="}) {
    EXPECT_NE(timing.find(phase), std::string::npos) << timing;
  }
  bool found = false;
  for (int i = 0; i < 50 && !found; ++i) {  // written after the response; give it a moment
    std::istringstream lines(server_->access_log());
    std::string line;
    while (std::getline(lines, line)) {
      const json e = json::parse(line, nullptr, false);
      ASSERT_FALSE(e.is_discarded()) << line;
      if (e["trace_id"] != trace) continue;
      found = true;
      EXPECT_EQ(e["method"], "POST");
      EXPECT_EQ(e["path"], "/v2/models/clip-tiny/infer");
      EXPECT_EQ(e["status"], 200);
      EXPECT_EQ(e["model"], kModel);
      EXPECT_EQ(e["tenant"], "default");
      for (const char* key : {"ts", "duration_ms", "bytes", "priority"}) EXPECT_TRUE(e.contains(key)) << key;
    }
    if (!found) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(found) << server_->access_log();
}

TEST_F(Server, ErrorCodes) {
  const std::string u = server_->url();
  const std::string json_type = "-H 'Content-Type: application/json' ";
  auto kserve_error = [](const CurlResult& r) { return json::parse(r.body, nullptr, false)["error"].is_string(); };
  auto openai_error = [](const CurlResult& r) {
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j["error"].is_object() && j["error"].contains("type");
  };
  CurlResult r = curl(json_type + "-d '{not json' " + u + "/v2/models/clip-tiny/infer");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(kserve_error(r)) << r.body;
  r = curl(json_type + "-d '{\"model\": \"clip-tiny\"}' " + u + "/v1/embeddings");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(openai_error(r)) << r.body;
  r = curl(json_type +
           "-d '{\"inputs\":[{\"name\":\"image\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"@@\"]}]}' " + u +
           "/v2/models/clip-tiny/infer");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("base64"), std::string::npos);
  const std::string truncated = base64(read_file(fixture("images/truncated.jpg")));
  r = curl(json_type + "-d '{\"inputs\":[{\"name\":\"image\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"" +
           truncated + "\"]}]}' " + u + "/v2/models/clip-tiny/infer");
  EXPECT_EQ(r.status, 400) << r.body;  // undecodable image
  r = curl(json_type + "-d '{\"model\": \"clip-tiny\", \"input\": \"data:image/png;base64,AAAA\"}' " + u +
           "/v1/embeddings");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(openai_error(r));
  r = curl(json_type + "-d '{\"model\": \"clip-tiny\", \"input\": \"https://example.com/x.png\"}' " + u +
           "/v1/embeddings");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("URL fetches are disabled"), std::string::npos);
  // 404: unknown model (both shapes), unknown route; 405
  r = curl(json_type +
           "-d '{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"x\"]}]}' " + u +
           "/v2/models/nope/infer");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(kserve_error(r));
  r = curl(json_type + "-d '{\"model\": \"nope\", \"input\": \"x\"}' " + u + "/v1/embeddings");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
  EXPECT_EQ(curl(u + "/nothing/here").status, 404);
  EXPECT_EQ(curl(u + "/v2/models/clip-tiny/infer").status, 405);
  // 415: curl's default form content type
  r = curl("-d '{}' " + u + "/v2/models/clip-tiny/infer");
  EXPECT_EQ(r.status, 415);
  EXPECT_TRUE(kserve_error(r));
  // 413: a 3 MB body against --max-body-mb 2, in both shapes
  const json big = {{"model", kModel}, {"input", std::string(3 << 20, 'x')}};
  auto h = server_->client().Post("/v1/embeddings", big.dump(), "application/json");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 413);
  EXPECT_EQ(json::parse(h->body)["error"]["type"], "invalid_request_error");
  h = server_->client().Post("/v2/models/clip-tiny/infer", big.dump(), "application/json");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 413);
  EXPECT_TRUE(json::parse(h->body)["error"].is_string());
  // 504: a deadline that has passed before the request can start
  r = curl(json_type + "-H 'x-mmserve-timeout-ms: 0.001' -d '{\"model\": \"clip-tiny\", \"input\": \"x\"}' " + u +
           "/v1/embeddings");
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_TRUE(openai_error(r));
  // 400 for a malformed priority
  r = curl(json_type + "-H 'x-mmserve-priority: urgent' -d '{\"model\": \"clip-tiny\", \"input\": \"x\"}' " + u +
           "/v1/embeddings");
  EXPECT_EQ(r.status, 400);
}

TEST_F(Server, ManySlowConnectionsDoNotBlockRequests) {
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_to(server_->port());
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head =
        "POST /v2/models/clip-tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    for (size_t i = 0; i < head.size() && !stop; ++i) {
      for (int fd : slow) ::send(fd, &head[i], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(30ms);
    }
  });
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = server_->client().Post("/v2/models/clip-tiny/infer", kserve_golden_request().dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  }
  stop = true;
  trickle.join();
  for (int fd : slow) ::close(fd);
}

TEST(ServerProcessTest, ApiKeysTenantsAndUnauthenticatedHealth) {
  const fs::path repository = make_repository("keys");
  std::ofstream(repository.string() + ".keys") << "# tenants\nsk-team team-a\n";
  ServerProcess server(repository, {"--api-key", "sk-default", "--api-keys-file", repository.string() + ".keys"});
  ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
  const std::string u = server.url();
  EXPECT_EQ(curl(u + "/v2/health/live").status, 200);
  EXPECT_EQ(curl(u + "/healthz").status, 200);
  EXPECT_EQ(curl(u + "/v2/models/clip-tiny").status, 401);
  EXPECT_EQ(curl(u + "/metrics").status, 401);
  EXPECT_EQ(curl("-H 'Authorization: Bearer wrong' " + u + "/v1/models").status, 401);
  EXPECT_EQ(curl("-H 'Authorization: Bearer sk-default' " + u + "/v1/models").status, 200);
  EXPECT_EQ(curl("-H 'Authorization: Bearer sk-team' " + u + "/metrics").status, 200);
  CurlResult r = curl(
      "-H 'Authorization: Bearer sk-team' -H 'Content-Type: application/json' -d '{\"model\": "
      "\"clip-tiny\", \"input\": \"x\"}' " +
      u + "/v1/embeddings");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(server.terminate(), 0);
  EXPECT_NE(server.access_log().find("\"tenant\":\"team-a\""), std::string::npos) << server.access_log();
  fs::remove_all(repository);
  fs::remove(repository.string() + ".keys");
}

TEST(ServerProcessTest, QueueFullIs429AndUnloadedIs503) {
  // One slot in the queue, one request per batch, and many concurrent clients: some must be refused.
  const fs::path repository = make_repository("queue", "queue_size: 1\nmax_batch_size: 1\nbatch_buckets: [1]\n");
  ServerProcess server(repository, {"--http-threads", "64"});
  ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
  json request = kserve_golden_request();
  std::atomic<int> ok{0}, refused{0}, other{0};
  std::atomic<bool> retry_after{true};
  std::vector<std::thread> clients;
  for (int i = 0; i < 48; ++i) {
    clients.emplace_back([&] {
      auto r = server.client().Post("/v2/models/clip-tiny/infer", request.dump(), "application/json");
      if (r && r->status == 200) {
        ++ok;
      } else if (r && r->status == 429) {
        ++refused;
        if (r->get_header_value("Retry-After") != "1") retry_after = false;
      } else {
        ++other;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_TRUE(retry_after.load());
  // unloaded model: 503 on infer and ready, then load it again
  EXPECT_EQ(curl("-X POST " + server.url() + "/v2/repository/models/clip-tiny/unload").status, 200);
  CurlResult r = curl("-H 'Content-Type: application/json' -d '{\"model\": \"clip-tiny\", \"input\": \"x\"}' " +
                      server.url() + "/v1/embeddings");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(curl(server.url() + "/v2/models/clip-tiny/ready").status, 503);
  EXPECT_EQ(curl("-X POST " + server.url() + "/v2/repository/models/clip-tiny/load").status, 200);
  EXPECT_EQ(curl(server.url() + "/v2/models/clip-tiny/ready").status, 200);
  EXPECT_EQ(server.terminate(), 0);
  fs::remove_all(repository);
}

TEST(ServerProcessTest, ReplicasAreListedAndAllFailedIs503NotReady) {
  // Two CPU replicas, both made to fail every batch through the test seam (docs/architecture.md, "Replicas").
  const fs::path repository = make_repository("replicas", "devices: [cpu, cpu]\nthreads: 1\n");
  ::setenv("MMSERVE_TEST_REPLICA_FAULTS", "clip-tiny:0:all,clip-tiny:1:all", 1);
  ServerProcess server(repository);
  ::unsetenv("MMSERVE_TEST_REPLICA_FAULTS");
  ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
  EXPECT_EQ(curl(server.url() + "/v2/health/ready").status, 200);
  json meta = json::parse(curl(server.url() + "/v2/models/clip-tiny").body);
  ASSERT_EQ(meta["replicas"].size(), 2u) << meta.dump();
  EXPECT_EQ(meta["replicas"][1]["device"], "cpu");
  EXPECT_EQ(meta["replicas"][1]["healthy"], true);
  // The request fails on one replica, is re-queued once, fails on the other: 503 with a JSON error.
  auto infer = server.client().Post("/v2/models/clip-tiny/infer", kserve_golden_request().dump(), "application/json");
  ASSERT_TRUE(infer);
  EXPECT_EQ(infer->status, 503) << infer->body;
  const json error = json::parse(infer->body, nullptr, false);
  ASSERT_TRUE(error.is_object()) << infer->body;
  EXPECT_NE(error["error"].get<std::string>().find("failed on two replicas"), std::string::npos) << infer->body;
  CurlResult r = curl("-H 'Content-Type: application/json' -d '{\"model\": \"clip-tiny\", \"input\": \"x\"}' " +
                      server.url() + "/v1/embeddings");
  EXPECT_EQ(r.status, 503) << r.body;
  const json openai_error = json::parse(r.body, nullptr, false);
  EXPECT_TRUE(openai_error.is_object() && openai_error["error"].is_object()) << r.body;
  EXPECT_EQ(curl(server.url() + "/v2/health/ready").status, 503);
  EXPECT_EQ(curl(server.url() + "/v2/models/clip-tiny/ready").status, 503);
  meta = json::parse(curl(server.url() + "/v2/models/clip-tiny").body);  // metadata still answers, with why
  ASSERT_EQ(meta["replicas"].size(), 2u) << meta.dump();
  EXPECT_EQ(meta["replicas"][0]["healthy"], false);
  EXPECT_NE(meta["replicas"][0]["fault"].get<std::string>().find("injected device fault"), std::string::npos);
  const std::string metrics = curl(server.url() + "/metrics").body;
  EXPECT_NE(metrics.find("mmserve_replica_healthy{model=\"clip-tiny\",replica=\"1\",device=\"cpu\"} 0"),
            std::string::npos);
  EXPECT_NE(server.stderr_text().find("taken out of rotation"), std::string::npos);
  EXPECT_EQ(server.terminate(), 0);
  fs::remove_all(repository);
}

// Polls /metrics until `model` has a request admitted and not finished (mmserve_inflight_requests >= 1); false
// once `timeout` passes or `gave_up()` says so. The hook for "the request is being processed", instead of a
// guessed sleep.
bool wait_inflight(ServerProcess& server, const std::string& model, std::chrono::seconds timeout,
                   const std::function<bool()>& gave_up) {
  const std::string sample = "\nmmserve_inflight_requests{model=\"" + model + "\"} ";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline && !gave_up()) {
    auto r = server.client().Get("/metrics");
    if (r && r->status == 200) {
      const size_t at = r->body.find(sample);
      if (at != std::string::npos && std::atof(r->body.c_str() + at + sample.size()) >= 1.0) return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(ServerProcessTest, SigtermLetsAnInFlightRequestComplete) {
  const fs::path repository = make_repository("sigterm");
  ServerProcess server(repository);
  ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
  // A heavy request: many images to decode and embed.
  std::vector<std::string> images(160, base64(read_file(fixture("images/chelsea.png"))));
  const std::string request =
      json{{"inputs", {{{"name", "image"}, {"datatype", "BYTES"}, {"shape", {images.size()}}, {"data", images}}}}}
          .dump();
  std::atomic<int> status{0};
  std::atomic<int64_t> answered_at{0};
  std::thread client([&] {
    auto r = server.client().Post("/v2/models/clip-tiny/infer", request, "application/json");
    answered_at = std::chrono::steady_clock::now().time_since_epoch().count();
    status = r ? r->status : -1;
  });
  // SIGTERM once the server has admitted the request (it then takes ~1 s), however slowly it got there.
  const bool admitted = wait_inflight(server, kModel, 60s, [&] { return answered_at.load() != 0; });
  EXPECT_TRUE(admitted) << "the request never showed in mmserve_inflight_requests: " << server.stderr_text();
  const int64_t signalled_at = std::chrono::steady_clock::now().time_since_epoch().count();
  const int exit_code = server.terminate();
  client.join();
  EXPECT_EQ(status.load(), 200) << server.stderr_text();
  EXPECT_GT(answered_at.load(), signalled_at) << "the request finished before SIGTERM: make it heavier";
  EXPECT_EQ(exit_code, 0) << server.stderr_text();
  EXPECT_NE(server.stderr_text().find("draining"), std::string::npos);
  EXPECT_EQ(connect_to(server.port()), -1);
  fs::remove_all(repository);
}

// `device: cuda` (and `serve --device cuda`) through the real binary and HTTP: the same golden request as
// KServeJsonInferMatchesGoldens, answered by the GPU in bf16 (the issue's tolerance: 1e-2 relative). Skipped,
// with the reason, where no GPU is visible; a model on a GPU that does not exist fails with its reason while
// the server stays up.
// One KServe infer of the golden texts and images against `server`; each row within `tolerance` of `golden`.
void expect_golden_infer(ServerProcess& server, const fs::path& repository, const testing::Golden& golden, size_t dim,
                         double tolerance) {
  const std::string file = repository.string() + ".request.json";
  std::ofstream(file) << kserve_golden_request().dump();
  const CurlResult r = curl("-H 'Content-Type: application/json' --data-binary @" + file + " " + server.url() +
                            "/v2/models/clip-tiny/infer");
  fs::remove(file);
  ASSERT_EQ(r.status, 200) << r.body;
  const json out = json::parse(r.body);
  const std::vector<float> text = out["outputs"][0]["data"].get<std::vector<float>>();
  const std::vector<float> image = out["outputs"][1]["data"].get<std::vector<float>>();
  ASSERT_EQ(text.size(), 2 * dim);
  ASSERT_EQ(image.size(), 2 * dim);
  const std::vector<float> text_ref = golden.f32("text_embeds"), image_ref = golden.f32("image_embeds");
  for (size_t row = 0; row < 2; ++row) {
    EXPECT_LE(testing::relative_error(text.data() + row * dim, text_ref.data() + row * dim, dim), tolerance);
    EXPECT_LE(testing::relative_error(image.data() + row * dim, image_ref.data() + row * dim, dim), tolerance);
  }
}

// One replica of the bf16 fixture (4 heads per tower: they divide by 2) over a GPU group, for each mmserve.yaml:
// served end to end and compared with HF's goldens, the metadata naming the group `label`.
void expect_group_serves(const std::vector<std::string>& yamls, const std::string& label) {
  for (const std::string& yaml : yamls) {
    SCOPED_TRACE(yaml);
    const fs::path repository = make_repository("gpu_group", yaml, "clip-tiny-gelu-bf16");
    testing::Golden golden(fixture("clip-tiny-gelu-bf16/golden.safetensors"));
    const size_t dim = static_cast<size_t>(golden.shape("text_embeds")[1]);
    ServerProcess server(repository, {});
    ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
    const CurlResult meta = curl(server.url() + "/v2/models/clip-tiny");
    ASSERT_EQ(meta.status, 200) << meta.body;
    EXPECT_EQ(json::parse(meta.body)["replicas"][0]["device"], label) << meta.body;
    expect_golden_infer(server, repository, golden, dim, 1e-2);
    EXPECT_EQ(server.terminate(), 0) << server.stderr_text();
    fs::remove_all(repository);
  }
}

TEST(ServerProcessTest, ServesOnTheGpu) {
  MMSERVE_E2E_REQUIRE_GPU();
  testing::Golden golden(fixture("clip-tiny-quickgelu-f32/golden.safetensors"));
  for (const bool by_flag : {false, true}) {
    SCOPED_TRACE(by_flag ? "serve --device cuda" : "device: cuda in mmserve.yaml");
    const fs::path repository = make_repository(by_flag ? "gpu_flag" : "gpu_yaml", by_flag ? "" : "device: cuda\n");
    ServerProcess server(repository, by_flag ? std::vector<std::string>{"--device", "cuda"}
                                             : std::vector<std::string>{});
    ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
    // The load line names each replica: "... on replica 0: cuda:0 bf16: weights ..."
    EXPECT_NE(server.stderr_text().find("replica 0: cuda:0 bf16"), std::string::npos) << server.stderr_text();
    expect_golden_infer(server, repository, golden, kDim, 1e-2);
    EXPECT_EQ(server.terminate(), 0) << server.stderr_text();
    fs::remove_all(repository);
  }
}

// Issue 6: one replica over two GPUs, as a tensor-parallel group (the bf16 fixture: its 4 heads per tower divide
// by 2) and as two pipeline stages, served end to end and compared with HF's goldens; the metadata names the group.
// Needs 2 GPUs and libnccl.so.2 (skipped, saying so, otherwise).
TEST(ServerProcessTest, ServesTensorParallelAndPipelineGroupsOnTwoGpus) {
  MMSERVE_E2E_REQUIRE_GPU();
#if MMSERVE_HAS_CUDA
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) {
    GTEST_SKIP() << "needs 2 GPUs for a tensor-parallel or pipeline group; " << gpus << " visible";
  }
#endif
  expect_group_serves({"devices: [cuda:0, cuda:1]\ntensor_parallel: 2\n",
                       "devices: [cuda:0, cuda:1]\npipeline_parallel: 2\nvision_micro_batch: 1\ntext_micro_batch: 1\n"},
                      "cuda:0+cuda:1");
}

// The same server paths with both ranks (or stages) on GPU 0: tp_collective: staged sums through host memory, so a
// one-GPU host runs the group's whole way through the server (grouping, labels, the sharded executor, batching).
TEST(ServerProcessTest, ServesStagedTensorParallelAndPipelineGroupsOnOneGpu) {
  MMSERVE_E2E_REQUIRE_GPU();
  expect_group_serves({"devices: [cuda:0, cuda:0]\ntensor_parallel: 2\ntp_collective: staged\n",
                       "devices: [cuda:0, cuda:0]\npipeline_parallel: 2\ntp_collective: staged\nvision_micro_batch: "
                       "1\ntext_micro_batch: 1\n"},
                      "cuda:0+cuda:0");
}

TEST(ServerProcessTest, BadDeviceFlagIsACliError) {
  const fs::path repository = make_repository("bad_device");
  ServerProcess server(repository, {"--device", "gpu0"});
  const int code = server.wait_exit(30s);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "still running";
  EXPECT_NE(server.stderr_text().find("gpu0"), std::string::npos) << server.stderr_text();
  fs::remove_all(repository);
}

TEST(ServerProcessTest, DemoModelWithoutARepository) {
  const int port = free_port();
  const fs::path err = fs::temp_directory_path() / ("mmserve_e2e_demo_" + std::to_string(::getpid()) + ".stderr");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    const std::string p = std::to_string(port);
    const std::string binary = mmserve_binary();
    ::execl(binary.c_str(), binary.c_str(), "serve", "--port", p.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  httplib::Client c("127.0.0.1", port);
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    auto r = c.Get("/v2/models/demo-clip/ready");
    ready = r && r->status == 200;
    if (!ready) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(ready) << read_file(err);
  auto r = c.Post("/v1/embeddings", R"({"model": "demo-clip", "input": "hello"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["data"][0]["embedding"].size(), 128u);
  // The demo decoder, llama2.c's real stories260K: a newcomer's first completion is a story.
  for (int i = 0; i < 600; ++i) {
    auto ready_llm = c.Get("/v2/models/stories260K/ready");
    if (ready_llm && ready_llm->status == 200) break;
    std::this_thread::sleep_for(100ms);
  }
  auto story = c.Post("/v1/completions", R"({"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 20,
                                              "temperature": 0})",
                      "application/json");
  ASSERT_TRUE(story);
  EXPECT_EQ(story->status, 200) << story->body;
  EXPECT_EQ(json::parse(story->body)["choices"][0]["text"].get<std::string>().rfind(", there was a little girl", 0), 0u)
      << story->body;
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(err);
  EXPECT_NE(read_file(err).find("mmserve: serving on http://127.0.0.1:" + std::to_string(port)), std::string::npos);
  fs::remove(err);
}

}  // namespace
}  // namespace mmserve
