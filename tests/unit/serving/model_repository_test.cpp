// Tests of the model lifecycle through InferenceServer: repository listing, models_to_load, unload/load at
// run time (queued requests fail with kUnavailable, nothing is completed twice), names that try to leave
// the repository (traversal, symlink escape), broken model directories and unsupported devices (FAILED with
// a reason while the server keeps serving the other models), the memory quota, drain.
#include <gtest/gtest.h>

#include <thread>

#include "server_test_util.h"

namespace mmserve::serving {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::request;
using testing::text_input;

class ModelLifecycle : public testing::RepositoryTest {
 protected:
  ModelStatus status_of(const std::string& name) {
    auto s = server_->model_status(name);
    EXPECT_TRUE(s.ok()) << name << ": " << s.status().to_string();
    return s.ok() ? *s : ModelStatus{};
  }
};

TEST_F(ModelLifecycle, ListsModelDirectoriesAndLoadsOnlyThoseAsked) {
  add_model("clip-a");
  add_model("clip-b");
  fs::create_directories(root_ / "not-a-model");  // no config.json
  std::ofstream(root_ / "README.txt") << "a file, not a model";
  ServerConfig c = config();
  c.models_to_load = {"clip-a"};
  InferenceServer& server = start(c);
  const std::vector<ModelStatus> models = server.models();
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].name, "clip-a");
  EXPECT_EQ(models[0].state, ModelState::kReady);
  EXPECT_EQ(models[0].architecture, "CLIPModel");
  EXPECT_GT(models[0].load_seconds, 0);
  EXPECT_GT(models[0].memory_bytes, 0);
  EXPECT_EQ(models[1].name, "clip-b");
  EXPECT_EQ(models[1].state, ModelState::kUnavailable);
  EXPECT_TRUE(server.ready()) << "only clip-a was asked for";
  EXPECT_EQ(server.infer(request("clip-b", {text_input("x")})).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(counter("mmserve_rejected_requests_total", {"model", "reason"}, {"clip-b", "not_ready"}), 1);

  // A model directory that appears later is listed and loadable.
  add_model("clip-c");
  EXPECT_EQ(server.models().size(), 3u);
  ASSERT_TRUE(server.load_model("clip-c").ok());
  EXPECT_TRUE(server.infer(request("clip-c", {text_input("x")})).ok());

  ServerConfig missing = config();
  missing.models_to_load = {"clip-a", "no-such-model"};
  auto other = InferenceServer::create(missing);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->start().code(), StatusCode::kNotFound);
}

