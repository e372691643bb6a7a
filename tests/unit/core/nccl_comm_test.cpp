// NcclComm: an in-place sum all-reduce over every visible GPU (1 or 2 here; any count works) in f32, f16 and bf16,
// world size 1, argument errors, and the NCCL -> Status mapping. The GPU tests are skipped, with the reason, on a
// machine without a GPU; the mapping and argument tests run everywhere.
#include "core/cuda/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/rank_workers.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve {
namespace {

using kernels::cuda_test::decode;
using kernels::cuda_test::encode;

TEST(NcclComm, ErrorsMapToStatusCodes) {
  EXPECT_TRUE(nccl_status(ncclSuccess, "x").ok());
  Status s = nccl_status(ncclInvalidArgument, "ncclAllReduce", "null buffer");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ncclAllReduce"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("null buffer"), std::string::npos) << s.message();
  EXPECT_EQ(nccl_status(ncclRemoteError, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(nccl_status(ncclSystemError, "x").code(), StatusCode::kInternal);
  EXPECT_EQ(nccl_status(ncclUnhandledCudaError, "x").code(), StatusCode::kInternal);
}

TEST(NcclComm, DtypesMapToNcclTypes) {
  EXPECT_EQ(*nccl_dtype(DType::kF32), ncclFloat32);
  EXPECT_EQ(*nccl_dtype(DType::kF16), ncclFloat16);
  EXPECT_EQ(*nccl_dtype(DType::kBF16), ncclBfloat16);
  EXPECT_EQ(nccl_dtype(DType::kF8E4M3).status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(nccl_dtype(DType::kI4Packed).status().code(), StatusCode::kUnimplemented);
}

TEST(NcclComm, EmptyDeviceListIsAnError) {
  StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::create({});
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
}

// Without a usable GPU, create() is a clear error, not a crash (runs only where there is no GPU).
TEST(NcclComm, NoGpuIsAFailedPrecondition) {
  std::string reason;
  if (cuda_device_available(&reason)) GTEST_SKIP() << "a GPU is visible: this checks the no-GPU path";
  StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::create({0});
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("no usable GPU"), std::string::npos) << comm.status().message();
}

// One device allocation on a given device, freed at scope exit.
class RankBuffer {
 public:
  RankBuffer(int device, size_t bytes) : device_(device) {
    cudaSetDevice(device_);
    if (cudaMalloc(&data_, bytes) != cudaSuccess) data_ = nullptr;
    if (cudaStreamCreate(&stream_) != cudaSuccess) stream_ = nullptr;
  }
  ~RankBuffer() {
    cudaSetDevice(device_);
    if (stream_) cudaStreamDestroy(stream_);
    if (data_) cudaFree(data_);
  }
  RankBuffer(const RankBuffer&) = delete;
  RankBuffer& operator=(const RankBuffer&) = delete;
  void* data() const { return data_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_ = 0;
  void* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

std::vector<int> visible_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return {};
  std::vector<int> devices;
  for (int d = 0; d < count; ++d) devices.push_back(d);
  return devices;
}

// Rank r holds (r + 1) * ((i % 13) - 6): small integers, exact in f16 and bf16, so the sums are compared exactly.
float value(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * (static_cast<int>(i % 13) - 6));
}

void check_all_reduce(const std::vector<int>& devices, DType dtype, int64_t count) {
  std::string why;
  if (!nccl_available(&why)) GTEST_SKIP() << "NCCL test skipped: " << why;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " over " + std::to_string(devices.size()) + " GPU(s), " +
               std::to_string(count) + " elements");
  StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::create(devices);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  ASSERT_EQ((*comm)->world_size(), static_cast<int>(devices.size()));
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(nvls, nullptr);
  EXPECT_STREQ(nvls, "0");

  const int world = static_cast<int>(devices.size());
  std::vector<std::unique_ptr<RankBuffer>> buffers;
  std::vector<NcclRankBuffer> ranks;
  for (int r = 0; r < world; ++r) {
    std::vector<float> host(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) host[i] = value(r, i);
    const std::vector<uint8_t> bytes = encode(host, dtype);
    buffers.push_back(std::make_unique<RankBuffer>(devices[r], bytes.size()));
    ASSERT_NE(buffers.back()->data(), nullptr);
    ASSERT_CUDA_OK(cudaMemcpy(buffers.back()->data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    ranks.push_back({buffers.back()->data(), buffers.back()->stream()});
  }

  Status s = (*comm)->all_reduce_sum(ranks, count, dtype);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < world; ++r) {
    ASSERT_CUDA_OK(cudaSetDevice(devices[r]));
    ASSERT_CUDA_OK(cudaStreamSynchronize(buffers[r]->stream()));
    std::vector<uint8_t> bytes(storage_bytes(dtype, count));
    ASSERT_CUDA_OK(cudaMemcpy(bytes.data(), buffers[r]->data(), bytes.size(), cudaMemcpyDeviceToHost));
    const std::vector<float> got = decode(bytes, dtype);
    int mismatches = 0;
    for (int64_t i = 0; i < count; ++i) {
      float expect = 0.0f;
      for (int q = 0; q < world; ++q) expect += value(q, i);
      if (got[i] != expect && ++mismatches <= 5) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << got[i] << " != " << expect;
      }
    }
    EXPECT_EQ(mismatches, 0) << "rank " << r;
  }
  EXPECT_TRUE((*comm)->health().ok());
}

TEST(NcclCommGpu, AllReduceSumsOverEveryVisibleGpu) {
  MMSERVE_REQUIRE_GPU();
  const std::vector<int> devices = visible_devices();
  ASSERT_FALSE(devices.empty());
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t count : {1, 1037, 1 << 20}) check_all_reduce(devices, dtype, count);
  }
}

