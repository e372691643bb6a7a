// The collective a tensor-parallel forward needs (issue 6 item 2): an in-place sum over the ranks of a group, each
// rank driven by its own thread (core/rank_workers.h) on its own stream.
//
// Two implementations:
//   NcclComm (core/cuda/nccl_comm.h): the real one, one communicator per GPU over NVLink/PCIe; capturable into
//     CUDA graphs. Its ranks must be distinct GPUs (NCCL refuses two ranks on one device).
//   StagedCollective (below): copies to host memory, sums there in rank order and copies back, synchronising every
//     rank's stream. Ranks may share a device, so the sharded forwards can be checked against the unsharded ones
//     on a one-GPU machine; it also serves where libnccl.so.2 is missing. It is slow (two PCIe copies and a host
//     sum per all-reduce) and cannot be captured into a graph: no performance figure comes from it.
// Every rank must call all_reduce_sum the same number of times in the same order, as with NCCL.
// Faults: abort() puts the group out of service; a rank waiting inside all_reduce_sum returns with the error (NCCL:
// its kernels stop), and every later call returns it. A model calls abort() when one rank fails mid-forward so the
// others do not wait forever for it, then reports the group as broken (issue 6 item 6).
// Tests: tests/unit/core/collective_test.cpp (StagedCollective on one GPU), tests/unit/core/tp_group_test.cpp
// (StagedCollective over host-memory ranks, on the CPU), nccl_comm_test.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve {

class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  virtual const char* kind() const = 0;  // "nccl" or "staged": for the load log and errors
  virtual int world_size() const = 0;
  virtual int device(int rank) const = 0;
  // Whether all_reduce_sum may be recorded into a CUDA graph (stream capture).
  virtual bool graph_capturable() const = 0;
  // Rank `rank`'s part of an in-place sum of `count` elements of `dtype` at `data` (on the rank's device), ordered
  // on `stream`. Called by the thread driving that rank, with every other rank calling it concurrently.
  virtual Status all_reduce_sum(int rank, void* data, int64_t count, DType dtype, cudaStream_t stream) = 0;
  // OK while healthy; the first error once a rank failed or the group was aborted (sticky).
  virtual Status health() = 0;
  // Puts the group out of service with `why`: ranks waiting inside all_reduce_sum return, later calls fail.
  virtual void abort(const Status& why) = 0;
};

// Host-staged all-reduce (see the file comment). f32 only: the tensor-parallel forwards reduce their f32 residual
// stream; other dtypes are kUnimplemented.
class StagedCollective : public DeviceCollective {
 public:
  // A rank whose buffers are host memory (no copies; the CPU tests of core/cuda/tp_group.h use such ranks).
  static constexpr int kHostRank = -1;
  // devices[r] is rank r's CUDA ordinal or kHostRank; repeats allowed. kInvalidArgument for an empty list or a bad
  // ordinal.
  static StatusOr<std::unique_ptr<StagedCollective>> create(const std::vector<int>& devices);

  const char* kind() const override { return "staged"; }
  int world_size() const override { return static_cast<int>(devices_.size()); }
  int device(int rank) const override { return devices_[rank]; }
  bool graph_capturable() const override { return false; }
  Status all_reduce_sum(int rank, void* data, int64_t count, DType dtype, cudaStream_t stream) override;
  Status health() override;
  void abort(const Status& why) override;

 private:
  StagedCollective() = default;
  // Waits until every rank arrived at this barrier (or the group is aborted: then the error).
  Status barrier(std::unique_lock<std::mutex>& lock);

  std::vector<int> devices_;
  std::vector<std::vector<float>> staged_;  // rank r's contribution (read by every rank between two barriers)
  std::vector<std::vector<float>> result_;  // rank r's sum
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t phase_ = 0;
  Status broken_;
};

}  // namespace mmserve
