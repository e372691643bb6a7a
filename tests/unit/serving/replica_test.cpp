// Tests of replicas (model_runtime_replicas.cpp) over a real InferenceServer holding the tiny CLIP fixture,
// with CPU instances standing in for GPUs: `devices: [cpu, cpu]` places two replicas that both take work and
// are listed with their devices; a replica whose executor fails with a device fault (injected through the
// MMSERVE_TEST_REPLICA_FAULTS seam) leaves the rotation (metric 0, metadata says why), its batch's requests are
// answered by the other replica with HF's golden results, and the server stays ready; with both failed the
// model answers 503 (kUnavailable) and neither it nor the server is ready. Also: which codes count as device
// faults, and the seam's parser.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "server_test_util.h"
#include "serving/model_runtime.h"

namespace mmserve::serving {
namespace {

using namespace std::chrono_literals;
using testing::clip_of;
using testing::Golden;
using testing::image_input;
using testing::read_bytes;
using testing::relative_error;
using testing::request;
using testing::text_input;

constexpr double kTolerance = 1e-4;
constexpr const char* kTwoCpuReplicas = "devices: [cpu, cpu]\nthreads: 1\nmax_queue_delay_ms: 2\n";

// Sets MMSERVE_TEST_REPLICA_FAULTS for one test.
class FaultSeam {
 public:
  explicit FaultSeam(const char* value) { ::setenv("MMSERVE_TEST_REPLICA_FAULTS", value, 1); }
  ~FaultSeam() { ::unsetenv("MMSERVE_TEST_REPLICA_FAULTS"); }
};

class Replicas : public testing::RepositoryTest {
 protected:
  double replica_gauge(const std::string& name, const std::string& replica) {
    return server_->metrics().gauge(name, "", {"model", "replica", "device"}).with({"clip", replica, "cpu"}).value();
  }
  double replica_counter(const std::string& name, const std::string& replica) {
    return server_->metrics().counter(name, "", {"model", "replica", "device"}).with({"clip", replica, "cpu"}).value();
  }
  size_t goldens() const { return golden_.meta["texts"].size(); }
  RequestSpec spec_for(int i) {
    const size_t k = static_cast<size_t>(i / 2) % goldens();
    return i % 2 == 0 ? request("clip", {text_input(golden_.text(k))})
                      : request("clip", {image_input(read_bytes(golden_.image_path(k)))});
  }
  // Sends `count` requests at once (texts and images alternating) and checks every answer against HF's goldens.
  void send_round(int count) {
    std::vector<std::future<StatusOr<ResponseData>>> futures;
    for (int i = 0; i < count; ++i) futures.push_back(submit_async(spec_for(i)));
    for (int i = 0; i < count; ++i) {
      StatusOr<ResponseData> r = futures[static_cast<size_t>(i)].get();
      ASSERT_TRUE(r.ok()) << "request " << i << ": " << r.status().to_string();
      const size_t k = static_cast<size_t>(i / 2) % goldens();
      EXPECT_LE(relative_error(clip_of(*r).embeddings[0], golden_.row(i % 2 ? "image_embeds" : "text_embeds", k)), kTolerance)
          << "request " << i;
    }
  }

  Golden golden_;
};

TEST_F(Replicas, TwoCpuReplicasBothServeAndAreListed) {
  add_model("clip", kTwoCpuReplicas);
  InferenceServer& server = start();
  ASSERT_TRUE(server.ready());
  auto metadata = server.model_metadata("clip");
  ASSERT_TRUE(metadata.ok()) << metadata.status().to_string();
  ASSERT_EQ(metadata->replicas.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(metadata->replicas[i].index, i);
    EXPECT_EQ(metadata->replicas[i].device, "cpu");
    EXPECT_TRUE(metadata->replicas[i].healthy);
    EXPECT_EQ(replica_gauge("mmserve_replica_healthy", std::to_string(i)), 1);
  }
  // Both engine threads pull from the one queue: under concurrent load both replicas get batches.
  for (int round = 0; round < 50; ++round) {
    send_round(8);
    if (replica_counter("mmserve_replica_batches_total", "0") > 0 &&
        replica_counter("mmserve_replica_batches_total", "1") > 0) {
      break;
    }
  }
  for (const char* r : {"0", "1"}) {
    EXPECT_GT(replica_counter("mmserve_replica_batches_total", r), 0) << "replica " << r;
    EXPECT_GT(replica_counter("mmserve_replica_items_total", r), 0) << "replica " << r;
    EXPECT_GT(replica_counter("mmserve_replica_busy_seconds_total", r), 0) << "replica " << r;
  }
  std::printf("  batches: replica 0 %.0f, replica 1 %.0f\n", replica_counter("mmserve_replica_batches_total", "0"),
              replica_counter("mmserve_replica_batches_total", "1"));
}

TEST_F(Replicas, AFaultyReplicaLeavesTheRotationAndItsRequestsAreServedByTheOther) {
  FaultSeam seam("clip:1:all");  // replica 1 fails every batch it takes, as a broken GPU would
  add_model("clip", kTwoCpuReplicas);
  InferenceServer& server = start();
  ASSERT_TRUE(server.ready());
  // Replica 1 takes some batch sooner or later (both threads wait on the queue); every request, including
  // those of the batch it failed, must still be answered correctly (by replica 0).
  for (int round = 0; round < 100 && replica_gauge("mmserve_replica_healthy", "1") == 1; ++round) send_round(8);
  ASSERT_EQ(replica_gauge("mmserve_replica_healthy", "1"), 0) << "replica 1 never took a batch";
  EXPECT_EQ(replica_gauge("mmserve_replica_healthy", "0"), 1);
  EXPECT_EQ(replica_counter("mmserve_replica_batches_total", "1"), 1);  // the failed one
  EXPECT_GT(replica_counter("mmserve_replica_items_total", "1"), 0);
  EXPECT_EQ(counter("mmserve_requests_total", {"model", "outcome"}, {"clip", "error"}), 0);
  EXPECT_EQ(counter("mmserve_requests_total", {"model", "outcome"}, {"clip", "rejected"}), 0);

  EXPECT_TRUE(server.ready());
  auto status = server.model_status("clip");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ModelState::kReady);
  auto metadata = server.model_metadata("clip");
  ASSERT_TRUE(metadata.ok());
  ASSERT_EQ(metadata->replicas.size(), 2u);
  EXPECT_TRUE(metadata->replicas[0].healthy);
  EXPECT_FALSE(metadata->replicas[1].healthy);
  EXPECT_NE(metadata->replicas[1].fault.find("injected device fault"), std::string::npos)
      << metadata->replicas[1].fault;

