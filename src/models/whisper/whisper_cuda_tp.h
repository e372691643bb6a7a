// Whisper over a tensor-parallel group of GPUs (issue 6 item 2): T WhisperCudaModel ranks (whisper_cuda.h), rank r
// on devices[r] holding its heads and MLP share of every layer, driven together through core/cuda/tp_group.h. It
// is a WhisperBackend, so WhisperExecutor's searches, long-form loop and continuous batching run on it unchanged:
// encode() runs the sharded encoder on every rank (each keeps the whole encoder output, as the all-reduces leave
// it), new_rows() makes one set of decoder rows per rank, and every prefill / step / reorder runs on all ranks at
// once; rank 0's logits are returned (every rank computes the same ones: the output projection is replicated).
// Faults follow TpGroup's rules: a request error (every rank refusing the same input) is returned as it is; a
// device error or a collective error puts the model out of service, kInternal from then on.
// Tests: tests/unit/models/whisper_cuda_tp_test.cpp (HF goldens: greedy, beam and long-form ids at TP=2 on one GPU
// through the staged collective; NCCL over a group of one and over every visible GPU).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/cuda/tp_group.h"
#include "models/whisper/whisper_cuda.h"

namespace mmserve::models {

struct WhisperCudaTpOptions {
  WhisperCudaOptions rank;   // each rank's options; `device` is replaced by devices[r]
  std::vector<int> devices;  // rank r's GPU; one entry is a group of one (the collective path on one GPU)
  TpCollectiveKind collective = TpCollectiveKind::kNccl;
};

class WhisperCudaTpModel : public WhisperBackend {
 public:
  // Loads the checkpoint once on the host and every rank's slice onto its GPU, all ranks at once (their load-time
  // warm-up runs already all-reduce). Errors: the group's (see TpGroup::create), heads that do not divide by the
  // group size (kInvalidArgument), and each rank's own (WhisperCudaModel::load).
  static StatusOr<std::unique_ptr<WhisperCudaTpModel>> load(const std::string& model_dir,
                                                            const WhisperCudaTpOptions& options);
  static StatusOr<std::unique_ptr<WhisperCudaTpModel>> load(const WhisperModel& host,
                                                            const WhisperCudaTpOptions& options);
  ~WhisperCudaTpModel() override;

  // WhisperBackend. memory_bytes() sums the ranks.
  const WhisperConfig& config() const override { return ranks_[0]->config(); }
  Device device() const override { return ranks_[0]->device(); }
  DType dtype() const override { return ranks_[0]->dtype(); }
  int64_t memory_bytes() const override;
  StatusOr<std::shared_ptr<const WhisperEncoded>> encode(const Tensor& mel) override;
  StatusOr<std::unique_ptr<WhisperDecoderRows>> new_rows(int64_t capacity) override;
  int64_t max_rows() const override { return ranks_[0]->max_rows(); }

  int world_size() const { return static_cast<int>(ranks_.size()); }
  const char* collective_kind() const { return group_->kind(); }
  const WhisperCudaModel& rank(int r) const { return *ranks_[r]; }
  Status health() { return group_->health(); }
  // Takes the group out of service (the runtime's fault handling and the tests).
  void abort(const Status& why) { group_->abort(why); }

 private:
  class Encoded;
  class Rows;
  WhisperCudaTpModel() = default;

  std::unique_ptr<TpGroup> group_;
  std::vector<std::unique_ptr<WhisperCudaModel>> ranks_;
};

}  // namespace mmserve::models
