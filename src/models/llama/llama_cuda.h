// The Llama family (llama.h: Llama, Mistral, Qwen2, Qwen3) on an NVIDIA GPU, in bf16, f16 or f32: the same forward
// as the CPU model, one engine step (DecoderStep) over a paged KV pool in device memory.
//
// Layout. Weights in the compute dtype, q/k/v fused into one [q + 2 kv, hidden] matrix and gate/up into one
// [2 intermediate, hidden] (one GEMM each); the residual stream is f32 (the o and down projections write it with
// beta = 1: the residual add is the GEMM's epilogue), RMSNorm reads it and writes the dtype. Per layer: RMSNorm ->
// QKV GEMM (+bias) -> [Qwen3 q/k RMSNorm] -> RoPE on q and k in place -> K/V written to their slots -> paged
// attention (split-K flash-decoding for one-token queries, tiled causal over pages for chunks) -> o GEMM into the
// residual -> RMSNorm -> gate_up GEMM -> SwiGLU -> down GEMM into the residual. The final norm and lm_head run on
// the step's logit rows only (gathered), logits in f32.
//
// CUDA graphs: a decode step of n sequences (every one a single token) is replayed from the graph of the smallest
// bucket >= n (1, 2, 4, 8, 16, 32, 64, ... up to max_num_seqs), its padding rows writing nowhere (slot -1) and
// attending to one key; the step's arrays are copied into the graph's fixed buffers first. Prefill and mixed
// steps run eagerly (their launches are few next to their FLOPs). Dynamic NTK RoPE (frequencies that depend on each
// sequence's length) runs eagerly too, one RoPE launch per sequence.
// Sampling is not here: logits() stays on the device for kernels/sampling (engine/llama_cuda_backend.cpp).
// Mixtral: the MLP is the router GEMM (f32 logits), kernels/moe's routing, then one of three paths. Steps of a few
// tokens (at most num_experts pairs, 16-bit: decode) run each pair through its expert by a GEMV that reads the
// expert id on the device (kernels::moe_gemv_cuda). Larger 16-bit steps plan on the device and run the experts'
// grouped GEMM (kernels::moe_grouped_gemm_cuda): [w1; w3] with the permute fused into its loads and SwiGLU into its
// epilogue, then w2 (f32 out), each one launch for every expert with the row counts read on the device. Neither
// path makes a host round trip, so every decode bucket replays as a CUDA graph. f32 steps, and steps with more
// pairs per expert than options.moe_grouped_rows (compute-bound GEMMs, where cuBLASLt is faster), copy the experts'
// row counts to the host and run one cuBLASLt GEMM per expert with rows. All end in the weighted combine added
// to the residual (docs/perf/mixtral_gpu.md).
// LoRA: with max_loras slots, each step's adapters (DecoderStep.loras) are copied into device slots (bf16/f16/f32 as
// the model, [slot][layer] per linear, rank up to max_lora_rank) when not resident (from the slot image packed at
// load, on a copy stream), and each adapted group of linears (q, k and v; o; gate and up; down) gets every row's
// delta from its slot (row -> slot a device array, copied per step): kernels/lora's shrink and expand after the
// group's base GEMM. Decode steps with adapters replay their own CUDA graphs (captured
// beside the plain ones); a mix (gate routing: two weighted adapters a row) adds a second pass, eagerly.
// W4A16 (issue 17; llama_cuda_quant.cpp): a checkpoint with an AWQ / GPTQ quantization_config keeps its decoder
// linears as 4-bit weights packed for kernels/w4a16 in the same weight arena, and each of the four GEMMs of a layer
// (qkv, o, gate_up, down) runs through w4a16_gemm_cuda (o and down accumulating into the f32 residual), in the decode
// graphs too. q/k/v (gate/up) are packed as one weight, rows concatenated, when their g_idx agree (always without
// act-order); GPTQ act-order linears with different permutations run one by one into a scratch row, copied into the
// fused row. A group the kernel cannot take (K % 64, N % 16, a group size not a multiple of 32) or whose members are
// not all quantised (modules_to_not_convert) is dequantised at load into the compute dtype and runs as a 16-bit GEMM.
// bf16 or f16 only (f32: kInvalidArgument); Mixtral's quantised experts are kUnimplemented.
// FP8 (issue 17 item 3; llama_cuda_fp8.cpp): per-tensor E4M3 (or E5M2) weights with static per-tensor input scales
// (compressed-tensors strategy tensor, AutoFP8 activation_scheme static) keep each linear's codes and two scales on
// the device; each GEMM quantises its input with fp8_quantize_cuda (the linear's input_scale) and runs
// CublasLtGemm::run_fp8 (o and down with accumulate: beta = 1 into the f32 residual). q/k/v (gate/up) are stored
// rows concatenated and run as one GEMM when their weight and input scales agree, else one GEMM per linear into its
// columns of the fused row (each with its own scales: the CPU path's semantics). Per-channel, block-wise,
// weight-only and dynamic schemes, partly-FP8 GEMMs, FP8 lm_head / router / experts: kUnimplemented (CPU serves them).
// FP8 KV cache (issue 17 item 3; options.kv_cache_dtype "fp8" / "fp8_e4m3" / "fp8_e5m2", vLLM's --kv-cache-dtype):
// the pool holds one-byte codes (kernels/paged_attention's PagedKvStorage), so a block takes half the bytes and the
// same kv_cache_bytes hold twice the blocks; one K and one V scale per layer (the checkpoint's
// model.layers.N.self_attn.k_scale / v_scale when it has them, else 1.0) in device memory, read by the KV write and
// the attention on the device (the decode graphs replay them). bf16 / f16 only.
// Tests: tests/gpu/llama_cuda_test.cpp (logits against HF's fixtures and the CPU model; graphs vs eager),
// tests/conformance/llama_cuda_quant_test.cpp (W4A16 against the CPU model of the same checkpoint),
// tests/conformance/llama_cuda_fp8_test.cpp (FP8 the same way), tests/conformance/llama_cuda_kv_fp8_test.cpp (the
// FP8 KV cache against the CPU model and the 16-bit pool; the pool's block bytes without a GPU);
// bench: bench/llama_gpu_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/lora/lora_cuda.h"
#include "kernels/paged_attention/paged_attention.h"
#include "kernels/w4a16/w4a16_cuda.h"
#include "models/common/decoder_step.h"
#include "models/llama/llama.h"
#include "models/lora/gate_head.h"
#include "models/lora/lora_adapter.h"
#include "models/quant/quant_config.h"

