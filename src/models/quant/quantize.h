// `mmserve quantize` (issue 17 item 4): a Llama-family checkpoint (f32 / f16 / bf16) to a W4A16 checkpoint in AWQ's
// GEMM format or GPTQ's (v1, sym false, desc_act false) that our loader and others' read.
//
// RTN (round to nearest), per output row and group of `group_size` inputs, asymmetric over the group's range as
// AutoAWQ's pseudo_quantize_tensor (zero_point) with one change: the range is extended to hold 0, as GPTQ's
// Quantizer.find_params does (min = min(min, 0), max = max(max, 0)); AutoAWQ's clamped zero otherwise clips a group
// lying wholly above or below 0 (a constant group of 0.25 came back as 1e-5). scale = max(max - min, 1e-5) / 15,
// rounded up to an f16 value (what the file stores; up, so that 15 steps cover the range), zero = clamp(round(-min /
// scale), zmin, 15), q = clamp(round(w / scale) + zero, 0, 15), rounding half to even as torch.round: every weight
// within half a step. zmin is 0, except 1 for GPTQ v1, whose stored zero - 1 cannot hold 0 (a group with no weight
// below -scale / 2 then clips its top by up to one step).
// The quantised linears are quant_load.h's (q/k/v/o, gate/up/down, Mixtral's w1/w2/w3); every other tensor is copied
// in its stored dtype. Writes config.json (the input's, plus quantization_config), one model.safetensors, and copies
// the tokenizer and generation files. The AWQ method first scales the linears and folds the inverse scales into the
// ops before them (models/quant/awq.h: activation-aware, on the CPU model's activations over `calibration`), then
// rounds as RTN; the norms and linears it rescaled are written in their stored dtype.
// Tests: tests/unit/models/quant_quantize_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/quant/int4_weight.h"

namespace mmserve::models {

struct QuantizeOptions {
  std::string model_dir, output_dir;
  std::string method = "rtn";  // rtn | awq
  std::string format = "awq";  // awq | gptq
  int64_t group_size = 128;    // 32, 64, 128 or -1 (one group over in_features)
  std::vector<std::vector<int32_t>> calibration;  // the AWQ method's prompts as token ids (--data, tokenised)
  std::function<void(const std::string&)> progress;  // one line per layer (the CLI prints it to stderr)
};

// RTN of `w` [n, k] f32 (row-major) in groups of `group_size` (which must divide k); zeros at least `zero_min`.
Int4Weight quantize_rtn(const float* w, int64_t n, int64_t k, int64_t group_size, int zero_min = 0);

// Quantises options.model_dir into options.output_dir (created; refused when it holds a config.json already or is
// the input). kInvalidArgument for bad options (naming them) and for a linear the group size does not divide;
// kUnimplemented for input checkpoints that are already quantised (and awq on a Mixtral).
Status quantize_checkpoint(const QuantizeOptions& options);

}  // namespace mmserve::models
