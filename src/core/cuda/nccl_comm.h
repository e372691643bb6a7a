// NCCL communicators for the GPUs of this process (issue 6 item 2: tensor parallel inside one server process).
//
// One process drives every rank: ncclCommInitAll makes one communicator per device of the list, and each
// collective is issued for all ranks inside one ncclGroupStart/ncclGroupEnd (a single thread issuing rank 0's
// call alone would wait forever for rank 1). Every NCCL result becomes a Status with ncclGetErrorString and
// ncclGetLastError's detail; after each collective ncclCommGetAsyncError is polled (NCCL_ASYNC_ERROR_HANDLING=1
// makes a failing peer an error instead of a hang), and a communicator that reported an error is marked broken:
// later calls return kUnavailable without touching it, and it is aborted (not destroyed) at teardown, which is
// what the replica fault handling (issue 6 item 6) needs to take it out of rotation.
// NVLink SHARP / multicast stays off: create() calls apply_nccl_environment() and refuses to initialise unless
// NCCL_NVLS_ENABLE is "0" afterwards (see nccl_env.h for why).
// World size 1 (one GPU) works: NCCL's all-reduce over one rank is a copy, or nothing in place.
// libnccl.so.2 is opened at run time (dlopen: MMSERVE_NCCL_LIBRARY, else the loader's search path, else the
// library found at build time), not linked: it is 200+ MB, and the server must start on hosts without it (tensor
// parallel then fails to load with a message saying so). nccl.h is only needed to compile.
// Two ways to drive the ranks: all_reduce_sum(buffers) issues every rank's call from one thread in one group;
// the DeviceCollective entry all_reduce_sum(rank, ...) is called by each rank's own thread (the tensor-parallel
// forwards, whose per-rank calls are also captured into each rank's CUDA graph).
// Tests: tests/unit/core/nccl_comm_test.cpp (all-reduce over every visible GPU; skipped without one).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/collective.h"
#include "core/dtype.h"
#include "core/status.h"

namespace mmserve {

// Whether libnccl.so.2 could be opened (and which path, or why not, in *detail when given).
bool nccl_available(std::string* detail = nullptr);

// NCCL result -> Status: ncclSuccess -> OK; invalid argument / usage -> kInvalidArgument; a remote peer's failure
// -> kUnavailable; system, internal and CUDA errors -> kInternal. `detail` (ncclGetLastError) may be null.
Status nccl_status(ncclResult_t result, const char* what, const char* detail = nullptr);

// The NCCL type of a dtype: f32, f16, bf16, i32, i64, i8, u8; others kUnimplemented.
StatusOr<ncclDataType_t> nccl_dtype(DType dtype);

// One rank's side of an in-place collective: `data` lives on that rank's device, the collective is ordered on
// `stream` (a stream of that device; nullptr is that device's legacy default stream).
struct NcclRankBuffer {
  void* data = nullptr;
  cudaStream_t stream = nullptr;
};

class NcclComm : public DeviceCollective {
 public:
  // Communicators over `devices` (CUDA ordinals, distinct, at least one). Rank r is devices[r]. Errors:
  // kInvalidArgument for an empty list, a repeated or out-of-range ordinal; kFailedPrecondition when NVLS is
  // not off or no GPU is usable; NCCL's own errors as nccl_status(). The caller's current device is restored.
  static StatusOr<std::unique_ptr<NcclComm>> create(const std::vector<int>& devices);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  const char* kind() const override { return "nccl"; }
  int world_size() const override { return static_cast<int>(devices_.size()); }
  int device(int rank) const override { return devices_[rank]; }
  bool graph_capturable() const override { return true; }

  // In place: every rank's `count` elements of `dtype` become the element-wise sum over ranks. One entry of
  // `buffers` per rank, in rank order. Enqueues only (the sum is ready when each rank's stream reaches it);
  // then polls every communicator for an asynchronous error. count 0 is a no-op.
  Status all_reduce_sum(std::span<const NcclRankBuffer> buffers, int64_t count, DType dtype);

  // Rank `rank`'s call from its own thread (DeviceCollective): enqueues on `stream`, then polls that rank's
  // communicator for an asynchronous error. Thread-safe across ranks.
  Status all_reduce_sum(int rank, void* data, int64_t count, DType dtype, cudaStream_t stream) override;

  // OK while no communicator has reported an error; else the first error (sticky).
  Status health() override;
  // ncclCommAbort on every communicator (their pending kernels stop), marks the group broken with `why`.
  void abort(const Status& why) override;

 private:
  NcclComm() = default;
  Status poll_async_errors(int rank);  // one rank's communicator
  Status mark_broken(const Status& error);

  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;  // null once aborted
  std::mutex mutex_;               // guards broken_ and comms_ (abort) against the rank threads
  Status broken_;                  // first asynchronous or call error; OK while healthy
};

}  // namespace mmserve
