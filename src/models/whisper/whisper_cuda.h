// Whisper on an NVIDIA GPU: the same model as whisper.h, its forward written out for the CUDA kernels, the
// decoder step captured into one CUDA graph per batch bucket. It implements WhisperBackend
// (whisper_decoding.h), so the search loops and the executor drive it exactly as they drive the CPU model.
//
// Precision: weights and GEMM inputs in `dtype` (f16 by default: Whisper checkpoints are f16; bf16; or f32 as
// the precise path), the residual stream in f32 (the output projections are GEMMs with an f32 output and
// beta = 1, as in clip_cuda.h), logits in f32.
//
// Decoder state: the model owns max_batch rows, each with a self-attention KV cache of `capacity` tokens per
// layer and the cross-attention K/V of one encoder window per layer, stored in `dtype` or compressed (FP8 E4M3
// or INT8 with one scale per (row, head): quantize_kv, computed once when the row joins). Live rows are always
// 0..rows-1 (reorder compacts and duplicates them). The host keeps each row's length; every call writes the
// token ids, positions and KV lengths into device buffers with one copy, so the graph of a bucket serves any
// step of rows of any lengths: no host allocation and no synchronisation in a step but the logits copy.
//
// Memory: one DeviceArena for the weights, one for the decoder state, one for activations (sized for
// max_batch encoder windows and the largest prefill), pinned staging for inputs and logits; an encode()
// result owns one allocation for its output. The step graphs are captured at load after one eager run of
// each bucket (which also picks every cuBLASLt algorithm).
// One WhisperCudaModel is driven by one thread at a time, with at most one live WhisperDecoderRows.
// Tensor parallel: with options.tp_collective set, the model is rank tp_rank of a group (whisper_cuda_tp.h drives
// the ranks): it holds its heads of every attention (QKV, cross q/k/v column-parallel by whole heads, the out
// projections row-parallel) and its share of fc1/fc2, caches only its heads' K/V, and all-reduces the f32 stream
// after each row-parallel GEMM (2 per encoder block, 3 per decoder layer). Embeddings, convolutions, norms and the
// tied output projection stay whole (models/common/tensor_parallel.h says why), so every rank computes the same
// logits.
// Tests: tests/unit/models/whisper_cuda_test.cpp (HF goldens per dtype, graphs vs eager, batch vs alone,
// compressed cross K/V agreement); bench: bench/whisper_gpu_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/collective.h"
#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/attention/attention_kv.h"
#include "kernels/gemm/gemm_cuda.h"
#include "models/whisper/whisper.h"
#include "models/whisper/whisper_decoding.h"

namespace mmserve::models {

// How the cross-attention K/V are stored: kSame (the compute dtype), kFp8E4M3 or kInt8 (per-(row, head) scales).
using WhisperCrossKv = kernels::KvStorage;
const char* whisper_cross_kv_name(WhisperCrossKv storage);  // "same", "fp8_e4m3", "int8"

struct WhisperCudaOptions {
  int device = 0;
  DType dtype = DType::kF16;     // f32, f16 or bf16
  int64_t max_batch = 16;        // decoder rows, and encoder windows per encoder pass
  std::vector<int64_t> buckets;  // decoder step graphs (clipped to max_batch, which is added); empty: 1, 2, 4, ...
  int64_t capacity = 0;          // tokens per row; 0 = max_target_positions
  bool cuda_graphs = true;       // false (or env MMSERVE_CUDA_GRAPHS=0): eager steps
  WhisperCrossKv cross_kv = WhisperCrossKv::kSame;
  // Tensor parallel: this model is rank `tp_rank` of tp_collective's group (not owned; null: no group). A
  // collective that cannot be captured turns the step graphs off.
  DeviceCollective* tp_collective = nullptr;
  int tp_rank = 0;
};

struct WhisperCudaMemory {
  size_t weight_bytes = 0;
  size_t self_kv_bytes = 0;        // self-attention KV caches of all rows
  size_t cross_kv_bytes = 0;       // cross-attention K/V of all rows as stored (+ scales)
  size_t cross_kv_bytes_same = 0;  // what they take in the compute dtype (saved = this - cross_kv_bytes)
  size_t activation_bytes = 0;
  size_t workspace_bytes = 0;  // cuBLASLt + split-KV attention partials + the reorder scratch
  size_t graph_bytes = 0;      // device memory the instantiated graphs took (cudaMemGetInfo before/after)
  size_t pinned_bytes = 0;
  size_t total() const;
  std::string to_string() const;  // one line for the load log and the tests
};

class WhisperCudaModel : public WhisperBackend {
 public:
  // Loads an HF Whisper directory (parsed and checked by WhisperModel::load), uploads the weights in
  // options.dtype, plans all memory and captures the step graphs. Errors: the checkpoint's own, bad options
  // (kInvalidArgument), no such device, out of GPU memory (kResourceExhausted), shapes the kernels do not take
  // (kUnimplemented).
  static StatusOr<std::unique_ptr<WhisperCudaModel>> load(const std::string& model_dir,
                                                          const WhisperCudaOptions& options);
  // The same from a CPU model already in memory (its f32 weights are converted to options.dtype).
  static StatusOr<std::unique_ptr<WhisperCudaModel>> load(const WhisperModel& host, const WhisperCudaOptions& options);
  ~WhisperCudaModel() override;