TEST(NcclCommGpu, WorldSizeOneIsTheIdentity) {
  MMSERVE_REQUIRE_GPU();
  check_all_reduce({0}, DType::kF32, 4099);
}

// The DeviceCollective entry: each rank's thread issues its own call (as the tensor-parallel forwards do).
TEST(NcclCommGpu, PerRankCallsFromRankThreadsSum) {
  MMSERVE_REQUIRE_GPU();
  std::string why;
  if (!nccl_available(&why)) GTEST_SKIP() << "NCCL test skipped: " << why;
  const std::vector<int> devices = visible_devices();
  StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::create(devices);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  const int world = static_cast<int>(devices.size());
  const int64_t count = 65537;
  std::vector<std::unique_ptr<RankBuffer>> buffers;
  for (int r = 0; r < world; ++r) {
    std::vector<float> host(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) host[i] = value(r, i);
    buffers.push_back(std::make_unique<RankBuffer>(devices[r], count * sizeof(float)));
    ASSERT_CUDA_OK(cudaMemcpy(buffers.back()->data(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }
  RankWorkers workers(world);
  std::vector<Status> results(static_cast<size_t>(world));
  workers.run([&](int r) {
    cudaSetDevice(devices[r]);
    results[r] = (*comm)->all_reduce_sum(r, buffers[r]->data(), count, DType::kF32, buffers[r]->stream());
    if (results[r].ok() && cudaStreamSynchronize(buffers[r]->stream()) != cudaSuccess) {
      results[r] = internal_error("stream synchronize");
    }
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].to_string();
    std::vector<float> got(static_cast<size_t>(count));
    ASSERT_CUDA_OK(cudaMemcpy(got.data(), buffers[r]->data(), count * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; i += 97) {
      float expect = 0.0f;
      for (int q = 0; q < world; ++q) expect += value(q, i);
      ASSERT_EQ(got[i], expect) << "rank " << r << " element " << i;
    }
  }
  // abort(): the group is out of service, with the reason, and later calls fail without touching NCCL.
  (*comm)->abort(Status(StatusCode::kUnavailable, "test: peer lost"));
  EXPECT_EQ((*comm)->health().code(), StatusCode::kUnavailable);
  EXPECT_NE((*comm)->health().message().find("peer lost"), std::string::npos);
  EXPECT_EQ((*comm)->all_reduce_sum(0, buffers[0]->data(), count, DType::kF32, buffers[0]->stream()).code(),
            StatusCode::kUnavailable);
}

TEST(NcclCommGpu, BadArgumentsAreErrors) {
  MMSERVE_REQUIRE_GPU();
  const std::vector<int> devices = visible_devices();
  const int count = static_cast<int>(devices.size());
  EXPECT_EQ(NcclComm::create({0, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclComm::create({count}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclComm::create({-1}).status().code(), StatusCode::kInvalidArgument);
  std::string why;
  if (!nccl_available(&why)) GTEST_SKIP() << "NCCL test skipped (the device checks above ran): " << why;

  StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::create(devices);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  RankBuffer buffer(0, 64);
  std::vector<NcclRankBuffer> too_many(devices.size() + 1, NcclRankBuffer{buffer.data(), buffer.stream()});
  EXPECT_EQ((*comm)->all_reduce_sum(too_many, 16, DType::kF32).code(), StatusCode::kInvalidArgument);
  std::vector<NcclRankBuffer> null_buffers(devices.size());
  EXPECT_EQ((*comm)->all_reduce_sum(null_buffers, 16, DType::kF32).code(), StatusCode::kInvalidArgument);
  std::vector<NcclRankBuffer> one_each(devices.size(), NcclRankBuffer{buffer.data(), buffer.stream()});
  EXPECT_EQ((*comm)->all_reduce_sum(one_each, 16, DType::kF8E4M3).code(), StatusCode::kUnimplemented);
  EXPECT_EQ((*comm)->all_reduce_sum(one_each, -1, DType::kF32).code(), StatusCode::kInvalidArgument);
  // None of these reached NCCL, so the communicator is still healthy.
  EXPECT_TRUE((*comm)->health().ok());
}

}  // namespace
}  // namespace mmserve
