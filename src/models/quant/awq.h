// AWQ's activation-aware scaling for `mmserve quantize --method awq` (issue 17 item 4), after AutoAWQ's
// AwqQuantizer (awq/quantize/quantizer.py: _search_best_scale, _compute_best_scale; awq/quantize/scale.py:
// apply_scale, scale_ln_fcs, scale_fc_fc) and its Llama layer groups (get_layers_for_scaling).
//
// Per layer, four groups of linears that share an input, each with the op before it:
//   input_layernorm -> q/k/v_proj;  v_proj -> o_proj (only when v and o have the same shape, as AutoAWQ: no GQA);
//   post_attention_layernorm -> gate/up_proj;  up_proj -> down_proj.
// For a group with input rows X (our CPU model's activations on the calibration prompts, LlamaActivation) and
// weights W (the group's linears stacked), per input channel c: x_mean[c] = mean |X[:, c]|; for alpha in
// {0, 1/20, ..., 19/20}: s = max(x_mean^alpha, 1e-4), s /= sqrt(max(s) min(s)); W_q = RTN(W * s) / s; loss =
// mean((X W^T - X W_q^T)^2); the alpha of the smallest loss wins (alpha 0 is plain RTN, so the chosen loss is never
// above it). Then W *= s (columns) and the op before divides by s (a norm's weight, or the previous linear's rows
// and bias), which leaves the f32 model's function unchanged. All groups are searched on the original weights and
// activations, then applied, as AutoAWQ does.
// Differences from AutoAWQ: the loss is over the group's linear outputs, not the whole attention / MLP block
// (AutoAWQ's module2inspect); no duo_scaling (AutoAWQ's default divides by w_mean^(1 - alpha)); no clipping search
// (apply_clip); at most kAwqRowsMax calibration rows. Mixtral (the router shares the MLP's input) is kUnimplemented.
// Tests: tests/unit/models/quant_quantize_test.cpp (the scaled f32 model's logits equal the original's; the chosen
// losses are at most RTN's).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::models {

inline constexpr int64_t kAwqRowsMax = 2048;  // calibration tokens kept per activation site

struct AwqGroupReport {
  std::string linears;  // "model.layers.0.q_proj,k_proj,v_proj"
  double alpha = 0, loss = 0, rtn_loss = 0;
};

struct AwqResult {
  // The tensors to write instead of the checkpoint's, f32: the scaled linears and what precedes them.
  std::map<std::string, std::vector<float>> tensors;
  std::vector<AwqGroupReport> groups;
};

// Scales model_dir's linears for RTN in groups of `group_size` (-1: one group over K) with zeros at least
// `zero_min`, on the activations of `prompts` (token ids, each at most the model's length: longer ones are cut).
// kInvalidArgument for no prompts or ids outside the vocabulary; `progress` gets one line per layer.
StatusOr<AwqResult> awq_scale(const std::string& model_dir, const std::vector<std::vector<int32_t>>& prompts,
                              int64_t group_size, int zero_min,
                              const std::function<void(const std::string&)>& progress = {});

}  // namespace mmserve::models
