// A tensor-parallel group of GPUs inside this process (issue 6 items 2 and 6): the ranks' collective
// (core/cuda/collective.h), one thread per rank (core/rank_workers.h) and the group's health. The sharded models
// (models/clip/clip_cuda.h, models/whisper/whisper_cuda_tp.h) run every call through run().
//
// Error rules of run(body): body(r) runs on every rank at once with rank r's GPU current.
//   - Every rank failing with the same code, not kInternal, while the collective is healthy: a request error
//     (each rank validated the same inputs the same way before any collective), returned as rank 0's status; the
//     group stays in service.
//   - Anything else (a CUDA error, a rank failing alone, the collective erroring): the collective is aborted so
//     no rank waits for a peer that will not come, and the group is out of service for good: this and every later
//     call is kInternal ("tensor-parallel group over N GPUs is out of service: <first failure>"), which the
//     server's replica handling treats as a device fault.
// Tests: tests/unit/core/tp_group_test.cpp (the rules, on the CPU), tests/unit/core/collective_test.cpp
// (StagedCollective), tests/conformance/clip_cuda_tp_test.cpp, tests/unit/models/whisper_cuda_tp_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/collective.h"
#include "core/rank_workers.h"
#include "core/status.h"

namespace mmserve {

enum class TpCollectiveKind {
  kNccl,    // NCCL over distinct GPUs (the production path; CUDA graphs capture its all-reduces)
  kStaged,  // StagedCollective: ranks may share a GPU; eager only, slow (one-GPU checks of the sharded forwards)
};
// "nccl" or "staged" (mmserve.yaml tp_collective); anything else is kInvalidArgument naming the two.
StatusOr<TpCollectiveKind> parse_tp_collective(const std::string& name);

class TpGroup {
 public:
  // devices[r] is rank r's CUDA ordinal. Errors: the collective's (NCCL refuses a GPU twice; no NCCL in this
  // build or libnccl.so.2 missing: kUnimplemented / kFailedPrecondition with the reason).
  static StatusOr<std::unique_ptr<TpGroup>> create(const std::vector<int>& devices, TpCollectiveKind kind);
  // A group over a collective made elsewhere (another transport; the CPU tests of the rules above use one over host
  // memory). A rank whose device() is negative runs without selecting a GPU.
  static std::unique_ptr<TpGroup> over(std::unique_ptr<DeviceCollective> collective);

  int world_size() const { return collective_->world_size(); }
  int device(int rank) const { return collective_->device(rank); }
  const char* kind() const { return collective_->kind(); }
  bool graph_capturable() const { return collective_->graph_capturable(); }
  DeviceCollective* collective() { return collective_.get(); }

  Status run(const std::function<Status(int rank)>& body);
  // OK while in service; else the sticky kInternal of the rules above (also after an asynchronous NCCL error).
  Status health();
  // Takes the group out of service with `why` (aborts the collective).
  void abort(const Status& why);

 private:
  TpGroup() = default;
  Status out_of_service(const Status& cause);

  std::unique_ptr<DeviceCollective> collective_;
  std::unique_ptr<RankWorkers> workers_;
  Status broken_;
};

}  // namespace mmserve
