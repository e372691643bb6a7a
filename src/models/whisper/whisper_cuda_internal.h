// The device-side structures of WhisperCudaModel (whisper_cuda.h), shared by its two source files: whisper_cuda.cpp
// (load, encoder, decoder forward, graphs) and whisper_cuda_rows.cpp (the decoder rows: prefill, step, reorder).
// Internal to those files.
#pragma once

#include <utility>
#include <vector>

#include "models/whisper/whisper_cuda.h"

namespace mmserve::models {

// Device pointers into weight_arena_. Norms and the biases of GEMMs that write the f32 stream are f32;
// matrices, embeddings and the other biases are in the compute dtype.
struct BlockWeightsCuda {
  const float *ln1_w = nullptr, *ln1_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
  const void *qkv_w = nullptr, *qkv_b = nullptr;  // [3d, d], [3d]
  const void* out_w = nullptr;
  const float* out_b = nullptr;
  const void *fc1_w = nullptr, *fc1_b = nullptr;
  const void* fc2_w = nullptr;
  const float* fc2_b = nullptr;
};

struct WhisperCudaModel::LayerWeights {
  BlockWeightsCuda self;
  const float *cross_ln_w = nullptr, *cross_ln_b = nullptr;
  const void *cross_q_w = nullptr, *cross_q_b = nullptr;
  const void* cross_k_w = nullptr;  // no bias
  const void *cross_v_w = nullptr, *cross_v_b = nullptr;
  const void* cross_out_w = nullptr;
  const float* cross_out_b = nullptr;
};

struct WhisperCudaModel::Weights {
  const void *conv1_w = nullptr, *conv1_b = nullptr;  // [d, mels * 3], [d] (conv1 writes dtype)
  const void* conv2_w = nullptr;                      // [d, d * 3]
  const float* conv2_b = nullptr;                     // conv2 writes the f32 stream
  const void* encoder_positions = nullptr;            // [max_source_positions, d]
  std::vector<BlockWeightsCuda> encoder;
  const float *encoder_ln_w = nullptr, *encoder_ln_b = nullptr;
  const void *tokens = nullptr, *decoder_positions = nullptr;
  std::vector<LayerWeights> decoder;
  const float *decoder_ln_w = nullptr, *decoder_ln_b = nullptr;
  const void* lm_head = nullptr;  // tokens when tied
};

// Per layer: self caches [max_batch, capacity, d] (dtype); cross K/V [max_batch, frames_max, d] (dtype or
// 1 byte) and, compressed, their scales [max_batch, heads].
struct WhisperCudaModel::State {
  std::vector<void*> self_k, self_v, cross_k, cross_v;
  std::vector<float*> k_scale, v_scale;
};

struct WhisperCudaModel::Activations {
  float* mel = nullptr;     // [max_batch, mels, 2 * frames_max]
  void* cols = nullptr;     // im2col of either conv (dtype)
  void* conv1 = nullptr;    // [max_batch * 2 * frames_max, d] (dtype)
  float* x = nullptr;       // [rows_max, d] the residual stream
  void* normed = nullptr;   // [rows_max, d]
  void* qkv = nullptr;      // [rows_max, 3d]; also the scratch of the compressed cross K/V
  void* context = nullptr;  // [rows_max, d]
  void* mlp = nullptr;      // [rows_max, ffn]
  float* logits = nullptr;  // [2 * max_batch, vocab]
  // [positions | self lengths | cross lengths | ln rows (2x) | ids (max_batch * max_prefill) | reorder index]
  int32_t* ints = nullptr;
  void* attention_ws = nullptr;
  size_t attention_ws_bytes = 0;
  void* gather_scratch = nullptr;
  size_t gather_scratch_bytes = 0;
  void* gemm_ws = nullptr;
};

// ------------------------------------------------------------------------------------ encoded windows, rows

class WhisperCudaModel::Encoded : public WhisperEncoded {
 public:
  int64_t windows() const override { return windows_; }
  int64_t frames() const override { return frames_; }

  const WhisperCudaModel* owner = nullptr;
  int64_t id = 0;  // unique per model: tells rows from different encode() calls apart in reorder()
  int64_t windows_ = 0, frames_ = 0, d = 0;
  DType dtype = DType::kF16;
  DeviceArena buffer;
  void* data = nullptr;  // [windows, frames, d] (dtype)
};

class WhisperCudaModel::Rows : public WhisperDecoderRows {
 public:
  Rows(WhisperCudaModel* model, int64_t capacity) : model_(model), capacity_(capacity) {}
  ~Rows() override { model_->rows_alive_ = false; }

  int64_t rows() const override { return static_cast<int64_t>(lengths.size()); }
  int64_t capacity() const override { return capacity_; }
  int64_t length(int64_t row) const override { return lengths.at(static_cast<size_t>(row)); }
  int64_t vocab_size() const override { return model_->config_.vocab_size; }

  Status prefill(const std::shared_ptr<const WhisperEncoded>& encoded, const std::vector<int64_t>& windows,
                 const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                 const std::vector<int64_t>& extra_positions, std::vector<float>* extra_logits) override {
    const auto* ours = dynamic_cast<const Encoded*>(encoded.get());
    if (!ours || ours->owner != model_) {
      return invalid_argument("prefill() needs an encoder output of this GPU model");
    }
    return model_->rows_prefill(*this, *ours, windows, prompts, logits, extra_positions, extra_logits);
  }
  Status step(const std::vector<int32_t>& tokens, std::vector<float>& logits) override {
    return model_->rows_step(*this, tokens, logits);
  }
  Status reorder(const std::vector<int64_t>& src) override { return model_->rows_reorder(*this, src); }

  // Host mirrors of each live row.
  std::vector<int64_t> lengths;
  std::vector<int64_t> frames;                      // encoder frames its cross K/V hold
  std::vector<std::pair<int64_t, int64_t>> source;  // (encoded id, window): same source = same cross K/V

 private:
  WhisperCudaModel* model_;
  int64_t capacity_;
};

}  // namespace mmserve::models
