// Tensor parallel (Megatron-style) as data: which tensor of a layer is split how, and the slicing that cuts a
// rank's share out of a host tensor at load (issue 6 item 2).
//
// A linear is stored as HF does, weight [out, in], bias [out]. Column-parallel: rank r of T keeps rows
// [r*out/T, (r+1)*out/T) of the weight and of the bias, so its output is a slice of the features and needs no
// communication. Row-parallel: rank r keeps columns [r*in/T, (r+1)*in/T) of the weight, so its output is a
// partial sum that one all-reduce completes; the bias goes to rank 0 only (added once, before the all-reduce
// sums it in). A transformer block is then: q, k, v and fc1 column-parallel, out_proj and fc2 row-parallel,
// i.e. one all-reduce after attention and one after the MLP, and layer norms replicated.
// Attention splits by whole heads (heads % T == 0, else an error naming the layer); the fused QKV [3H, in]
// that the forwards keep is split as q, k and v separately and re-fused per rank ([3H/T, in]: q_r, k_r, v_r),
// which is what the per-rank attention call expects. Plain linears may have sizes T does not divide (the
// ranges above are then uneven; that is exact too). Slicing copies bytes, never converts, so any stored dtype
// (f32, f16, bf16, ...) is sliced without upcasting.
// Whisper's tied output projection (proj_out = embed_tokens) is replicated, not vocab-parallel: the same matrix
// is the input embedding, the sampler needs the whole logits row on one rank, and vocab-parallel would add a
// collective per decoded token (all-gather of logits or a distributed arg-max) to save ~8% of large-v3's
// per-token weight reads per rank at TP=2 (half of 51866 x 1280 = 33 M of ~430 M parameters a rank reads per
// token: 32 layers x 14 d^2 / 2, plus the replicated head). Embeddings, convolutions, position tables and
// CLIP's projection heads are replicated too.
// The forwards fold the residual add into the row-parallel GEMM (beta = 1); under TP that would add the residual
// T times, so rank 0 accumulates (x += partial + bias) and the other ranks overwrite their copy (x = partial,
// beta = 0) before the all-reduce, which then leaves x_old + sum of partials + bias on every rank.
// Tests: tests/unit/models/tensor_parallel_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mmserve::models {

enum class TpSplit {
  kReplicated,     // every rank holds the whole tensor (norms, embeddings)
  kColumn,         // rows of dim 0 (a column-parallel weight [out, in] or its bias [out])
  kRow,            // columns of dim 1 (a row-parallel weight [out, in])
  kRowBias,        // bias of a row-parallel linear: rank 0 holds it, other ranks hold none
  kColumnHeads,    // kColumn in whole heads (q, k, v projections and their biases)
  kRowHeads,       // kRow in whole heads (attention out_proj weight)
  kFusedQkvHeads,  // a fused [3H, in] / [3H]: q, k and v each split by heads, then re-fused per rank
};
const char* tp_split_name(TpSplit split);

// One tensor of a layer, named relative to the layer ("self_attn.q_proj.weight").
struct TpTensorRule {
  std::string name;
  TpSplit split = TpSplit::kReplicated;
};

// The plan of one layer kind. `heads` is the layer's attention heads (0 when it has no attention).
struct TpLayerPlan {
  std::string layer;  // "clip.encoder_layer", "whisper.decoder_layer": named in every error
  int64_t heads = 0;
  std::vector<TpTensorRule> tensors;
};

// The HF tensor names of one layer (the tensors the loaders read), and the fused "qkv.weight"/"qkv.bias" that the
// forwards build at load. Every name of the layer is listed, so a checkpoint tensor without a rule is an error
// (tp_rule_for) rather than silently replicated.
TpLayerPlan clip_encoder_layer_plan(int64_t heads);
TpLayerPlan whisper_encoder_layer_plan(int64_t heads);
TpLayerPlan whisper_decoder_layer_plan(int64_t heads);
// Top-level (non-layer) tensors of the models, all replicated (see the file comment for why).
TpLayerPlan clip_model_globals_plan();
TpLayerPlan whisper_model_globals_plan();

// world_size >= 1, and heads % world_size == 0 when the plan has attention; otherwise kInvalidArgument naming
// the layer.
Status validate_tp_plan(const TpLayerPlan& plan, int64_t world_size);
// The rule of `name` in `plan`; kNotFound naming the layer when the plan has none.
StatusOr<TpSplit> tp_rule_for(const TpLayerPlan& plan, const std::string& name);

// [begin, end) of rank `rank` of `world_size` over `extent`: [r*extent/T, (r+1)*extent/T).
struct TpRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
StatusOr<TpRange> tp_shard_range(int64_t extent, int64_t world_size, int64_t rank);

// A host tensor that owns its bytes (a rank's slice, before it is uploaded).
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  bool empty() const { return bytes.empty(); }  // e.g. a row-parallel bias on a rank > 0
  // A contiguous view (data is const in spirit: slices are uploaded, not written).
  Tensor view() { return Tensor(bytes.data(), dtype, shape); }
};

// Rank `rank`'s share of `tensor` (a CPU tensor, 1-D or 2-D, last dimension contiguous, dtype with a whole number
// of bytes per element) under `split`. `heads` is needed by the *Heads splits (the tensor's dim 0 for the
// column/QKV splits, dim 1 for kRowHeads, must be a multiple of heads, of 3 * heads for kFusedQkvHeads).
// `name` is used in error messages. Errors: kInvalidArgument for a bad world size, rank, shape or head count;
// kUnimplemented for packed dtypes.
StatusOr<HostTensor> tp_slice(const Tensor& tensor, TpSplit split, int64_t heads, int64_t world_size, int64_t rank,
                              const std::string& name);

}  // namespace mmserve::models
