// The CPU WhisperBackend (whisper_decoding.h) over WhisperModel: the encoder output stays a host vector, and the
// decoder rows are kept in groups, each a WhisperDecoderState whose rows advance in lockstep (the CPU model's
// state has one length for all its rows). Rows that join together with prompts of one length form one group;
// step() runs every group; reorder() gathers each group's surviving rows (WhisperDecoderState::reorder), so
// rows of different lengths (requests that joined at different steps) coexist.
// Tests: tests/unit/models/whisper_decoding_test.cpp (rows against the model's own lockstep decoding).
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "models/whisper/whisper_decoding.h"

namespace mmserve::models {
namespace {

class CpuEncoded final : public WhisperEncoded {
 public:
  CpuEncoded(std::vector<float> data, int64_t windows, int64_t frames, int64_t d)
      : data_(std::move(data)), windows_(windows), frames_(frames), d_(d) {}
  int64_t windows() const override { return windows_; }
  int64_t frames() const override { return frames_; }
  const float* window(int64_t w) const { return data_.data() + w * frames_ * d_; }
  int64_t d() const { return d_; }

 private:
  std::vector<float> data_;
  int64_t windows_, frames_, d_;
};

class CpuDecoderRows final : public WhisperDecoderRows {
 public:
  CpuDecoderRows(std::shared_ptr<const WhisperModel> model, int64_t capacity, int64_t max_rows)
      : model_(std::move(model)), capacity_(capacity), max_rows_(max_rows) {}

  int64_t rows() const override { return static_cast<int64_t>(rows_.size()); }
  int64_t capacity() const override { return capacity_; }
  int64_t length(int64_t row) const override { return groups_[rows_[row].group].length; }
  int64_t vocab_size() const override { return model_->config().vocab_size; }

  Status prefill(const std::shared_ptr<const WhisperEncoded>& encoded, const std::vector<int64_t>& windows,
                 const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                 const std::vector<int64_t>& extra_positions, std::vector<float>* extra_logits) override {
    const auto* enc = dynamic_cast<const CpuEncoded*>(encoded.get());
    if (enc == nullptr) return invalid_argument("encoder output of another device given to the CPU decoder");
    const int64_t n = static_cast<int64_t>(prompts.size());
    const int64_t vocab = vocab_size();
    if (static_cast<int64_t>(windows.size()) != n) return invalid_argument("one window per prompt needed");
    if (rows() + n > max_rows_) {
      return resource_exhausted("prefill(): " + std::to_string(rows() + n) + " decoder rows; these hold " +
                                std::to_string(max_rows_) + " (decoder_rows)");
    }
    if (!extra_positions.empty() && (static_cast<int64_t>(extra_positions.size()) != n || extra_logits == nullptr)) {
      return invalid_argument("one extra position per prompt (and an output) needed");
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t len = static_cast<int64_t>(prompts[k].size());
      if (windows[k] < 0 || windows[k] >= enc->windows()) return invalid_argument("window index out of range");
      if (len < 1 || len > capacity_) {
        return invalid_argument("prompt of " + std::to_string(len) + " tokens: must be 1.." +
                                std::to_string(capacity_));
      }
      const int64_t extra = extra_positions.empty() ? -1 : extra_positions[k];
      if (extra >= len) return invalid_argument("extra logits position past the prompt");
    }
    logits.assign(static_cast<size_t>(n * vocab), 0.0f);
    if (extra_logits != nullptr) extra_logits->assign(static_cast<size_t>(n * vocab), 0.0f);
    // One group per (prompt length, extra position): its rows prefill in lockstep.
    std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> by_shape;
    for (int64_t k = 0; k < n; ++k) {
      by_shape[{static_cast<int64_t>(prompts[k].size()), extra_positions.empty() ? -1 : extra_positions[k]}].push_back(
          k);
    }
    const int64_t first_new = rows();
    std::vector<RowRef> new_refs(static_cast<size_t>(n));
    for (const auto& [shape, members] : by_shape) {
      const int64_t m = static_cast<int64_t>(members.size());
      const int64_t frames = enc->frames(), d = enc->d();
      std::vector<float> enc_rows(static_cast<size_t>(m * frames * d));
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(enc_rows.data() + i * frames * d, enc->window(windows[members[i]]), frames * d * sizeof(float));
      }
      ASSIGN_OR_RETURN(WhisperDecoderState state, model_->start_decoder(enc_rows, m, frames, capacity_));
      const int64_t extra = shape.second;
      std::vector<float> group_logits;
      if (extra >= 0) {
        std::vector<std::vector<int32_t>> head;
        for (int64_t k : members) head.emplace_back(prompts[k].begin(), prompts[k].begin() + extra + 1);
        RETURN_IF_ERROR(model_->prefill(state, head, group_logits));
        for (int64_t i = 0; i < m; ++i) {
          std::copy_n(group_logits.data() + i * vocab, vocab, extra_logits->data() + members[i] * vocab);
        }
      }
      if (extra + 1 < shape.first) {
        std::vector<std::vector<int32_t>> tail;
        for (int64_t k : members) tail.emplace_back(prompts[k].begin() + extra + 1, prompts[k].end());
        RETURN_IF_ERROR(model_->prefill(state, tail, group_logits));
      }
      for (int64_t i = 0; i < m; ++i) {
        std::copy_n(group_logits.data() + i * vocab, vocab, logits.data() + members[i] * vocab);
        new_refs[members[i]] = RowRef{static_cast<int64_t>(groups_.size()), i};
      }
      groups_.push_back(std::move(state));
    }
    rows_.resize(static_cast<size_t>(first_new + n));
    std::copy(new_refs.begin(), new_refs.end(), rows_.begin() + first_new);
    return ok_status();
  }