namespace mmserve::models {

struct LlamaCudaOptions {
  int device = 0;
  DType dtype = DType::kBF16;
  int64_t block_size = 16;
  int64_t num_blocks = 0;       // the KV pool; 0: sized from kv_cache_bytes, else from memory_utilization
  int64_t kv_cache_bytes = 0;
  double memory_utilization = 0.85;  // share of the GPU's total memory weights + buffers + pool may take
  int64_t max_num_tokens = 2048;     // tokens of one step (the scheduler's budget)
  int64_t max_num_seqs = 256;        // sequences of one step
  int64_t max_model_len = 0;         // 0: the model's max_length()
  bool graphs = true;
  // Mixtral: steps of up to this many (token, expert) pairs per expert on average run the experts' grouped GEMM
  // (one launch for every expert, row counts read on the device: graph-capturable); above, one cuBLASLt GEMM per
  // expert after a host synchronisation (faster where those GEMMs are compute-bound: docs/perf/mixtral_gpu.md).
  // 0: never (the benchmarks' baseline).
  int64_t moe_grouped_rows = 48;
  // LoRA (issue 16): adapter slots in device memory (0: no LoRA) and the largest rank a slot holds. A step's adapters
  // are made resident on demand (LRU over the slots the step does not use); more distinct adapters in one step than
  // slots is kResourceExhausted.
  int64_t max_loras = 0;
  int64_t max_lora_rank = 16;
  // The KV pool's elements: "auto" (the compute dtype), "fp8" or "fp8_e4m3", "fp8_e5m2" (one-byte codes with a K and
  // a V scale per layer: twice the blocks in the same bytes). FP8 needs bf16 or f16.
  std::string kv_cache_dtype = "auto";
  // The token embedding table in host memory instead of the GPU's (llama.cpp keeps token_embd on the CPU too): a
  // step's rows are gathered on the host into pinned staging and copied up with the step's arrays (decode: a few
  // KB; a prefill of 2048 tokens at Llama-3-8B's width 16 MB). Saves vocab x hidden 16-bit values of GPU memory
  // (1.05 GB for Llama-3-8B: what puts its INT4 weights under 5.5 GB). No effect with tied embeddings (the lm_head
  // needs the table on the GPU). llama_cuda_embed.cpp.
  bool embeddings_on_host = false;
};

class LlamaCudaModel {
 public:
  // From an HF directory (weights of any stored float dtype converted to options.dtype).
  static StatusOr<std::unique_ptr<LlamaCudaModel>> load(const std::string& model_dir, const LlamaCudaOptions& options);
  // The decoder of a checkpoint that embeds one (LLaVA): `config` and `names` say what and where; the store's
  // tensors were checked by the caller.
  static StatusOr<std::unique_ptr<LlamaCudaModel>> load_decoder(const WeightStore& store, const LlamaConfig& config,
                                                                const LlamaWeightNames& names,
                                                                const LlamaCudaOptions& options);
  // Random weights of `config`'s shapes (normal-ish, std 0.02; norms 1): benchmarks of shapes with no checkpoint.
  static StatusOr<std::unique_ptr<LlamaCudaModel>> random(const LlamaConfig& config, const LlamaCudaOptions& options,
                                                          uint64_t seed);
  // Random 4-bit weights (llama_cuda_quant.cpp): every decoder linear the kernel takes as a random W4A16 weight in
  // groups of `group_size` (-1: one group), weights (q - 8) * s of std ~0.02, one random weight per linear shape
  // copied to every layer (timings depend on the bytes, not the values); the rest as random(). Benchmarks.
  static StatusOr<std::unique_ptr<LlamaCudaModel>> random_w4a16(const LlamaConfig& config,
                                                                const LlamaCudaOptions& options, uint64_t seed,
                                                                int64_t group_size = 128);
  // Random FP8 weights (llama_cuda_fp8.cpp): every decoder linear as E4M3 codes of std ~0.02 with one per-tensor
  // weight scale and a static input scale (the fp8-static checkpoint's path); one random code block per GEMM shape
  // copied into every layer's own codes; the rest as random(). Benchmarks.
  static StatusOr<std::unique_ptr<LlamaCudaModel>> random_fp8(const LlamaConfig& config,
                                                              const LlamaCudaOptions& options, uint64_t seed);
  ~LlamaCudaModel();

