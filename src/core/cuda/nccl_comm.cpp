// NCCL communicators of one process (see nccl_comm.h).
#include "core/cuda/nccl_comm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <set>
#include <string>

#include "core/cuda/cuda_status.h"
#include "core/cuda/nccl_env.h"

#ifndef MMSERVE_NCCL_BUILD_PATH
#define MMSERVE_NCCL_BUILD_PATH ""
#endif

namespace mmserve {
namespace {

// The NCCL entry points we call, resolved from libnccl.so.2 once. Their types come from nccl.h, so a signature
// change is a compile error rather than a wrong call.
struct NcclApi {
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  std::string path;   // the library opened
  std::string error;  // why none could be, when `ok` is false
  bool ok = false;
};

const NcclApi& nccl_api() {
  static const NcclApi api = [] {
    NcclApi a;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("MMSERVE_NCCL_LIBRARY"); env && *env) candidates.push_back(env);
    candidates.push_back("libnccl.so.2");
    if (std::string(MMSERVE_NCCL_BUILD_PATH).size() > 0) candidates.push_back(MMSERVE_NCCL_BUILD_PATH);
    void* handle = nullptr;
    for (const std::string& c : candidates) {
      handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        a.path = c;
        break;
      }
      a.error += (a.error.empty() ? "" : "; ") + std::string(dlerror());
    }
    if (handle == nullptr) {
      a.error = "libnccl.so.2 not found (set MMSERVE_NCCL_LIBRARY or LD_LIBRARY_PATH): " + a.error;
      return a;
    }
    bool all = true;
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr) {
        all = false;
        a.error += std::string(a.error.empty() ? "" : ", ") + name;
      }
    };
    bind(a.get_error_string, "ncclGetErrorString");
    bind(a.get_last_error, "ncclGetLastError");
    bind(a.comm_init_all, "ncclCommInitAll");
    bind(a.comm_destroy, "ncclCommDestroy");
    bind(a.comm_abort, "ncclCommAbort");
    bind(a.comm_get_async_error, "ncclCommGetAsyncError");
    bind(a.group_start, "ncclGroupStart");
    bind(a.group_end, "ncclGroupEnd");
    bind(a.all_reduce, "ncclAllReduce");
    if (!all) {
      a.error = a.path + " lacks " + a.error;
      return a;
    }
    a.ok = true;
    return a;
  }();
  return api;
}

const char* last_error(ncclComm_t comm) {
  const NcclApi& api = nccl_api();
  return api.ok ? api.get_last_error(comm) : nullptr;
}

}  // namespace

bool nccl_available(std::string* detail) {
  const NcclApi& api = nccl_api();
  if (detail != nullptr) *detail = api.ok ? api.path : api.error;
  return api.ok;
}

Status nccl_status(ncclResult_t result, const char* what, const char* detail) {
  if (result == ncclSuccess) return ok_status();
  const NcclApi& api = nccl_api();
  std::string message = std::string("NCCL ") + what + ": " +
                        (api.ok ? api.get_error_string(result) : "error " + std::to_string(static_cast<int>(result)));
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
    if (!seen.insert(d).second) {
      return invalid_argument("NCCL: device " + std::to_string(d) + " listed twice (one rank per GPU)");
    }
  }
  const NcclApi& api = nccl_api();
  if (!api.ok) return failed_precondition("NCCL: " + api.error);

  int current = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  std::unique_ptr<NcclComm> comm(new NcclComm());
  comm->devices_ = devices;
  comm->comms_.assign(devices.size(), nullptr);
  const ncclResult_t result = api.comm_init_all(comm->comms_.data(), static_cast<int>(devices.size()), devices.data());
  cudaSetDevice(current);  // NCCL may leave another device current
  if (result != ncclSuccess) {
    comm->comms_.clear();  // nothing to destroy: InitAll failed as a whole
    return nccl_status(result, "ncclCommInitAll", last_error(nullptr));
  }
  return comm;
}

