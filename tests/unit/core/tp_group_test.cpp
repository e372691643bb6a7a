// TpGroup's error rules (core/cuda/tp_group.h), on the CPU: the group runs over the staged collective with host-memory
// ranks, so the rules (and the collective's barriers and abort) are checked in CI without a GPU. Every rank fine; every
// rank refusing the same input (a request error: returned as it is, the group serves on); one rank failing while the
// other waits inside an all-reduce (the waiting rank is released within the peer wait, the group is out of service for
// good, kInternal); every rank failing with kInternal; an aborted collective.
#include "core/cuda/tp_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace mmserve {
namespace {

// A group whose ranks sum host arrays through the staged collective (no GPU involved).
std::unique_ptr<TpGroup> group_of(int world) {
  auto collective = StagedCollective::create(std::vector<int>(static_cast<size_t>(world), StagedCollective::kHostRank));
  EXPECT_TRUE(collective.ok()) << collective.status().to_string();
  return TpGroup::over(std::move(*collective));
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