  // WhisperBackend.
  const WhisperConfig& config() const override { return config_; }
  Device device() const override { return Device::cuda(options_.device); }
  DType dtype() const override { return options_.dtype; }
  int64_t memory_bytes() const override { return static_cast<int64_t>(memory_.total()); }
  // mel [windows, num_mel_bins, mel_frames] f32 on the host, mel_frames <= 2 * max_source_positions; any number
  // of windows (max_batch per encoder pass). The output stays on this GPU.
  StatusOr<std::shared_ptr<const WhisperEncoded>> encode(const Tensor& mel) override;
  // capacity <= capacity(); kFailedPrecondition while another rows object of this model is alive.
  StatusOr<std::unique_ptr<WhisperDecoderRows>> new_rows(int64_t capacity) override;
  int64_t max_rows() const override { return options_.max_batch; }

  // The same as encode() with the mel already on this GPU (benchmarks: the input copy is not timed, as HF's).
  StatusOr<std::shared_ptr<const WhisperEncoded>> encode_on_device(const float* mel, int64_t windows,
                                                                   int64_t mel_frames);
  // An encode() result's output [windows, frames, d_model] as f32 on the host (resized).
  static Status encoded_to_host(const WhisperEncoded& encoded, std::vector<float>& out);

  const WhisperCudaOptions& options() const { return options_; }
  const WhisperCudaMemory& memory() const { return memory_; }
  int64_t max_batch() const { return options_.max_batch; }
  int64_t capacity() const { return capacity_; }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  class Rows;
  class Encoded;
  struct LayerWeights;
  struct Weights;
  struct State;
  struct Activations;

  WhisperCudaModel() = default;
  Status init(const WhisperModel& host, const WhisperCudaOptions& options);
  Status upload_weights(const WhisperModel& host);
  Status plan_state();
  Status plan_activations();
  Status capture_graphs();
  int64_t bucket_for(int64_t n) const;

  // The encoder over `windows` (<= max_batch) mel windows already in act_->mel; output rows into `out` (dtype).
  Status encoder_forward(int64_t windows, int64_t mel_frames, void* out);
  // Cross-attention K/V of rows [row0, row0 + count) from consecutive windows of one encoder output.
  Status compute_cross_kv(int64_t row0, int64_t count, const void* encoder_rows, int64_t frames);
  // The decoder over rows [row0, row0 + batch), n tokens each, reading ids / positions / lengths from the
  // device int block that upload_inputs() copied; logits f32 [logit_rows, vocab] into act_->logits, of the
  // rows the block's ln_rows name.
  Status decoder_forward(int64_t row0, int64_t batch, int64_t n, int64_t logit_rows);
  // Host -> device: the per-call int block (see Activations::ints), filled by the caller in pinned_ints_:
  // [positions | self lengths | cross lengths | ln rows (2x) | id_count ids], each per-row array max_batch long.
  Status upload_inputs(int64_t id_count);
  // Tensor parallel: the beta of the row-parallel GEMMs (1 on rank 0, else 0) and the all-reduce of the stream.
  float residual_beta() const;
  Status reduce_residual(int64_t rows);
  Status copy_logits(int64_t rows, float* out);
  // Rows' entry points (see Rows in whisper_cuda.cpp).
  Status rows_prefill(Rows& rows, const Encoded& encoded, const std::vector<int64_t>& windows,
                      const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                      const std::vector<int64_t>& extra_positions, std::vector<float>* extra_logits);
  Status rows_step(Rows& rows, const std::vector<int32_t>& tokens, std::vector<float>& logits);
  Status rows_reorder(Rows& rows, const std::vector<int64_t>& src);

  WhisperConfig config_;
  WhisperCudaOptions options_;
  std::vector<int64_t> buckets_;
  int64_t capacity_ = 0, max_prefill_ = 0, frames_max_ = 0, ln_rows_max_ = 0;
  int64_t tp_world_ = 1, tp_rank_ = 0;
  int64_t attn_width_ = 0;                     // d_model / tp_world_: this rank's columns of q, k, v and the caches
  int64_t encoder_ffn_ = 0, decoder_ffn_ = 0;  // this rank's rows of fc1
  CudaStream stream_;
  DeviceArena weight_arena_, state_arena_, activation_arena_;
  std::unique_ptr<Weights> weights_;
  std::unique_ptr<State> state_;
  std::unique_ptr<Activations> act_;
  std::unique_ptr<kernels::CublasLtGemm> gemm_;
  PinnedBuffer pinned_ints_, pinned_logits_;
  std::map<int64_t, cudaGraphExec_t> graphs_;  // bucket -> decoder step graph
  WhisperCudaMemory memory_;
  int64_t next_encoded_id_ = 1;
  bool rows_alive_ = false;
};

// Whisper-specific element-wise kernels (whisper_cuda.cu), internal to whisper_cuda.cpp.
namespace whisper_cuda_kernels {
// x[r, :] = table[ids[r], :] + position_table[positions[r / n] + r % n, :] (f32 out), r < batch * n. Ids and
// positions out of range read row 0 (the host validated them; this guards memory only).
Status decoder_embedding(const int32_t* ids, const int32_t* positions, int64_t batch, int64_t n, const void* table,
                         const void* position_table, DType dtype, int64_t vocab, int64_t max_positions, int64_t d,
                         float* x, cudaStream_t stream);
// x[b * frames + t, :] = gelu(x[b * frames + t, :]) + positions[t, :] (x f32, in place; gelu in erf form).
Status encoder_gelu_positions(float* x, const void* positions, DType dtype, int64_t batch, int64_t frames, int64_t d,
                              cudaStream_t stream);
}  // namespace whisper_cuda_kernels

}  // namespace mmserve::models