NcclComm::~NcclComm() {
  const NcclApi& api = nccl_api();
  for (ncclComm_t c : comms_) {
    if (c == nullptr) continue;
    // A communicator that errored may have operations that never finish: abort instead of waiting for them.
    if (broken_.ok()) {
      api.comm_destroy(c);
    } else {
      api.comm_abort(c);
    }
  }
}

Status NcclComm::mark_broken(const Status& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok()) broken_ = error;
  return broken_;
}

Status NcclComm::health() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.ok()) return broken_;
  }
  for (int r = 0; r < world_size(); ++r) RETURN_IF_ERROR(poll_async_errors(r));
  return ok_status();
}

void NcclComm::abort(const Status& why) {
  (void)mark_broken(why.ok() ? internal_error("NCCL communicators aborted") : why);
  std::lock_guard<std::mutex> lock(mutex_);
  // ncclCommAbort makes every kernel still waiting on a peer return, so the streams of the other ranks drain.
  for (ncclComm_t& c : comms_) {
    if (c != nullptr) nccl_api().comm_abort(c);
    c = nullptr;
  }
}

Status NcclComm::poll_async_errors(int rank) {
  ncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.ok()) return broken_;
    comm = comms_[rank];
  }
  ncclResult_t async = ncclSuccess;
  ncclResult_t result = nccl_api().comm_get_async_error(comm, &async);
  if (result != ncclSuccess) {
    return mark_broken(nccl_status(result, "ncclCommGetAsyncError", last_error(comm)));
  }
  if (async != ncclSuccess && async != ncclInProgress) {
    // A communicator that failed asynchronously is out of service whatever the cause: kUnavailable.
    const std::string what =
        "communicator of rank " + std::to_string(rank) + " (device " + std::to_string(devices_[rank]) + ")";
    return mark_broken(Status(StatusCode::kUnavailable, nccl_status(async, what.c_str(), last_error(comm)).message()));
  }
  return ok_status();
}

Status NcclComm::all_reduce_sum(std::span<const NcclRankBuffer> buffers, int64_t count, DType dtype) {
  RETURN_IF_ERROR(health());
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
  const NcclApi& api = nccl_api();
  // One thread issues every rank's call, so they must be one group (a lone rank's call would block).
  ncclResult_t result = api.group_start();
  if (result != ncclSuccess) return nccl_status(result, "ncclGroupStart", last_error(nullptr));
  for (size_t r = 0; r < buffers.size(); ++r) {
    result = api.all_reduce(buffers[r].data, buffers[r].data, static_cast<size_t>(count), type, ncclSum, comms_[r],
                            buffers[r].stream);
    if (result != ncclSuccess) {
      Status error = nccl_status(result, "ncclAllReduce", last_error(comms_[r]));
      api.group_end();  // close the group whatever happened; the first error is the one to report
      return mark_broken(error);
    }
  }
  result = api.group_end();
  if (result != ncclSuccess && result != ncclInProgress) {
    return mark_broken(nccl_status(result, "ncclGroupEnd", last_error(nullptr)));
  }
  return health();
}

Status NcclComm::all_reduce_sum(int rank, void* data, int64_t count, DType dtype, cudaStream_t stream) {
  if (rank < 0 || rank >= world_size()) return invalid_argument("NCCL all_reduce_sum: rank " + std::to_string(rank));
  if (count < 0) return invalid_argument("NCCL all_reduce_sum: negative count");
  ASSIGN_OR_RETURN(ncclDataType_t type, nccl_dtype(dtype));
  if (data == nullptr && count > 0) {
    return invalid_argument("NCCL all_reduce_sum: rank " + std::to_string(rank) + " has no buffer");
  }
  ncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.ok()) return broken_;
    comm = comms_[rank];
  }
  if (count == 0) return ok_status();
  const ncclResult_t result =
      nccl_api().all_reduce(data, data, static_cast<size_t>(count), type, ncclSum, comm, stream);
  if (result != ncclSuccess) return mark_broken(nccl_status(result, "ncclAllReduce", last_error(comm)));
  return poll_async_errors(rank);
}

}  // namespace mmserve
