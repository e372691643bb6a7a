// Tensor-parallel plans and load-time slicing (see tensor_parallel.h).
#include "models/common/tensor_parallel.h"

#include <cstring>
#include <utility>

namespace mmserve::models {
namespace {

void add_linear(TpLayerPlan& plan, const std::string& prefix, TpSplit weight, TpSplit bias, bool has_bias = true) {
  plan.tensors.push_back({prefix + ".weight", weight});
  if (has_bias) plan.tensors.push_back({prefix + ".bias", bias});
}

void add_norm(TpLayerPlan& plan, const std::string& prefix) {
  plan.tensors.push_back({prefix + ".weight", TpSplit::kReplicated});
  plan.tensors.push_back({prefix + ".bias", TpSplit::kReplicated});
}

// q, k, v column-parallel by heads, out_proj row-parallel by heads, and the fused QKV the forwards build.
void add_attention(TpLayerPlan& plan, const std::string& prefix, bool k_has_bias) {
  add_linear(plan, prefix + ".q_proj", TpSplit::kColumnHeads, TpSplit::kColumnHeads);
  add_linear(plan, prefix + ".k_proj", TpSplit::kColumnHeads, TpSplit::kColumnHeads, k_has_bias);
  add_linear(plan, prefix + ".v_proj", TpSplit::kColumnHeads, TpSplit::kColumnHeads);
  add_linear(plan, prefix + ".out_proj", TpSplit::kRowHeads, TpSplit::kRowBias);
  add_linear(plan, prefix + ".qkv", TpSplit::kFusedQkvHeads, TpSplit::kFusedQkvHeads);
}

std::string where(const std::string& name) {
  return name.empty() ? std::string("tensor") : "tensor '" + name + "'";
}

// Copies rows [r0, r1) x columns [c0, c1) of a 2-D view (last dimension contiguous) into `dst`, row-major.
void copy_block(const Tensor& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1, uint8_t* dst) {
  const size_t esize = dtype_size(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.data());
  const size_t row_bytes = static_cast<size_t>(c1 - c0) * esize;
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(dst, src + (r * t.stride(0) + c0) * static_cast<int64_t>(esize), row_bytes);
    dst += row_bytes;
  }
}

}  // namespace

const char* tp_split_name(TpSplit split) {
  switch (split) {
    case TpSplit::kReplicated: return "replicated";
    case TpSplit::kColumn: return "column";
    case TpSplit::kRow: return "row";
    case TpSplit::kRowBias: return "row_bias";
    case TpSplit::kColumnHeads: return "column_heads";
    case TpSplit::kRowHeads: return "row_heads";
    case TpSplit::kFusedQkvHeads: return "fused_qkv_heads";
  }
  return "?";
}

TpLayerPlan clip_encoder_layer_plan(int64_t heads) {
  TpLayerPlan plan{"clip.encoder_layer", heads, {}};
  add_norm(plan, "layer_norm1");
  add_attention(plan, "self_attn", /*k_has_bias=*/true);
  add_norm(plan, "layer_norm2");
  add_linear(plan, "mlp.fc1", TpSplit::kColumn, TpSplit::kColumn);
  add_linear(plan, "mlp.fc2", TpSplit::kRow, TpSplit::kRowBias);
  return plan;
}

TpLayerPlan whisper_encoder_layer_plan(int64_t heads) {
  TpLayerPlan plan{"whisper.encoder_layer", heads, {}};
  add_norm(plan, "self_attn_layer_norm");
  add_attention(plan, "self_attn", /*k_has_bias=*/false);  // Whisper's k_proj has no bias
  add_norm(plan, "final_layer_norm");
  add_linear(plan, "fc1", TpSplit::kColumn, TpSplit::kColumn);
  add_linear(plan, "fc2", TpSplit::kRow, TpSplit::kRowBias);
  return plan;
}

TpLayerPlan whisper_decoder_layer_plan(int64_t heads) {
  TpLayerPlan plan = whisper_encoder_layer_plan(heads);
  plan.layer = "whisper.decoder_layer";
  // Cross-attention splits like self-attention: each rank projects the encoder output to its own heads' k and v,
  // so the cross K/V cache is per rank too.
  add_norm(plan, "encoder_attn_layer_norm");
  add_attention(plan, "encoder_attn", /*k_has_bias=*/false);
  return plan;
}

