// NCCL communicators of one process (see nccl_comm.h).
#include "core/cuda/nccl_comm.h"

#include <cstdlib>
#include <set>
#include <string>

#include "core/cuda/cuda_status.h"
#include "core/cuda/nccl_env.h"

namespace mmserve {

Status nccl_status(ncclResult_t result, const char* what, const char* detail) {
  if (result == ncclSuccess) return ok_status();
  std::string message = std::string("NCCL ") + what + ": " + ncclGetErrorString(result);
  if (detail != nullptr && detail[0] != '\0') message += std::string(" (") + detail + ")";
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return invalid_argument(message);
    case ncclRemoteError: return Status(StatusCode::kUnavailable, message);
    default: return internal_error(message);
  }
}

StatusOr<ncclDataType_t> nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kI8: return ncclInt8;
    case DType::kU8: return ncclUint8;
    default: return unimplemented(std::string("NCCL: no reduction type for dtype ") + dtype_name(dtype));
  }
}

StatusOr<std::unique_ptr<NcclComm>> NcclComm::create(const std::vector<int>& devices) {
  if (devices.empty()) return invalid_argument("NCCL: a communicator needs at least one device");
  // NVLS must be off before NCCL reads its environment (at the first init of this process).
  apply_nccl_environment();
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::string(nvls) != "0") {
    return failed_precondition(std::string("NCCL: refusing to initialise with NCCL_NVLS_ENABLE=") +
                               (nvls == nullptr ? "<unset>" : nvls) + " (must be 0: NVLink multicast is off here)");
  }
  std::string reason;
  if (!cuda_device_available(&reason)) return failed_precondition("NCCL: no usable GPU: " + reason);
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  std::set<int> seen;
  for (int d : devices) {
    if (d < 0 || d >= count) {
      return invalid_argument("NCCL: device " + std::to_string(d) + " does not exist (" + std::to_string(count) +
                              " visible)");
    }
    if (!seen.insert(d).second) return invalid_argument("NCCL: device " + std::to_string(d) + " listed twice");
  }

  int current = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  std::unique_ptr<NcclComm> comm(new NcclComm());
  comm->devices_ = devices;
  comm->comms_.assign(devices.size(), nullptr);
  const ncclResult_t result = ncclCommInitAll(comm->comms_.data(), static_cast<int>(devices.size()), devices.data());
  cudaSetDevice(current);  // NCCL may leave another device current
  if (result != ncclSuccess) {
    comm->comms_.clear();  // nothing to destroy: InitAll failed as a whole
    return nccl_status(result, "ncclCommInitAll", ncclGetLastError(nullptr));
  }
  return comm;
}

NcclComm::~NcclComm() {
  for (ncclComm_t c : comms_) {
    if (c == nullptr) continue;
    // A communicator that errored may have operations that never finish: abort instead of waiting for them.
    if (broken_.ok()) {
      ncclCommDestroy(c);
    } else {
      ncclCommAbort(c);
    }
  }
}

Status NcclComm::health() {
  if (!broken_.ok()) return broken_;
  return poll_async_errors();
}

Status NcclComm::poll_async_errors() {
  for (size_t r = 0; r < comms_.size(); ++r) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comms_[r], &async);
    if (result != ncclSuccess) {
      broken_ = nccl_status(result, "ncclCommGetAsyncError", ncclGetLastError(comms_[r]));
      return broken_;
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      // A communicator that failed asynchronously is out of service whatever the cause: kUnavailable.
      const std::string what =
          "communicator of rank " + std::to_string(r) + " (device " + std::to_string(devices_[r]) + ")";
      broken_ =
          Status(StatusCode::kUnavailable, nccl_status(async, what.c_str(), ncclGetLastError(comms_[r])).message());
      return broken_;
    }
  }
  return ok_status();
}

Status NcclComm::all_reduce_sum(std::span<const NcclRankBuffer> buffers, int64_t count, DType dtype) {
  if (!broken_.ok()) return broken_;
  if (buffers.size() != comms_.size()) {
    return invalid_argument("NCCL all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                            std::to_string(comms_.size()) + " ranks");
  }
  if (count < 0) return invalid_argument("NCCL all_reduce_sum: negative count");
  ASSIGN_OR_RETURN(ncclDataType_t type, nccl_dtype(dtype));
  if (count == 0) return ok_status();
  for (size_t r = 0; r < buffers.size(); ++r) {
    if (buffers[r].data == nullptr) {
      return invalid_argument("NCCL all_reduce_sum: rank " + std::to_string(r) + " has no buffer");
    }
  }
  // One thread issues every rank's call, so they must be one group (a lone rank's call would block).
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return nccl_status(result, "ncclGroupStart", ncclGetLastError(nullptr));
  for (size_t r = 0; r < buffers.size(); ++r) {
    result = ncclAllReduce(buffers[r].data, buffers[r].data, static_cast<size_t>(count), type, ncclSum, comms_[r],
                           buffers[r].stream);
    if (result != ncclSuccess) {
      Status error = nccl_status(result, "ncclAllReduce", ncclGetLastError(comms_[r]));
      ncclGroupEnd();  // close the group whatever happened; the first error is the one to report
      broken_ = error;
      return error;
    }
  }
  result = ncclGroupEnd();
  if (result != ncclSuccess && result != ncclInProgress) {
    broken_ = nccl_status(result, "ncclGroupEnd", ncclGetLastError(nullptr));
    return broken_;
  }
  return poll_async_errors();
}

}  // namespace mmserve