  Status step(const std::vector<int32_t>& tokens, std::vector<float>& logits) override {
    if (static_cast<int64_t>(tokens.size()) != rows()) {
      return invalid_argument("step needs one token per row (" + std::to_string(rows()) + ")");
    }
    const int64_t vocab = vocab_size();
    logits.assign(tokens.size() * static_cast<size_t>(vocab), 0.0f);
    // Rows of each group in the group's own order.
    std::vector<std::vector<int64_t>> members(groups_.size());
    for (auto& m : members) m.clear();
    for (int64_t r = 0; r < rows(); ++r) {
      std::vector<int64_t>& m = members[rows_[r].group];
      if (static_cast<int64_t>(m.size()) < groups_[rows_[r].group].batch) m.resize(groups_[rows_[r].group].batch, -1);
      m[rows_[r].index] = r;
    }
    std::vector<float> group_logits;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].batch == 0) continue;
      std::vector<int32_t> group_tokens;
      for (int64_t r : members[g]) group_tokens.push_back(tokens[r]);
      RETURN_IF_ERROR(model_->step(groups_[g], group_tokens, group_logits));
      for (size_t i = 0; i < members[g].size(); ++i) {
        std::copy_n(group_logits.data() + i * vocab, vocab, logits.data() + members[g][i] * vocab);
      }
    }
    return ok_status();
  }

  Status reorder(const std::vector<int64_t>& src) override {
    if (static_cast<int64_t>(src.size()) > max_rows_) {
      return resource_exhausted("reorder(): " + std::to_string(src.size()) + " decoder rows; these hold " +
                                std::to_string(max_rows_) + " (decoder_rows)");
    }
    for (int64_t s : src) {
      if (s < 0 || s >= rows()) return invalid_argument("reorder source row " + std::to_string(s) + " out of range");
    }
    // Per old group: the old in-group indices the new rows take, in new-row order.
    std::vector<std::vector<int64_t>> gathers(groups_.size());
    std::vector<RowRef> next(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      const RowRef old = rows_[src[i]];
      next[i] = RowRef{old.group, static_cast<int64_t>(gathers[old.group].size())};
      gathers[old.group].push_back(old.index);
    }
    std::vector<WhisperDecoderState> kept;
    std::vector<int64_t> new_group(groups_.size(), -1);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (gathers[g].empty()) continue;
      RETURN_IF_ERROR(groups_[g].reorder(gathers[g]));
      new_group[g] = static_cast<int64_t>(kept.size());
      kept.push_back(std::move(groups_[g]));
    }
    for (RowRef& r : next) r.group = new_group[r.group];
    groups_ = std::move(kept);
    rows_ = std::move(next);
    return ok_status();
  }

 private:
  struct RowRef {
    int64_t group = 0, index = 0;
  };
  std::shared_ptr<const WhisperModel> model_;
  int64_t capacity_;
  int64_t max_rows_;
  std::vector<WhisperDecoderState> groups_;
  std::vector<RowRef> rows_;
};

class CpuBackend final : public WhisperBackend {
 public:
  CpuBackend(std::shared_ptr<const WhisperModel> model, int64_t max_rows)
      : model_(std::move(model)), max_rows_(max_rows > 0 ? max_rows : std::numeric_limits<int64_t>::max()) {}
  const WhisperConfig& config() const override { return model_->config(); }
  Device device() const override { return Device{}; }
  DType dtype() const override { return DType::kF32; }
  int64_t memory_bytes() const override { return static_cast<int64_t>(model_->weight_bytes()); }

  StatusOr<std::shared_ptr<const WhisperEncoded>> encode(const Tensor& mel) override {
    std::vector<float> out;
    RETURN_IF_ERROR(model_->encode(mel, out));
    const int64_t windows = mel.shape()[0];
    const int64_t frames = whisper_encoder_frames(mel.shape()[2]);
    return std::shared_ptr<const WhisperEncoded>(
        std::make_shared<CpuEncoded>(std::move(out), windows, frames, model_->config().d_model));
  }

  StatusOr<std::unique_ptr<WhisperDecoderRows>> new_rows(int64_t capacity) override {
    if (capacity < 1 || capacity > model_->config().max_target_positions) {
      return invalid_argument("decoder capacity " + std::to_string(capacity) + " is outside 1.." +
                              std::to_string(model_->config().max_target_positions));
    }
    return std::unique_ptr<WhisperDecoderRows>(std::make_unique<CpuDecoderRows>(model_, capacity, max_rows_));
  }
  int64_t max_rows() const override { return max_rows_; }

 private:
  std::shared_ptr<const WhisperModel> model_;
  int64_t max_rows_;
};

}  // namespace

std::unique_ptr<WhisperBackend> make_cpu_whisper_backend(std::shared_ptr<const WhisperModel> model, int64_t max_rows) {
  return std::make_unique<CpuBackend>(std::move(model), max_rows);
}

}  // namespace mmserve::models
