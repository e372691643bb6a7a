// TpGroup (see tp_group.h).
#include "core/cuda/tp_group.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/cuda/cuda_status.h"
#if MMSERVE_HAS_NCCL
#include "core/cuda/nccl_comm.h"
#endif

namespace mmserve {
namespace {

// How long a failed rank waits for its peers to return before it concludes they are stuck in a collective.
constexpr std::chrono::milliseconds kPeerWait{500};

}  // namespace

StatusOr<TpCollectiveKind> parse_tp_collective(const std::string& name) {
  if (name == "nccl") return TpCollectiveKind::kNccl;
  if (name == "staged") return TpCollectiveKind::kStaged;
  return invalid_argument("tp_collective '" + name + "' is not one of nccl, staged");
}

StatusOr<std::unique_ptr<TpGroup>> TpGroup::create(const std::vector<int>& devices, TpCollectiveKind kind) {
  std::unique_ptr<TpGroup> group(new TpGroup());
  if (kind == TpCollectiveKind::kStaged) {
    ASSIGN_OR_RETURN(group->collective_, StagedCollective::create(devices));
  } else {
#if MMSERVE_HAS_NCCL
    ASSIGN_OR_RETURN(group->collective_, NcclComm::create(devices));
#else
    return unimplemented("tensor parallel over NCCL: this build has no NCCL (nccl.h was not found)");
#endif
  }
  group->workers_ = std::make_unique<RankWorkers>(static_cast<int>(devices.size()));
  return group;
}

std::unique_ptr<TpGroup> TpGroup::over(std::unique_ptr<DeviceCollective> collective) {
  std::unique_ptr<TpGroup> group(new TpGroup());
  group->workers_ = std::make_unique<RankWorkers>(collective->world_size());
  group->collective_ = std::move(collective);
  return group;
}

Status TpGroup::out_of_service(const Status& cause) {
  if (broken_.ok()) {
    broken_ = internal_error("tensor-parallel group over " + std::to_string(world_size()) +
                             " GPUs is out of service: " + cause.message());
  }
  return broken_;
}

Status TpGroup::health() {
  if (!broken_.ok()) return broken_;
  Status s = collective_->health();
  if (!s.ok()) return out_of_service(s);
  return ok_status();
}

void TpGroup::abort(const Status& why) {
  collective_->abort(why);
  (void)out_of_service(why);
}

Status TpGroup::run(const std::function<Status(int rank)>& body) {
  RETURN_IF_ERROR(health());
  const int world = world_size();
  std::vector<Status> results(static_cast<size_t>(world));
  std::mutex mutex;
  std::condition_variable returned_cv;
  int returned = 0;
  workers_->run([&](int r) {
    // The devices were checked when the collective was made: a plain cudaSetDevice on this per-call path.
    Status s =
        device(r) >= 0 ? cuda_status(cudaSetDevice(device(r)), "cudaSetDevice", __FILE__, __LINE__) : ok_status();
    if (s.ok()) s = body(r);
    std::unique_lock<std::mutex> lock(mutex);
    results[r] = s;
    ++returned;
    returned_cv.notify_all();
    if (s.ok()) return;
    // A request error fails every rank at once, before any collective. If the others have not all returned soon,
    // they are waiting inside a collective for this rank: release them (their calls then fail too).
    if (!returned_cv.wait_for(lock, kPeerWait, [&] { return returned == world; })) {
      collective_->abort(s.with_context("rank " + std::to_string(r) + " (GPU " + std::to_string(device(r)) + ")"));
    }
  });
  bool all_failed_alike = true, any_failed = false;
  for (const Status& s : results) {
    any_failed = any_failed || !s.ok();
    all_failed_alike = all_failed_alike && !s.ok() && s.code() == results[0].code();
  }
  if (!any_failed) return health();  // an asynchronous NCCL error shows here
  if (all_failed_alike && results[0].code() != StatusCode::kInternal && collective_->health().ok()) {
    return results[0];  // a request error: every rank refused the same input
  }
  // A rank failed on its own, or with a device error: the others may be waiting for it. Release them and break.
  Status first = collective_->health();
  if (first.ok()) {
    for (int r = 0; r < world; ++r) {
      if (!results[r].ok()) {
        first = results[r].with_context("rank " + std::to_string(r) + " (GPU " + std::to_string(device(r)) + ")");
        break;
      }
    }
  }
  abort(first);
  return broken_;
}

}  // namespace mmserve
