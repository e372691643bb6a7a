// Whisper over a tensor-parallel group (see whisper_cuda_tp.h).
#include "models/whisper/whisper_cuda_tp.h"

#include "core/cuda/device_memory.h"

namespace mmserve::models {

// One encoder output per rank (each on its rank's GPU, each the whole output).
class WhisperCudaTpModel::Encoded : public WhisperEncoded {
 public:
  int64_t windows() const override { return parts[0]->windows(); }
  int64_t frames() const override { return parts[0]->frames(); }
  const WhisperCudaTpModel* owner = nullptr;
  std::vector<std::shared_ptr<const WhisperEncoded>> parts;
};

// One set of decoder rows per rank, moved in step; rank 0's logits are the answer.
class WhisperCudaTpModel::Rows : public WhisperDecoderRows {
 public:
  Rows(WhisperCudaTpModel* model, std::vector<std::unique_ptr<WhisperDecoderRows>> parts)
      : model_(model), parts_(std::move(parts)), scratch_(parts_.size()), scratch_extra_(parts_.size()) {}

  int64_t rows() const override { return parts_[0]->rows(); }
  int64_t capacity() const override { return parts_[0]->capacity(); }
  int64_t length(int64_t row) const override { return parts_[0]->length(row); }
  int64_t vocab_size() const override { return parts_[0]->vocab_size(); }

  Status prefill(const std::shared_ptr<const WhisperEncoded>& encoded, const std::vector<int64_t>& windows,
                 const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                 const std::vector<int64_t>& extra_positions, std::vector<float>* extra_logits) override {
    const auto* ours = dynamic_cast<const Encoded*>(encoded.get());
    if (!ours || ours->owner != model_) {
      return invalid_argument("prefill() needs an encoder output of this tensor-parallel model");
    }
    return model_->group_->run([&](int r) {
      std::vector<float>& out = r == 0 ? logits : scratch_[r];
      std::vector<float>* extra = extra_logits == nullptr ? nullptr : r == 0 ? extra_logits : &scratch_extra_[r];
      return parts_[r]->prefill(ours->parts[r], windows, prompts, out, extra_positions, extra);
    });
  }
  Status step(const std::vector<int32_t>& tokens, std::vector<float>& logits) override {
    return model_->group_->run([&](int r) { return parts_[r]->step(tokens, r == 0 ? logits : scratch_[r]); });
  }
  Status reorder(const std::vector<int64_t>& src) override {
    return model_->group_->run([&](int r) { return parts_[r]->reorder(src); });
  }

 private:
  WhisperCudaTpModel* model_;
  std::vector<std::unique_ptr<WhisperDecoderRows>> parts_;
  std::vector<std::vector<float>> scratch_, scratch_extra_;  // the other ranks' (identical) logits, discarded
};

StatusOr<std::unique_ptr<WhisperCudaTpModel>> WhisperCudaTpModel::load(const std::string& model_dir,
                                                                       const WhisperCudaTpOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<WhisperModel> host, WhisperModel::load(model_dir));
  return load(*host, options);
}

StatusOr<std::unique_ptr<WhisperCudaTpModel>> WhisperCudaTpModel::load(const WhisperModel& host,
                                                                       const WhisperCudaTpOptions& options) {
  if (options.devices.empty()) return invalid_argument("a tensor-parallel Whisper needs at least one device");
  const int64_t world = static_cast<int64_t>(options.devices.size());
  const WhisperConfig& c = host.config();
  // Checked here too (each rank checks again) so the error comes before any GPU memory is taken.
  if (c.encoder_attention_heads % world != 0 || c.decoder_attention_heads % world != 0) {
    return invalid_argument("tensor parallel over " + std::to_string(world) + " GPUs needs the encoder's " +
                            std::to_string(c.encoder_attention_heads) + " and the decoder's " +
                            std::to_string(c.decoder_attention_heads) + " heads to divide by " + std::to_string(world));
  }
  auto model = std::unique_ptr<WhisperCudaTpModel>(new WhisperCudaTpModel());
  ASSIGN_OR_RETURN(model->group_, TpGroup::create(options.devices, options.collective));
  model->ranks_.resize(options.devices.size());
  // Every rank at once: each load ends with eager decoder runs whose all-reduces need all ranks.
  RETURN_IF_ERROR(model->group_->run([&](int r) -> Status {
    WhisperCudaOptions o = options.rank;
    o.device = options.devices[r];
    o.tp_collective = model->group_->collective();
    o.tp_rank = r;
    ASSIGN_OR_RETURN(model->ranks_[r], WhisperCudaModel::load(host, o));
    return ok_status();
  }));
  return model;
}

WhisperCudaTpModel::~WhisperCudaTpModel() {
  // Each rank frees its memory with its own device current; the rank threads are joined last.
  for (std::unique_ptr<WhisperCudaModel>& rank : ranks_) {
    if (!rank) continue;
    cudaSetDevice(rank->options().device);
    rank.reset();
  }
}

int64_t WhisperCudaTpModel::memory_bytes() const {
  int64_t total = 0;
  for (const auto& rank : ranks_) total += rank->memory_bytes();
  return total;
}

StatusOr<std::shared_ptr<const WhisperEncoded>> WhisperCudaTpModel::encode(const Tensor& mel) {
  auto encoded = std::make_shared<Encoded>();
  encoded->owner = this;
  encoded->parts.resize(ranks_.size());
  RETURN_IF_ERROR(group_->run([&](int r) -> Status {
    ASSIGN_OR_RETURN(encoded->parts[r], ranks_[r]->encode(mel));
    return ok_status();
  }));
  return std::shared_ptr<const WhisperEncoded>(std::move(encoded));
}

StatusOr<std::unique_ptr<WhisperDecoderRows>> WhisperCudaTpModel::new_rows(int64_t capacity) {
  std::vector<std::unique_ptr<WhisperDecoderRows>> parts(ranks_.size());
  RETURN_IF_ERROR(group_->run([&](int r) -> Status {
    ASSIGN_OR_RETURN(parts[r], ranks_[r]->new_rows(capacity));
    return ok_status();
  }));
  return std::unique_ptr<WhisperDecoderRows>(new Rows(this, std::move(parts)));
}

}  // namespace mmserve::models
