// TpGroup's error rules (core/cuda/tp_group.h), on the CPU: the group runs over a collective that sums host arrays
// (below), so the rules are checked in CI without a GPU. Every rank fine; every rank refusing the same input (a
// request error: returned as it is, the group serves on); one rank failing while the other waits inside an
// all-reduce (the waiting rank is released within the peer wait, the group is out of service for good, kInternal);
// every rank failing with kInternal; an aborted collective.
#include "core/cuda/tp_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace mmserve {
namespace {

// An in-place sum over ranks of host float arrays, with an abort that releases waiting ranks: the shape of
// StagedCollective without the device copies. device() is -1 (no GPU to select).
class HostCollective : public DeviceCollective {
 public:
  explicit HostCollective(int world) : world_(world), parts_(world) {}
  const char* kind() const override { return "host"; }
  int world_size() const override { return world_; }
  int device(int) const override { return -1; }
  bool graph_capturable() const override { return false; }
  Status all_reduce_sum(int rank, void* data, int64_t count, DType, cudaStream_t) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!broken_.ok()) return broken_;
    parts_[rank] = static_cast<float*>(data);
    const uint64_t phase = phase_;
    if (++arrived_ == world_) {
      std::vector<float> sum(static_cast<size_t>(count), 0.0f);
      for (float* p : parts_) {
        for (int64_t i = 0; i < count; ++i) sum[i] += p[i];
      }
      for (float* p : parts_) std::copy(sum.begin(), sum.end(), p);
      arrived_ = 0;
      ++phase_;
      cv_.notify_all();
      return ok_status();
    }
    cv_.wait(lock, [&] { return phase_ != phase || !broken_.ok(); });
    return broken_;
  }
  Status health() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return broken_;
  }
  void abort(const Status& why) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) broken_ = why;
    cv_.notify_all();
  }

 private:
  int world_;
  std::vector<float*> parts_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t phase_ = 0;
  Status broken_;
};

std::unique_ptr<TpGroup> group_of(int world) {
  return TpGroup::over(std::make_unique<HostCollective>(world));
}

TEST(TpGroup, RanksSumTogether) {
  auto group = group_of(3);
  std::vector<std::vector<float>> data(3);
  Status s = group->run([&](int r) {
    data[r] = {static_cast<float>(r + 1), 10.0f * static_cast<float>(r)};
    return group->collective()->all_reduce_sum(r, data[r].data(), 2, DType::kF32, nullptr);
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (const auto& d : data) EXPECT_EQ(d, (std::vector<float>{6.0f, 30.0f}));
  EXPECT_TRUE(group->health().ok());
}

TEST(TpGroup, AnInputEveryRankRefusesIsARequestErrorAndTheGroupServesOn) {
  auto group = group_of(2);
  Status s = group->run([](int) { return invalid_argument("token id 99999 is outside the vocabulary"); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocabulary"), std::string::npos) << s.to_string();
  EXPECT_TRUE(group->health().ok());
  s = group->run([](int) { return out_of_range("prompt too long"); });
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  float x[2] = {1, 2};
  std::vector<float> y(2);
  s = group->run([&](int r) {
    float* p = r == 0 ? x : y.data();
    return group->collective()->all_reduce_sum(r, p, 2, DType::kF32, nullptr);
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(TpGroup, ARankFailingAloneReleasesItsPeerAndBreaksTheGroup) {
  auto group = group_of(2);
  float buffer[4] = {};
  const auto start = std::chrono::steady_clock::now();
  Status rank0;
  Status s = group->run([&](int r) -> Status {
    if (r == 1) return internal_error("cudaErrorIllegalAddress (GPU 1 fell off the bus)");
    rank0 = group->collective()->all_reduce_sum(0, buffer, 4, DType::kF32, nullptr);  // waits for rank 1
    return rank0;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "the waiting rank must be released";
  EXPECT_FALSE(rank0.ok()) << "rank 0's all-reduce returns the abort";
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("out of service"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("GPU 1 fell off the bus"), std::string::npos) << s.to_string();
  // For good: the next call fails without running the body.
  bool ran = false;
  s = group->run([&](int) {
    ran = true;
    return ok_status();
  });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_FALSE(ran);
}

TEST(TpGroup, RanksFailingAlikeWithADeviceErrorBreakTheGroup) {
  auto group = group_of(2);
  Status s = group->run([](int) { return internal_error("cublasLt: execution failed"); });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(group->health().code(), StatusCode::kInternal);
}

TEST(TpGroup, AnAbortedCollectiveTakesTheGroupOutOfService) {
  auto group = group_of(2);
  group->collective()->abort(Status(StatusCode::kUnavailable, "NCCL: remote process exited"));
  Status s = group->health();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("remote process exited"), std::string::npos) << s.to_string();
  EXPECT_EQ(group->run([](int) { return ok_status(); }).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace mmserve