TpLayerPlan clip_model_globals_plan() {
  TpLayerPlan plan{"clip.globals", 0, {}};
  for (const char* tower : {"vision_model", "text_model"}) {
    const std::string t = tower;
    plan.tensors.push_back({t + ".embeddings.position_embedding.weight", TpSplit::kReplicated});
    add_norm(plan, t + (t == "vision_model" ? ".post_layernorm" : ".final_layer_norm"));
  }
  plan.tensors.push_back({"vision_model.embeddings.class_embedding", TpSplit::kReplicated});
  plan.tensors.push_back({"vision_model.embeddings.patch_embedding.weight", TpSplit::kReplicated});
  add_norm(plan, "vision_model.pre_layrnorm");  // HF's spelling
  plan.tensors.push_back({"text_model.embeddings.token_embedding.weight", TpSplit::kReplicated});
  plan.tensors.push_back({"visual_projection.weight", TpSplit::kReplicated});
  plan.tensors.push_back({"text_projection.weight", TpSplit::kReplicated});
  plan.tensors.push_back({"logit_scale", TpSplit::kReplicated});
  return plan;
}

TpLayerPlan whisper_model_globals_plan() {
  TpLayerPlan plan{"whisper.globals", 0, {}};
  add_linear(plan, "model.encoder.conv1", TpSplit::kReplicated, TpSplit::kReplicated);
  add_linear(plan, "model.encoder.conv2", TpSplit::kReplicated, TpSplit::kReplicated);
  plan.tensors.push_back({"model.encoder.embed_positions.weight", TpSplit::kReplicated});
  add_norm(plan, "model.encoder.layer_norm");
  plan.tensors.push_back({"model.decoder.embed_tokens.weight", TpSplit::kReplicated});
  plan.tensors.push_back({"model.decoder.embed_positions.weight", TpSplit::kReplicated});
  add_norm(plan, "model.decoder.layer_norm");
  plan.tensors.push_back({"proj_out.weight", TpSplit::kReplicated});  // tied: replicated (file comment)
  return plan;
}

Status validate_tp_plan(const TpLayerPlan& plan, int64_t world_size) {
  if (world_size < 1) {
    return invalid_argument("tensor parallel: world size " + std::to_string(world_size) + " for layer '" + plan.layer +
                            "' (must be >= 1)");
  }
  if (plan.heads < 0) return invalid_argument("tensor parallel: layer '" + plan.layer + "' has negative heads");
  if (plan.heads > 0 && plan.heads % world_size != 0) {
    return invalid_argument("tensor parallel: layer '" + plan.layer + "' has " + std::to_string(plan.heads) +
                            " attention heads, which " + std::to_string(world_size) +
                            " ranks cannot split evenly (heads % world_size must be 0)");
  }
  return ok_status();
}

StatusOr<TpSplit> tp_rule_for(const TpLayerPlan& plan, const std::string& name) {
  for (const TpTensorRule& rule : plan.tensors) {
    if (rule.name == name) return rule.split;
  }
  return not_found("tensor parallel: layer '" + plan.layer + "' has no rule for tensor '" + name + "'");
}

StatusOr<TpRange> tp_shard_range(int64_t extent, int64_t world_size, int64_t rank) {
  if (world_size < 1) return invalid_argument("tensor parallel: world size " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size) {
    return invalid_argument("tensor parallel: rank " + std::to_string(rank) + " outside world size " +
                            std::to_string(world_size));
  }
  if (extent < 0) return invalid_argument("tensor parallel: negative extent");
  return TpRange{rank * extent / world_size, (rank + 1) * extent / world_size};
}