TEST_F(ModelLifecycle, UnloadRefusesRequestsAndLoadBringsTheModelBack) {
  add_model("clip");
  InferenceServer& server = start();
  ASSERT_TRUE(server.infer(request("clip", {text_input("before")})).ok());
  const double memory = gauge("mmserve_model_memory_bytes", "clip");
  EXPECT_GT(memory, 0);

  ASSERT_TRUE(server.unload_model("clip").ok());
  EXPECT_EQ(status_of("clip").state, ModelState::kUnavailable);
  EXPECT_EQ(gauge("mmserve_model_ready", "clip"), 0);
  EXPECT_EQ(gauge("mmserve_model_memory_bytes", "clip"), 0);
  EXPECT_EQ(server.infer(request("clip", {text_input("x")})).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(server.model_metadata("clip").status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(server.ready()) << "an unloaded model is no longer wanted";
  EXPECT_TRUE(server.unload_model("clip").ok()) << "unloading twice is fine";
  EXPECT_EQ(server.unload_model("never-heard-of").code(), StatusCode::kNotFound);

  ASSERT_TRUE(server.load_model("clip").ok());
  EXPECT_EQ(status_of("clip").state, ModelState::kReady);
  EXPECT_TRUE(server.load_model("clip").ok()) << "loading a READY model is a no-op";
  EXPECT_TRUE(server.infer(request("clip", {text_input("after")})).ok());
  EXPECT_EQ(gauge("mmserve_model_memory_bytes", "clip"), memory);
}

TEST_F(ModelLifecycle, UnloadFailsQueuedRequestsAndCompletesEachOnce) {
  add_model("clip", "max_queue_delay_ms: 5000\n");  // the batcher holds the requests in the queue
  InferenceServer& server = start();
  std::vector<std::future<StatusOr<ResponseData>>> futures;
  for (int i = 0; i < 3; ++i) futures.push_back(submit_async(request("clip", {text_input("queued")})));
  for (int i = 0; i < 2000 && gauge("mmserve_queue_depth", "clip") < 3; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(gauge("mmserve_queue_depth", "clip"), 3);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(server.unload_model("clip").ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0) << "unload must not wait for the delay";
  for (auto& f : futures) {
    auto r = f.get();
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  }
  EXPECT_EQ(gauge("mmserve_inflight_requests", "clip"), 0);
}

TEST_F(ModelLifecycle, UnloadUnderLoadCompletesEveryRequestExactlyOnce) {
  add_model("clip", "max_batch_size: 2\nmax_queue_delay_ms: 0\nqueue_size: 1000\n");
  InferenceServer& server = start();
  std::atomic<bool> go{true};
  std::atomic<int> ok{0}, unavailable{0}, other{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      while (go) {
        auto r = server.infer(request("clip", {text_input("load"), text_input("more load")}));
        (r.ok() ? ok : r.status().code() == StatusCode::kUnavailable ? unavailable : other)++;
      }
    });
  }
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(server.unload_model("clip").ok());
  std::this_thread::sleep_for(20ms);
  go = false;
  for (auto& c : clients) c.join();
  std::printf("  %d served, %d refused as unavailable\n", ok.load(), unavailable.load());
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(unavailable.load(), 0);
  EXPECT_EQ(other.load(), 0);
}

TEST_F(ModelLifecycle, NamesThatLeaveTheRepositoryAreRefused) {
  add_model("clip");
  // A model directory outside the repository, reachable only through a symlink inside it.
  outside_ = root_.parent_path() / (root_.filename().string() + "_outside");
  copy_model(outside_ / "model");
  fs::create_directory_symlink(outside_ / "model", root_ / "escape");
  fs::create_directory_symlink(root_ / "clip", root_ / "alias");  // stays inside: allowed
  InferenceServer& server = start(config(), /*expect_ok=*/false);
  EXPECT_EQ(status_of("clip").state, ModelState::kReady);

  const std::vector<std::string> names = {"..", ".",   "../clip", "clip/..", "clip/../clip",          "/etc",
                                          "",   "a b", "clip\\x", "%2e%2e",  std::string("cl\0ip", 5)};
  for (const std::string& name : names) {
    EXPECT_EQ(server.load_model(name).code(), StatusCode::kInvalidArgument) << "'" << name << "'";
    EXPECT_EQ(server.unload_model(name).code(), StatusCode::kInvalidArgument) << "'" << name << "'";
  }
  Status escape = server.load_model("escape");
  EXPECT_EQ(escape.code(), StatusCode::kInvalidArgument) << escape.to_string();
  EXPECT_NE(escape.message().find("outside"), std::string::npos);
  for (const ModelStatus& m : server.models()) EXPECT_NE(m.name, "escape") << "an escaping symlink is not listed";
  EXPECT_EQ(server.load_model("no-such-dir").code(), StatusCode::kNotFound);
  EXPECT_EQ(status_of("alias").state, ModelState::kReady) << "a symlink inside the repository is fine";
}

TEST_F(ModelLifecycle, BrokenModelsFailWithAReasonWhileTheServerStaysUp) {
  add_model("clip");
  fs::create_directories(root_ / "bad-json");
  std::ofstream(root_ / "bad-json" / "config.json") << "{not json";
  copy_model(root_ / "no-weights");
  fs::remove(root_ / "no-weights" / "model.safetensors");
  add_model("bad-yaml", "max_batch_size: lots\n");
  add_model("on-gpu", "device: cuda:99\n");  // no such GPU, with or without a CUDA build
  InferenceServer& server = start();
  EXPECT_TRUE(server.live());
  EXPECT_FALSE(server.ready()) << "wanted models failed";
  EXPECT_EQ(status_of("clip").state, ModelState::kReady);
  const std::pair<const char*, const char*> failures[] = {{"bad-json", "config.json"},
                                                          {"no-weights", "safetensors"},
                                                          {"bad-yaml", "max_batch_size"},
                                                          {"on-gpu", "cuda:99"}};
  for (const auto& [name, why] : failures) {
    const ModelStatus s = status_of(name);
    EXPECT_EQ(s.state, ModelState::kFailed) << name;
    EXPECT_NE(s.reason.find(why), std::string::npos) << name << ": " << s.reason;
    auto r = server.infer(request(name, {text_input("x")}));
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << name;
    EXPECT_NE(r.status().message().find("FAILED"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(server.infer(request("clip", {text_input("still serving")})).ok());

  // Fixing the directory and loading again recovers.
  std::ofstream(root_ / "bad-yaml" / "mmserve.yaml") << "max_batch_size: 4\n";
  EXPECT_TRUE(server.load_model("bad-yaml").ok());
  EXPECT_EQ(status_of("bad-yaml").state, ModelState::kReady);
}

TEST_F(ModelLifecycle, MemoryQuotaRefusesAModelThatDoesNotFit) {
  add_model("small-quota", "memory_quota_mb: 1\n");  // the fixture's f32 weights alone are ~2.4 MB
  add_model("fits", "memory_quota_mb: 64\n");
  add_model("two-instances", "memory_quota_mb: 64\ninstances: 2\n");
  InferenceServer& server = start();
  const ModelStatus refused = status_of("small-quota");
  EXPECT_EQ(refused.state, ModelState::kFailed);
  EXPECT_NE(refused.reason.find("memory quota"), std::string::npos) << refused.reason;
  EXPECT_NE(refused.reason.find("RESOURCE_EXHAUSTED"), std::string::npos) << refused.reason;
  const ModelStatus one = status_of("fits"), two = status_of("two-instances");
  EXPECT_EQ(one.state, ModelState::kReady);
  EXPECT_EQ(two.state, ModelState::kReady);
  EXPECT_GT(one.memory_bytes, 2'000'000) << "weights (~2.4 MB of f32) + arena";
  EXPECT_LE(one.memory_bytes, 64LL << 20);
  EXPECT_EQ(two.memory_bytes, 2 * one.memory_bytes);
  EXPECT_TRUE(server.infer(request("two-instances", {text_input("x")})).ok());
}

TEST_F(ModelLifecycle, DrainWaitsForAdmittedRequestsAndStopsAdmitting) {
  add_model("clip", "max_queue_delay_ms: 150\n");
  InferenceServer& server = start();
  std::vector<std::future<StatusOr<ResponseData>>> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(submit_async(request("clip", {text_input("drain me")})));
  EXPECT_TRUE(server.drain(5s));
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(0s), std::future_status::ready) << "drain returned before a request completed";
    EXPECT_TRUE(f.get().ok());
  }
  EXPECT_FALSE(server.ready());
  EXPECT_EQ(server.infer(request("clip", {text_input("late")})).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(counter("mmserve_rejected_requests_total", {"model", "reason"}, {"clip", "draining"}), 1);
}

TEST_F(ModelLifecycle, DrainTimesOutWhenWorkOutlastsIt) {
  add_model("clip", "max_queue_delay_ms: 1000\n");
  InferenceServer& server = start();
  auto f = submit_async(request("clip", {text_input("slow")}));
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(server.drain(100ms));
  const double waited = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_GE(waited, 100.0);
  EXPECT_LT(waited, 900.0);
  EXPECT_TRUE(f.get().ok()) << "admitted work still finishes";
}

TEST(InferenceServerCreate, RefusesAMissingRepositoryAndBadSettings) {
  ServerConfig c;
  c.model_repository = "/nonexistent/mmserve-models";
  EXPECT_EQ(InferenceServer::create(c).status().code(), StatusCode::kNotFound);
  c.model_repository = ::testing::TempDir();
  c.preprocess_queue = 0;
  EXPECT_EQ(InferenceServer::create(c).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::serving
