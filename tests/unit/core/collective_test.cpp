// StagedCollective (core/cuda/collective.h): the host-staged all-reduce that lets tensor-parallel ranks share one
// GPU. Exact sums over 1, 2 and 3 ranks on GPU 0 driven by RankWorkers (small integers: exact in f32), every rank
// getting the same result; abort() releases a rank that waits for a peer that never comes; argument errors. Skipped,
// with the reason, without a GPU.
#include "core/cuda/collective.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "core/rank_workers.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve {
namespace {

float value(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * (static_cast<int>(i % 11) - 5));
}

TEST(StagedCollective, SumsOverRanksSharingOneGpu) {
  MMSERVE_REQUIRE_GPU();
  for (int world : {1, 2, 3}) {
    auto made = StagedCollective::create(std::vector<int>(static_cast<size_t>(world), 0));
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    StagedCollective& c = **made;
    EXPECT_EQ(c.world_size(), world);
    EXPECT_FALSE(c.graph_capturable());
    const int64_t count = 4099;
    std::vector<float*> buffers(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      std::vector<float> host(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) host[i] = value(r, i);
      ASSERT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buffers[r]), count * sizeof(float)));
      ASSERT_CUDA_OK(cudaMemcpy(buffers[r], host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    }
    RankWorkers workers(world);
    std::vector<Status> results(static_cast<size_t>(world));
    // Twice: the second call reuses the staging and must not see the first call's data.
    for (int round = 0; round < 2; ++round) {
      workers.run([&](int r) {
        cudaSetDevice(0);
        results[r] = c.all_reduce_sum(r, buffers[r], count, DType::kF32, nullptr);
      });
      for (int r = 0; r < world; ++r) ASSERT_TRUE(results[r].ok()) << results[r].to_string();
    }
    for (int r = 0; r < world; ++r) {
      std::vector<float> got(static_cast<size_t>(count));
      ASSERT_CUDA_OK(cudaMemcpy(got.data(), buffers[r], count * sizeof(float), cudaMemcpyDeviceToHost));
      int mismatches = 0;
      for (int64_t i = 0; i < count; ++i) {
        float once = 0.0f;
        for (int q = 0; q < world; ++q) once += value(q, i);
        const float expect = once * static_cast<float>(world);  // the second round sums the first one's sums
        if (got[i] != (world == 1 ? value(0, i) : expect) && ++mismatches <= 3) {
          ADD_FAILURE() << world << " ranks, rank " << r << " element " << i << ": " << got[i];
        }
      }
      EXPECT_EQ(mismatches, 0);
      cudaFree(buffers[r]);
    }
    EXPECT_TRUE(c.health().ok());
  }
}

TEST(StagedCollective, AbortReleasesARankWaitingForAPeer) {
  MMSERVE_REQUIRE_GPU();
  auto made = StagedCollective::create({0, 0});
  ASSERT_TRUE(made.ok());
  StagedCollective& c = **made;
  float* buffer = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buffer), 64 * sizeof(float)));
  // Rank 0 enters the all-reduce; rank 1 never does (its GPU "failed").
  std::future<Status> waiting = std::async(std::launch::async, [&] {
    cudaSetDevice(0);
    return c.all_reduce_sum(0, buffer, 64, DType::kF32, nullptr);
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout) << "it must wait";
  c.abort(internal_error("rank 1 lost its GPU"));
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "abort must release it";
  const Status s = waiting.get();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("rank 1 lost its GPU"), std::string::npos) << s.to_string();
  EXPECT_EQ(c.health().code(), StatusCode::kInternal);  // sticky
  EXPECT_EQ(c.all_reduce_sum(1, buffer, 64, DType::kF32, nullptr).code(), StatusCode::kInternal);
  cudaFree(buffer);
}

TEST(StagedCollective, BadArgumentsAreErrors) {
  MMSERVE_REQUIRE_GPU();
  EXPECT_EQ(StagedCollective::create({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StagedCollective::create({-2}).status().code(), StatusCode::kInvalidArgument);  // -1 is kHostRank
  EXPECT_EQ(StagedCollective::create({4096}).status().code(), StatusCode::kInvalidArgument);
  auto made = StagedCollective::create({0, 0});
  ASSERT_TRUE(made.ok());
  float* buffer = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buffer), 16 * sizeof(float)));
  EXPECT_EQ((*made)->all_reduce_sum(2, buffer, 16, DType::kF32, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*made)->all_reduce_sum(0, buffer, -1, DType::kF32, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*made)->all_reduce_sum(0, buffer, 16, DType::kBF16, nullptr).code(), StatusCode::kUnimplemented);
  EXPECT_EQ((*made)->all_reduce_sum(0, nullptr, 16, DType::kF32, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*made)->health().ok());  // none of these reached the other rank
  cudaFree(buffer);
}

}  // namespace
}  // namespace mmserve