  const LlamaConfig& config() const { return config_; }
  DType dtype() const { return options_.dtype; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return options_.block_size; }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t table_ld() const { return table_ld_; }
  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.used()); }  // on the GPU
  // Weights kept in host memory (LlamaCudaOptions::embeddings_on_host): 0 otherwise.
  int64_t host_weight_bytes() const { return static_cast<int64_t>(host_embed_.size()); }
  int64_t pool_bytes() const { return pool_bytes_; }
  kernels::PagedKvStorage kv_storage() const { return kv_storage_; }
  // The pool's storage for options.kv_cache_dtype: kInvalidArgument for another name or FP8 with f32 compute.
  static StatusOr<kernels::PagedKvStorage> kv_storage_for(const LlamaCudaOptions& options);
  // The bytes of one block of the pool over every layer, K and V (what kv_cache_bytes is divided by): no GPU needed.
  static StatusOr<int64_t> kv_block_bytes(const LlamaConfig& config, const LlamaCudaOptions& options);
  int64_t memory_bytes() const;  // weights + activations + pool + graphs
  cudaStream_t stream() const { return stream_.get(); }
  bool graphs() const { return !graphs_.empty(); }
  // How a W4A16 checkpoint's GEMMs run (all zero for a 16-bit checkpoint): per layer and GEMM (qkv, o, gate_up,
  // down), packed as one weight, run linear by linear (act-order permutations that differ), or dequantised at load;
  // packed_bytes: the 4-bit weights, scales / zeros and permutations in the arena (part of weight_bytes()).
  struct W4A16Summary {
    std::string format;  // "awq gemm", "gptq v1", "gptq v2"; empty: not quantised
    int64_t fused = 0, separate = 0, dequantized = 0;
    int64_t packed_bytes = 0;
  };
  const W4A16Summary& w4a16_summary() const { return w4a16_summary_; }

  // Captures the decode graphs (after a warm eager run of each bucket). Called by load()/random() when
  // options.graphs.
  Status capture_graphs();
  // Runs the step on stream(); logits() [step.logit_rows.size(), vocab] f32 on the device when the stream is
  // done. Rows in step.embed_rows take step.embeds (host f32, copied before the call returns) as their input
  // embedding (LLaVA's image features); such steps run eagerly. kInvalidArgument for ids outside the vocabulary and steps larger than the options allow (checked on the
  // host before anything is launched). Table entries and slots come from the scheduler and are trusted.
  Status forward(const DecoderStep& step);
  const float* logits() const { return logits_; }
  // Mixtral: the last forward's routing, [layers, step tokens, k], copied to the host (waits for the stream).
  Status copy_routing(MoeRoutingTrace& out);

  // LoRA (llama_cuda_lora_image.cpp). pack_lora_slot_image: `adapter`'s matrices in the slot layout of a model of
  // `config` in `dtype` with max_lora_rank, for LoraAdapter::slot_image: from its f32 copies (LoraModule::a/b), or
  // _from_file from the file's bytes as load_lora_adapter validated them (its LoraImagePacker: no f32 copy is made),
  // the two byte for byte the same image. Host memory pinned when it can be had, reused from an unloaded adapter's
  // image of the same size when one is kept (lora_image_pool_*); any thread: no device memory is touched.
  // kInvalidArgument for a rank above max_lora_rank or another layer count; kFailedPrecondition for an adapter that
  // holds no f32 copies (packed from its file at load).
  static StatusOr<std::shared_ptr<const LoraSlotImage>> pack_lora_slot_image(const LoraAdapter& adapter,
                                                                             const LlamaConfig& config, DType dtype,
                                                                             int64_t max_lora_rank);
  static StatusOr<std::shared_ptr<const LoraSlotImage>> pack_lora_slot_image_from_file(const LoraAdapter& adapter,
                                                                                       const LoraFileModules& stored,
                                                                                       const LlamaConfig& config,
                                                                                       DType dtype,
                                                                                       int64_t max_lora_rank);
  // The freed images' buffers kept for the next load: their bytes, and freeing them now (a bench's fresh loads).
  static size_t lora_image_pool_bytes();
  static void lora_image_pool_clear();
  // Whether the next step may use `adapter` without waiting for its copy to the device. When it is not resident,
  // starts the copy (on a copy stream, from its slot image) into a slot the last step did not use and answers false
  // (or false with nothing started when every slot is in use); the engine asks again before a later step. Errors:
  // the adapter's (a rank above the slots', a linear this model lacks).
  StatusOr<bool> lora_ready(const LoraAdapter& adapter);
  Status lora_wait_copies() { return lora_copy_stream_.synchronize(); }  // every copy lora_ready started
  // The router's embedding (LlamaModel::mean_input_embedding's definition: the mean over the prompt of the
  // decoder's input rows, each token's embed_tokens row here in the model's dtype, widened to f32, or at embed_rows
  // the given host rows of `embeds`): the text rows summed on the device in f32. Between steps only (it borrows the
  // step's residual, logit-row and id buffers; the engine thread). kInvalidArgument for ids outside the vocabulary.
  StatusOr<std::vector<float>> mean_input_embedding(const std::vector<int32_t>& tokens,
                                                    const std::vector<int32_t>& embed_rows = {},
                                                    const float* embeds = nullptr);
  // The router's first layer on the device for a text prompt (no image rows): W1 e + b1 [H] before the ReLU, with e
  // the mean above, never leaving the GPU (a device copy of W1 and b1, made when `gate` is not the head copied last:
  // the distiller's kept rounds are new heads); `e`, when non-null, gets e too (the distiller's sample). Between
  // steps, as mean_input_embedding. kInvalidArgument for a gate of another width or ids outside the vocabulary.
  StatusOr<std::vector<float>> gate_first_layer(const std::vector<int32_t>& tokens,
                                                const std::shared_ptr<const GateHead>& gate,
                                                std::vector<float>* e = nullptr);

 private:
  // W4A16 (llama_cuda_quant.cpp). A layer's four GEMMs, and how each holds its weight.
  enum Gemm { kQkvGemm = 0, kOGemm, kGateUpGemm, kDownGemm, kGemms };
  enum class W4A16Mode { kDense, kFused, kSeparate };
  struct W4A16Linear {                        // a GEMM's packed weight(s): none (dense), one, or one per linear
    std::vector<kernels::W4A16Device> parts;  // in the fused row's column order
    std::vector<int64_t> offsets;             // each part's first column in the fused row
    int64_t width = 0;                        // the fused row's columns
  };
  // FP8 (llama_cuda_fp8.cpp): a GEMM's codes [width, k] (its linears' rows concatenated) and, per linear, its
  // first row and its two device scales (weight_scale, input_scale; input_scale also on the host).
  struct Fp8Part {
    int64_t offset = 0, n = 0;
    const float *w_scale = nullptr, *a_scale = nullptr;
    float w_scale_host = 0, a_scale_host = 0;
  };
  struct Fp8Linear {
    const uint8_t* codes = nullptr;
    kernels::Fp8Format format = kernels::Fp8Format::kE4M3;
    int64_t width = 0, k = 0;
    std::vector<Fp8Part> parts;  // empty: not FP8
    bool fused = false;          // every part's scales equal: one GEMM over all rows
  };
  struct Layer {
    const void *qkv = nullptr, *qkv_bias = nullptr, *o = nullptr, *gate_up = nullptr, *gate_up_bias = nullptr,
               *down = nullptr;
    const float *o_bias = nullptr, *down_bias = nullptr;  // write the f32 residual: f32
    const void *input_norm = nullptr, *post_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    // Mixtral: the router [E, h], every expert's [w1; w3] [E, 2i, h] and w2 [E, h, i], in the compute dtype.
    const void *router = nullptr, *w13 = nullptr, *w2 = nullptr;
    std::array<W4A16Linear, kGemms> w4a16;  // a quantised checkpoint's packed GEMMs (parts empty: dense)
    std::array<Fp8Linear, kGemms> fp8;      // an FP8 checkpoint's GEMMs (parts empty: not FP8)
  };
  // W4A16 (llama_cuda_quant.cpp).
  static StatusOr<std::unique_ptr<LlamaCudaModel>> load_w4a16(const std::string& model_dir, const WeightStore& store,
                                                              const LlamaConfig& config, const QuantConfig& quant,
                                                              const LlamaCudaOptions& options);
  bool w4a16_packed(int64_t layer, Gemm g) const {
    return !w4a16_modes_.empty() && w4a16_modes_[static_cast<size_t>(layer)][g] != W4A16Mode::kDense;
  }
  // Whether GEMM g of `layer` holds no 16-bit weight (W4A16 packed or FP8): plan_weights places none for it.
  bool gemm_quantized(int64_t layer, Gemm g) const { return w4a16_packed(layer, g) || fp8_gemm(layer, g); }
  // FP8 (llama_cuda_fp8.cpp): load() of an FP8 checkpoint; its plan (fp8_gemms_, fp8_planned_bytes_; before
  // plan_weights) and upload (after it); y [m, w.width] (its dtype's, or the f32 residual with accumulate) =
  // dequant(quant(x)) W^T (+ bias) (+ y).
  static StatusOr<std::unique_ptr<LlamaCudaModel>> load_fp8(const std::string& model_dir, const WeightStore& store,
                                                            const LlamaConfig& config, const QuantConfig& quant,
                                                            const LlamaCudaOptions& options);
  bool fp8_gemm(int64_t layer, Gemm g) const {
    return !fp8_gemms_.empty() && fp8_gemms_[static_cast<size_t>(layer)][g];
  }
  Status plan_fp8();
  Status upload_fp8(const WeightStore& store, const QuantConfig& quant);
  int64_t fp8_input_k() const;  // the widest FP8 GEMM input (the quantised input's columns)
  Status fp8_linear(const Fp8Linear& w, const void* x, void* y, bool f32_accumulate, const void* bias, int64_t m);
  // How each layer's GEMMs hold their weights (w4a16_modes_, w4a16_planned_bytes_, the summary's counts), from the
  // checkpoint's quantised linears (`quantized`: their prefixes) and, with act-order, its stored g_idx (`store`;
  // null: random weights, no act-order). Before plan_weights().
  Status plan_w4a16(const WeightStore* store, const QuantConfig& quant, const std::vector<std::string>& quantized);
  // Reads, packs and uploads the packed GEMMs, and writes the dequantised ones into their dense slots (removed from
  // weight_slots_, so upload() skips them). After plan_weights().
  Status upload_w4a16(const WeightStore& store, const QuantConfig& quant);
  size_t w4a16_workspace_need(int64_t rows) const;  // the largest call's workspace, m up to `rows`
  size_t w4a16_scratch_need(int64_t rows) const;    // the separate parts' output rows
  // y [m, w.width] (its dtype's, or the f32 residual with accumulate) = x [m, k] W^T (+ bias) (+ y).
  Status w4a16_linear(const W4A16Linear& w, const void* x, void* y, bool f32_accumulate, const void* bias, int64_t m);

  // Mixtral's sparse MLP of one layer over `tokens` rows of normed_, added to the residual x_ (eager: the experts'
  // row counts come back to the host once per layer; llama_cuda_moe.cpp). Each expert's rows are padded to a few
  // GEMM shapes, at most kMoePadRows extra rows in all (plan_buffers reserves them).
  static constexpr int64_t kMoePadRows = 63;
  Status moe_mlp(const Layer& w, int64_t layer, int64_t tokens);
  // Whether a step of `tokens` tokens takes Mixtral's GEMV path (a few pairs, 16-bit: graph-capturable).
  bool moe_gemv_path(int64_t tokens) const;
  bool moe_grouped_path(int64_t tokens) const;
  // LoRA: the step's adapters resident and its rows' slots on the device (`rows`: the step's, or its graph bucket's).
  Status lora_stage(const DecoderStep& step, int64_t rows);
  // The deltas of the linears `targets` of `layer` (1..3 reading the same x: q, k, v; gate, up) for the active rows:
  // x [tokens, in] -> y [tokens, sum of outs] += ..., each target's columns after the one before (the fused row).
  // lora_apply (after the base linear): the deltas, and for a mix the second adapters' pass. No targets (Mixtral's
  // MLP): nothing. (The shrink on a side stream beside the base GEMM was measured slower: docs/perf/lora_gpu.md.)
  kernels::LoraCudaArgs lora_args(int64_t layer, std::initializer_list<LoraTarget> targets, const void* x, int64_t x_ld,
                                  void* y, DType y_dtype, int64_t y_ld, int64_t tokens) const;
  Status lora_apply(kernels::LoraCudaArgs args);
  // A slot's rank storage: max_lora_rank rounded up to 8 (the kernels read B's rows 8 values at a time).
  int64_t lora_slot_rank() const { return (options_.max_lora_rank + 7) / 8 * 8; }
  int64_t lora_workspace_floats(int64_t rows) const;  // the shrink's partial sums for the widest group
  LlamaCudaModel() = default;
  Status init(const LlamaConfig& config, const LlamaCudaOptions& options);  // device, stream, GEMM
  Status plan_weights();  // sizes and places every weight in weights_
  Status plan_buffers();  // activations, step arrays, pool
  Status upload(const WeightStore& store);
  Status randomise(uint64_t seed);
  // Copies the step's arrays into the device buffers (padding decode steps to `rows` sequences).
  Status stage(const DecoderStep& step, int64_t rows);
  // The kernels of a step of `tokens` tokens, `seqs` sequences and `logit_rows` logit rows (graph-capturable
  // when the step is a decode of a bucket's size).
  Status launch(int64_t tokens, int64_t seqs, int64_t logit_rows, int64_t max_query_len);
  int64_t bucket_for(int64_t seqs) const;

  LlamaConfig config_;
  LlamaWeightNames names_;
  LlamaCudaOptions options_;
  int64_t max_model_len_ = 0, table_ld_ = 0, num_blocks_ = 0, pool_bytes_ = 0, qkv_width_ = 0;
  CudaStream stream_;
  DeviceArena weights_, buffers_;
  void* gemm_workspace_ = nullptr;
  std::unique_ptr<kernels::CublasLtGemm> gemm_;
  const void *embed_ = nullptr, *lm_head_ = nullptr, *final_norm_ = nullptr;
  // embeddings_on_host (llama_cuda_embed.cpp): the table [vocab, hidden] in the compute dtype on the host, the step's
  // rows staged (pinned) and on the device ([rows, hidden]), and the identity ids the device gather reads.
  bool host_embeddings_ = false;
  std::vector<uint8_t> host_embed_;
  PinnedBuffer embed_staging_;
  void* embed_rows_ = nullptr;
  int32_t* embed_ids_ = nullptr;
  Status upload_host_embeddings(const WeightStore& store);
  void randomise_host_embeddings(uint64_t seed);
  Status allocate_host_embedding_buffers(int64_t rows);
  Status stage_embeddings(const int32_t* tokens, int64_t count);  // host rows -> embed_rows_ (async, stream_)
  Status gather_embeddings(int64_t tokens, cudaStream_t s);       // x_ = the rows of arrays_.tokens, in f32
  std::vector<Layer> layers_;
  std::vector<std::pair<std::string, void*>> weight_slots_;  // name -> device place (upload)
  // Buffers.
  float *x_ = nullptr, *logits_ = nullptr, *gathered_ = nullptr;
  void *normed_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr, *gate_up_ = nullptr, *act_ = nullptr;
  void *k_pool_ = nullptr, *v_pool_ = nullptr, *attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
  // Mixtral's buffers (rows * k (token, expert) pairs).
  // moe_ids_ / moe_weights_ hold every layer's routing of the step ([layers, tokens, k]) for copy_routing().
  float *router_logits_ = nullptr, *moe_weights_ = nullptr, *moe_yp_ = nullptr;
  int64_t last_tokens_ = 0, routing_tokens_ = 0;
  int32_t *moe_ids_ = nullptr, *moe_offsets_ = nullptr, *moe_pair_ = nullptr, *moe_row_of_ = nullptr;
  int32_t* moe_tile_map_ = nullptr;  // the grouped GEMM's tiles (the most any block_m needs)
  void *moe_xp_ = nullptr, *moe_gate_up_ = nullptr, *moe_act_ = nullptr;
  PinnedBuffer moe_host_offsets_;
  // A step's int32 arrays, laid out back to back (tokens, positions, slots and logit rows [tokens], query_start
  // [seqs + 1], seq_lens [seqs], tables [seqs, table_ld]) in the pinned staging buffer and on the device.
  struct StepArrays {
    int32_t *tokens = nullptr, *positions = nullptr, *slots = nullptr, *logit_rows = nullptr,
            *query_start = nullptr, *seq_lens = nullptr, *tables = nullptr;
    static int64_t ints(int64_t tokens, int64_t seqs, int64_t table_ld) { return 4 * tokens + 2 * seqs + 1 + seqs * table_ld; }
    static StepArrays at(int32_t* base, int64_t tokens, int64_t seqs) {
      StepArrays a;
      a.tokens = base, a.positions = base + tokens, a.slots = base + 2 * tokens, a.logit_rows = base + 3 * tokens;
      a.query_start = base + 4 * tokens, a.seq_lens = a.query_start + seqs + 1, a.tables = a.seq_lens + seqs;
      return a;
    }
  };
  StepArrays arrays_;                               // what launch() reads: the eager block or a bucket's
  StepArrays eager_arrays_;                         // eager steps (each array copied on its own)
  std::map<int64_t, StepArrays> bucket_arrays_;     // decode bucket -> its block (captured in its graph)
  float *d_inv_freq_ = nullptr;  // [max_num_seqs + 1, head_dim / 2]: row 0 the fixed frequencies
  PinnedBuffer staging_;
  std::vector<float> inv_freq_;
  bool dynamic_rope_ = false;
  const DecoderStep* eager_step_ = nullptr;  // the step being launched eagerly (dynamic RoPE reads its lengths)
  std::vector<int64_t> buckets_;
  std::map<int64_t, cudaGraphExec_t> graphs_;
  std::map<int64_t, cudaGraphExec_t> lora_graphs_;  // the same buckets with the LoRA launches
  // LoRA slots: per linear A [slot][layer][r_max, in] and B [slot][layer][out, r_max]; ranks and scales
  // [slot][layer][target]; the step's row -> slot and the shrink's workspace.
  struct LoraSlot {
    uint64_t adapter = 0;  // LoraAdapter::id, 0: free
    uint64_t used = 0;     // the step that last used it (LRU); lora_clock_ + 1: claimed for the coming step
    std::shared_ptr<CudaEvent> copied;               // recorded on the copy stream after its upload
    std::shared_ptr<const LoraSlotImage> source;     // kept alive while the copy may still read it
    bool in_flight = false;
  };
  // Starts the upload of `adapter` into `slot` on lora_copy_stream_ (its slot image, or one packed now).
  Status lora_upload_async(const LoraAdapter& adapter, int64_t slot);
  // A slot for a new adapter: a free one, else the least recently used one with used < `older_than`; -1: none.
  int64_t lora_victim(uint64_t older_than) const;
  CudaStream lora_copy_stream_;
  std::vector<LoraSlot> lora_slots_;
  uint64_t lora_clock_ = 0;
  std::array<void*, kLoraTargets> lora_a_{}, lora_b_{};
  int32_t* lora_ranks_ = nullptr;
  float* lora_scales_ = nullptr;
  int32_t* lora_row_slot_ = nullptr;  // [4, lora_rows_]: slots, second slots, weights, second weights (f32)
  int64_t lora_rows_ = 0;
  // The text rows' embedding sum of `ids` into gathered_'s first row (mean_input_embedding, gate_first_layer).
  Status sum_text_rows(const std::vector<int32_t>& ids);
  std::shared_ptr<const GateHead> gate_on_device_;  // the head whose W1, b1 are in gate_w1_, gate_b1_
  DeviceArena gate_weights_;                        // W1 [H, D], b1 [H], the output [H] (f32)
  float *gate_w1_ = nullptr, *gate_b1_ = nullptr, *gate_out_ = nullptr;
  float* lora_t_ = nullptr;  // the shrink's workspace, lora_t_floats_ floats
  int64_t lora_t_floats_ = 0;
  PinnedBuffer lora_host_rows_;
  bool lora_active_ = false;      // this launch adds the LoRA deltas
  bool lora_mix_active_ = false;  // ... and a second, weighted pass (the rows' second adapters)
  size_t graph_bytes_ = 0;
  // W4A16: per layer how each GEMM holds its weight (empty: a 16-bit checkpoint), the arena bytes planned for the
  // packed weights, the calls' workspace and the separate parts' scratch rows.
  std::vector<std::array<W4A16Mode, kGemms>> w4a16_modes_;
  std::set<std::string> w4a16_quantized_;  // the checkpoint's quantised linears (prefixes)
  size_t w4a16_planned_bytes_ = 0;
  void *w4a16_workspace_ = nullptr, *w4a16_scratch_ = nullptr;
  size_t w4a16_workspace_bytes_ = 0;
  W4A16Summary w4a16_summary_;
  // FP8: per layer whether each GEMM is FP8 (empty: none), the arena bytes planned for codes and scales, the
  // quantised input [rows, fp8_input_k()].
  std::vector<std::array<bool, kGemms>> fp8_gemms_;
  size_t fp8_planned_bytes_ = 0;
  uint8_t* fp8_input_ = nullptr;
  // FP8 KV cache: the pool's storage, per layer (K scale, V scale) on the host (from the checkpoint, or empty: 1.0)
  // and in device memory [layers][2].
  kernels::PagedKvStorage kv_storage_ = kernels::PagedKvStorage::kSame;
  std::vector<float> kv_scales_host_;
  float* kv_scales_ = nullptr;
  // The checkpoint's self_attn.k_scale / v_scale of every layer when kv_storage_ is FP8 (all or none: a partial
  // set, or a scale that is not one positive finite value, is kInvalidArgument). Before plan_buffers().
  Status read_kv_scales(const WeightStore& store, const LlamaWeightNames& names);
};

}  // namespace mmserve::models
