// Helpers for the InferenceServer tests: a temporary model repository holding copies of the tiny CLIP fixture
// (tests/fixtures/clip-tiny-quickgelu-f32) with a chosen mmserve.yaml, HF's goldens for it, and requests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/clip_executor.h"
#include "engine/whisper_executor.h"
#include "serving/inference_server.h"
#include "test_paths.h"

namespace mmserve::serving::testing {

namespace fs = std::filesystem;

inline std::string fixture(const std::string& relative) {
  return std::string(MMSERVE_FIXTURES_DIR) + "/" + relative;
}
inline const std::string kClipFixture = fixture("clip-tiny-quickgelu-f32");

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// max |a - b| / max |b| (as tests/conformance/golden.h measures).
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

// HF's outputs for the fixture (tools/reference/make_clip_fixtures.py).
struct Golden {
  Golden() {
    std::ifstream meta_file(kClipFixture + "/golden.json");
    meta = nlohmann::json::parse(meta_file);
    auto file = SafetensorsFile::open(kClipFixture + "/golden.safetensors");
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    if (file.ok()) file_ = std::move(*file);
  }
  std::vector<float> row(const std::string& name, int64_t r) const {
    const TensorInfo* t = file_->find(name);
    EXPECT_NE(t, nullptr) << name;
    const int64_t cols = t->numel() / t->shape[0];
    const float* p = reinterpret_cast<const float*>(t->data) + r * cols;
    return std::vector<float>(p, p + cols);
  }
  float at(const std::string& name, int64_t r, int64_t c) const { return row(name, r)[static_cast<size_t>(c)]; }
  int64_t tokens(int64_t r) const {  // real tokens of text r (attention_mask)
    const TensorInfo* t = file_->find("attention_mask");
    const int64_t cols = t->shape[1];
    int64_t n = 0;
    for (int64_t c = 0; c < cols; ++c) n += reinterpret_cast<const int64_t*>(t->data)[r * cols + c];
    return n;
  }
  std::string text(size_t i) const { return meta["texts"][i].get<std::string>(); }
  std::string image_path(size_t i) const { return fixture("images/" + meta["images"][i].get<std::string>()); }

  nlohmann::json meta;
  std::unique_ptr<SafetensorsFile> file_;
};

// The family outputs of a response (a failed expectation, not a crash, when it is another family's).
inline const engine::ClipOutput& clip_of(const ResponseData& r) {
  static const engine::ClipOutput kNone;
  const auto* out = engine::output_as<engine::ClipOutput>(r.output);
  EXPECT_NE(out, nullptr) << "not a CLIP output";
  return out ? *out : kNone;
}
inline const engine::Transcript& transcript_of(const ResponseData& r) {
  static const engine::Transcript kNone;
  const auto* out = engine::output_as<engine::TranscriptOutput>(r.output);
  EXPECT_NE(out, nullptr) << "not a transcript";
  return out ? out->transcript : kNone;
}
// A Whisper request's parameters (decoding options and the optional streaming callback).
inline std::shared_ptr<engine::WhisperParams> whisper_params(engine::TranscribeOptions options,
                                                             engine::SegmentCallback on_segment = nullptr) {
  auto params = std::make_shared<engine::WhisperParams>();
  params->options = std::move(options);
  params->on_segment = std::move(on_segment);
  return params;
}

inline InputItem text_input(const std::string& text) {
  InputItem item;
  item.kind = InputKind::kText;
  item.text = text;
  return item;
}

inline InputItem image_input(const std::string& bytes) {
  InputItem item;
  item.kind = InputKind::kImageBytes;
  item.image_bytes = bytes;
  return item;
}

inline RequestSpec request(const std::string& model, std::vector<InputItem> inputs) {
  RequestSpec spec;
  spec.model = model;
  spec.inputs = std::move(inputs);
  return spec;
}

// A fresh repository directory per test; models are copies of the fixture (no symlinks).
class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::path(::testing::TempDir()) /
            ("mmserve_repo_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
    if (!outside_.empty()) fs::remove_all(outside_, ec);
  }

  // Copies the fixture to DIR (skipping the goldens) and writes its mmserve.yaml when given.
  static void copy_model(const fs::path& dir, const std::string& yaml = "") {
    fs::create_directories(dir);
    for (const char* f :
         {"config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(kClipFixture) / f, dir / f, fs::copy_options::overwrite_existing);
    }
    if (!yaml.empty()) std::ofstream(dir / "mmserve.yaml") << yaml;
  }
  void add_model(const std::string& name, const std::string& yaml = "") { copy_model(root_ / name, yaml); }

  ServerConfig config() const {
    ServerConfig c;
    c.model_repository = root_.string();
    return c;
  }
  // Creates and starts a server (start()'s status is expected OK unless told).
  InferenceServer& start(ServerConfig c, bool expect_ok = true) {
    auto server = InferenceServer::create(c);
    EXPECT_TRUE(server.ok()) << server.status().to_string();
    server_ = std::move(*server);
    Status started = server_->start();
    if (expect_ok) {
      EXPECT_TRUE(started.ok()) << started.to_string();
    }
    start_status_ = started;
    return *server_;
  }
  InferenceServer& start() { return start(config()); }

  // Submits and returns a future of the completion (which must run exactly once).
  std::future<StatusOr<ResponseData>> submit_async(RequestSpec spec) {
    auto promise = std::make_shared<std::promise<StatusOr<ResponseData>>>();
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto future = promise->get_future();
    server_->submit(std::move(spec), [promise, calls](StatusOr<ResponseData> r) {
      EXPECT_EQ(calls->fetch_add(1), 0) << "completion called twice";
      promise->set_value(std::move(r));
    });
    return future;
  }

  double counter(const std::string& name, const std::vector<std::string>& labels,
                 const std::vector<std::string>& values) {
    return server_->metrics().counter(name, "", labels).with(values).value();
  }
  double gauge(const std::string& name, const std::string& model) {
    return server_->metrics().gauge(name, "", {"model"}).with({model}).value();
  }
  Histogram& histogram(const std::string& name, const std::vector<std::string>& labels,
                       const std::vector<std::string>& values) {
    return server_->metrics().histogram(name, "", labels).with(values);
  }

  fs::path root_;
  fs::path outside_;
  std::unique_ptr<InferenceServer> server_;
  Status start_status_;
};

}  // namespace mmserve::serving::testing