StatusOr<HostTensor> tp_slice(const Tensor& tensor, TpSplit split, int64_t heads, int64_t world_size, int64_t rank,
                              const std::string& name) {
  RETURN_IF_ERROR(tp_shard_range(0, world_size, rank).status());  // validates world size and rank
  if (!tensor.device().is_cpu()) return invalid_argument("tensor parallel: " + where(name) + " is not on the CPU");
  if (tensor.empty()) return invalid_argument("tensor parallel: " + where(name) + " has no data");
  if (dtype_size(tensor.dtype()) == 0) {
    return unimplemented(std::string("tensor parallel: cannot slice packed dtype ") + dtype_name(tensor.dtype()) +
                         " of " + where(name));
  }
  if (split == TpSplit::kReplicated) {  // any rank (e.g. Whisper's conv [d, mels, 3]): a plain copy
    if (!tensor.is_contiguous()) {
      return invalid_argument("tensor parallel: replicated " + where(name) + " is not contiguous");
    }
    HostTensor out;
    out.dtype = tensor.dtype();
    out.shape = tensor.shape();
    out.bytes.resize(tensor.nbytes());
    std::memcpy(out.bytes.data(), tensor.data(), tensor.nbytes());
    return out;
  }
  if (tensor.dims() != 1 && tensor.dims() != 2) {
    return invalid_argument("tensor parallel: " + where(name) + " has shape " + tensor.shape_string() +
                            " (expected 1-D or 2-D)");
  }
  if (tensor.stride(-1) != 1) {
    return invalid_argument("tensor parallel: " + where(name) + " has a non-contiguous last dimension");
  }
  // A 1-D tensor is handled as [n, 1] so that one copy routine serves both.
  const bool is_1d = tensor.dims() == 1;
  const int64_t rows = tensor.size(0);
  const int64_t cols = is_1d ? 1 : tensor.size(1);
  const Tensor view = is_1d ? Tensor(tensor.data(), tensor.dtype(), {rows, 1}) : tensor;
  const size_t esize = dtype_size(tensor.dtype());

  auto need_heads = [&](int64_t extent, int64_t groups, const char* dim) -> Status {
    if (heads <= 0) return invalid_argument("tensor parallel: " + where(name) + " needs a positive head count");
    if (heads % world_size != 0) {
      return invalid_argument("tensor parallel: " + where(name) + ": " + std::to_string(heads) + " heads over " +
                              std::to_string(world_size) + " ranks (heads % world_size must be 0)");
    }
    if (extent % (groups * heads) != 0) {
      return invalid_argument("tensor parallel: " + where(name) + " " + dim + " " + std::to_string(extent) +
                              " is not a multiple of " + std::to_string(groups) + " x " + std::to_string(heads) +
                              " heads");
    }
    return ok_status();
  };

  HostTensor out;
  out.dtype = tensor.dtype();
  auto finish = [&](int64_t out_rows, int64_t out_cols) {
    out.shape = is_1d ? std::vector<int64_t>{out_rows} : std::vector<int64_t>{out_rows, out_cols};
  };

  switch (split) {
    case TpSplit::kReplicated: break;  // handled above
    case TpSplit::kRowBias: {
      if (!is_1d) return invalid_argument("tensor parallel: row-parallel bias " + where(name) + " is not 1-D");
      if (rank != 0) {  // added once, on rank 0, before the all-reduce sums the partial outputs
        finish(0, 1);
        return out;
      }
      out.bytes.resize(static_cast<size_t>(rows) * esize);
      copy_block(view, 0, rows, 0, 1, out.bytes.data());
      finish(rows, 1);
      return out;
    }
    case TpSplit::kColumn:
    case TpSplit::kColumnHeads: {
      if (split == TpSplit::kColumnHeads) RETURN_IF_ERROR(need_heads(rows, 1, "dim 0"));
      ASSIGN_OR_RETURN(TpRange r, tp_shard_range(rows, world_size, rank));
      out.bytes.resize(static_cast<size_t>(r.size() * cols) * esize);
      copy_block(view, r.begin, r.end, 0, cols, out.bytes.data());
      finish(r.size(), cols);
      return out;
    }
    case TpSplit::kRow:
    case TpSplit::kRowHeads: {
      if (is_1d) return invalid_argument("tensor parallel: row-parallel weight " + where(name) + " is 1-D");
      if (split == TpSplit::kRowHeads) RETURN_IF_ERROR(need_heads(cols, 1, "dim 1"));
      ASSIGN_OR_RETURN(TpRange r, tp_shard_range(cols, world_size, rank));
      out.bytes.resize(static_cast<size_t>(rows * r.size()) * esize);
      copy_block(view, 0, rows, r.begin, r.end, out.bytes.data());
      finish(rows, r.size());
      return out;
    }
    case TpSplit::kFusedQkvHeads: {
      RETURN_IF_ERROR(need_heads(rows, 3, "dim 0"));
      const int64_t hidden = rows / 3;  // q rows, then k rows, then v rows
      ASSIGN_OR_RETURN(TpRange r, tp_shard_range(hidden, world_size, rank));
      out.bytes.resize(static_cast<size_t>(3 * r.size() * cols) * esize);
      uint8_t* dst = out.bytes.data();
      for (int64_t part = 0; part < 3; ++part) {
        copy_block(view, part * hidden + r.begin, part * hidden + r.end, 0, cols, dst);
        dst += static_cast<size_t>(r.size() * cols) * esize;
      }
      finish(3 * r.size(), cols);
      return out;
    }
  }
  return invalid_argument("tensor parallel: unknown split for " + where(name));
}

}  // namespace mmserve::models