  // Out of rotation: it takes no more batches, and the model keeps serving on replica 0.
  const double before = replica_counter("mmserve_replica_batches_total", "0");
  send_round(8);
  EXPECT_EQ(replica_counter("mmserve_replica_batches_total", "1"), 1);
  EXPECT_GT(replica_counter("mmserve_replica_batches_total", "0"), before);
}

TEST_F(Replicas, WithEveryReplicaFailedTheModelAnswers503AndIsNotReady) {
  FaultSeam seam("clip:0:all,clip:1:all");
  add_model("clip", kTwoCpuReplicas);
  InferenceServer& server = start();
  ASSERT_TRUE(server.ready());
  // The first replica to take it fails; the request is re-queued once, the other replica fails it too: 503.
  auto r = server.infer(request("clip", {text_input("a photo of a cat")}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find("failed on two replicas"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(replica_gauge("mmserve_replica_healthy", "0"), 0);
  EXPECT_EQ(replica_gauge("mmserve_replica_healthy", "1"), 0);
  EXPECT_EQ(gauge("mmserve_model_ready", "clip"), 0);
  EXPECT_FALSE(server.ready());
  auto status = server.model_status("clip");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ModelState::kUnavailable);
  EXPECT_NE(status->reason.find("no healthy replica"), std::string::npos) << status->reason;
  // Later requests are refused at once with the reason.
  auto later = server.infer(request("clip", {text_input("a photo of a dog")}));
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(later.status().message().find("no healthy replica"), std::string::npos) << later.status().to_string();
  // Unloading and loading again gives fresh replicas (the seam is read at load: cleared here).
  ::unsetenv("MMSERVE_TEST_REPLICA_FAULTS");
  ASSERT_TRUE(server.unload_model("clip").ok());
  ASSERT_TRUE(server.load_model("clip").ok());
  EXPECT_TRUE(server.ready());
  EXPECT_TRUE(server.infer(request("clip", {text_input("a photo of a cat")})).ok());
}

TEST_F(Replicas, ASingleReplicaFaultIs503AndNotReady) {
  FaultSeam seam("clip:0");  // one batch only: a single replica has nowhere to retry
  add_model("clip");
  InferenceServer& server = start();
  auto r = server.infer(request("clip", {image_input(read_bytes(golden_.image_path(0)))}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find("no healthy replica"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(server.ready());
}

TEST_F(Replicas, ABadSeamValueOrPlacementFailsTheLoadWithTheReason) {
  {
    FaultSeam seam("clip:5");
    add_model("clip", kTwoCpuReplicas);
    InferenceServer& server = start(config(), /*expect_ok=*/true);
    auto status = server.model_status("clip");
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->state, ModelState::kFailed);
    EXPECT_NE(status->reason.find("no replica 5"), std::string::npos) << status->reason;
  }
  add_model("few", "devices: [cpu, cpu]\ninstances: 1\n");
  ASSERT_TRUE(server_->load_model("few").code() == StatusCode::kInvalidArgument);
  auto status = server_->model_status("few");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ModelState::kFailed);
  EXPECT_NE(status->reason.find("instances"), std::string::npos) << status->reason;
}

TEST(ReplicaFaults, OnlyInternalErrorsMeanTheDeviceIsBroken) {
  EXPECT_TRUE(is_device_fault(internal_error("CUDA error: an illegal memory access was encountered")));
  for (StatusCode code : {StatusCode::kInvalidArgument, StatusCode::kTooLarge, StatusCode::kOutOfRange,
                          StatusCode::kUnimplemented, StatusCode::kResourceExhausted, StatusCode::kDeadlineExceeded,
                          StatusCode::kCancelled, StatusCode::kUnavailable}) {
    EXPECT_FALSE(is_device_fault(Status(code, "x"))) << status_code_name(code);
  }
  EXPECT_FALSE(is_device_fault(ok_status()));
}

TEST(ReplicaFaults, TheSeamParsesItsVariableStrictly) {
  auto faults = parse_injected_faults("clip:1,other:0:all,clip:0:3", "clip");
  ASSERT_TRUE(faults.ok()) << faults.status().to_string();
  EXPECT_EQ(*faults, (std::vector<std::pair<int, int>>{{1, 1}, {0, 3}}));
  faults = parse_injected_faults("clip:2:all", "clip");
  ASSERT_TRUE(faults.ok());
  EXPECT_EQ(*faults, (std::vector<std::pair<int, int>>{{2, -1}}));
  EXPECT_TRUE(parse_injected_faults("", "clip")->empty());
  for (const char* bad : {"clip", "clip:", "clip:x", "clip:1:0", "clip:1:some", ":1", "clip:1:2:3", "clip:-1"}) {
    auto r = parse_injected_faults(bad, "clip");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("MMSERVE_TEST_REPLICA_FAULTS"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace mmserve::serving
