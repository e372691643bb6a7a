// StagedCollective (see collective.h).
#include "core/cuda/collective.h"

#include <algorithm>
#include <cstring>

#include "core/cuda/cuda_status.h"

namespace mmserve {

StatusOr<std::unique_ptr<StagedCollective>> StagedCollective::create(const std::vector<int>& devices) {
  if (devices.empty()) return invalid_argument("staged collective: at least one device is needed");
  int count = 0;
  const bool any_gpu = std::any_of(devices.begin(), devices.end(), [](int d) { return d >= 0; });
  if (any_gpu) CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  for (int d : devices) {
    if (d == kHostRank) continue;
    if (d < 0 || d >= count) {
      return invalid_argument("staged collective: device " + std::to_string(d) + " does not exist (" +
                              std::to_string(count) + " visible)");
    }
  }
  std::unique_ptr<StagedCollective> c(new StagedCollective());
  c->devices_ = devices;
  c->staged_.resize(devices.size());
  c->result_.resize(devices.size());
  return c;
}

Status StagedCollective::health() {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

void StagedCollective::abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) broken_ = why.ok() ? internal_error("staged collective aborted") : why;
  }
  cv_.notify_all();
}

Status StagedCollective::barrier(std::unique_lock<std::mutex>& lock) {
  const uint64_t phase = phase_;
  if (++arrived_ == world_size()) {
    arrived_ = 0;
    ++phase_;
    cv_.notify_all();
    return broken_;
  }
  cv_.wait(lock, [&] { return phase_ != phase || !broken_.ok(); });
  return broken_;
}

Status StagedCollective::all_reduce_sum(int rank, void* data, int64_t count, DType dtype, cudaStream_t stream) {
  if (rank < 0 || rank >= world_size()) return invalid_argument("staged collective: rank " + std::to_string(rank));
  if (dtype != DType::kF32) {
    return unimplemented(std::string("staged collective: sums f32 only, not ") + dtype_name(dtype));
  }
  if (count < 0) return invalid_argument("staged collective: negative count");
  RETURN_IF_ERROR(health());
  if (count == 0 || world_size() == 1) return ok_status();
  if (data == nullptr) return invalid_argument("staged collective: rank " + std::to_string(rank) + " has no buffer");
  // A failed copy aborts the group: the other ranks are (or will be) waiting for this one.
  auto cuda = [&](cudaError_t error, const char* what) {
    Status s = cuda_status(error, what, __FILE__, __LINE__);
    if (!s.ok()) abort(s);
    return s;
  };
  const size_t bytes = sizeof(float) * static_cast<size_t>(count);
  const bool host = devices_[rank] == kHostRank;
  std::vector<float>& mine = staged_[rank];
  mine.resize(static_cast<size_t>(count));
  if (host) {
    std::memcpy(mine.data(), data, bytes);
  } else {
    RETURN_IF_ERROR(cuda(cudaMemcpyAsync(mine.data(), data, bytes, cudaMemcpyDeviceToHost, stream), "staging copy"));
    RETURN_IF_ERROR(cuda(cudaStreamSynchronize(stream), "staging copy"));
  }
  std::vector<float>& result = result_[rank];
  {
    std::unique_lock<std::mutex> lock(mutex_);
    RETURN_IF_ERROR(barrier(lock));  // every contribution is on the host
  }
  // Each rank sums every contribution in rank order, so all ranks get the same bits.
  result.assign(staged_[0].begin(), staged_[0].end());
  for (int r = 1; r < world_size(); ++r) {
    const float* part = staged_[r].data();
    for (int64_t i = 0; i < count; ++i) result[i] += part[i];
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    RETURN_IF_ERROR(barrier(lock));  // nobody rewrites its contribution (next call) before all have read it
  }
  if (host) {
    std::memcpy(data, result.data(), bytes);
    return ok_status();
  }
  RETURN_IF_ERROR(cuda(cudaMemcpyAsync(data, result.data(), bytes, cudaMemcpyHostToDevice, stream), "staging copy"));
  return cuda(cudaStreamSynchronize(stream), "staging copy");
}

}  // namespace mmserve
