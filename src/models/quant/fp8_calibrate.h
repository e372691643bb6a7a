// `mmserve calibrate` (issue 17 item 4): static FP8 scales for a Llama-family checkpoint (f32, f16 or bf16), the KL
// divergence of the FP8 model's next-token distributions from the original's on prompts held apart, and the FP8
// checkpoint in compressed-tensors' float-quantized format written only when that KL is at most max_kl.
//
// 1. The prompts split: the last `holdout` (default max(1, 20%)) are held apart; the rest calibrate.
// 2. The original model (f32 on the CPU: the "16-bit" reference of the issue) runs over each calibration prompt; the
//    activations callback records, per layer, the amax of each linear's input (q/k/v share one, gate/up one).
// 3. Scales: weights amax / 448 per tensor or per output channel (fp8_scale_for_amax; E4M3 codes by kernels/fp8's
//    encoder, round to nearest even, saturating), static inputs amax / 448 per linear (llm-compressor's minmax
//    observer for FP8: max(|min|, |max|) / 448); dynamic inputs (per token) need no scale. lm_head stays as stored
//    (ignore: ["lm_head"], as llm-compressor's FP8 recipes); so do embeddings and norms.
// 4. The FP8 model is built in memory exactly as LlamaModel::load builds it from the written checkpoint (dequantised
//    weights, input transforms), so the written checkpoint's logits are the measured model's bit for bit.
// 5. KL = the mean, over the held-apart prompts' positions, of sum_v p(v) (log p(v) - log q(v)), p = softmax of the
//    original's logits, q = the FP8 model's, in double; top-1 agreement is the share of those positions where both
//    argmaxes agree (teacher-forced: both models see the prompt).
// Mixtral is kUnimplemented (its experts' inputs have no hook yet), as is an input that is already quantised.
// Tests: tests/unit/models/quant_calibrate_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/llama/llama.h"
#include "models/quant/quant_config.h"

namespace mmserve::models {

struct CalibrateOptions {
  std::string model_dir, output_dir;
  std::vector<std::vector<int32_t>> prompts;  // token ids (the CLI tokenises --data)
  int64_t holdout = -1;                       // prompts held apart; -1: max(1, 20%)
  double max_kl = 0.01;
  Fp8InputScale inputs = Fp8InputScale::kStatic;  // kStatic or kDynamicToken
  Fp8WeightScale weights = Fp8WeightScale::kTensor;
  std::function<void(const std::string&)> progress;  // one line per prompt and step (the CLI prints them to stderr)
};

struct CalibrateResult {
  double kl = 0;              // mean KL(p_orig || p_fp8), nats
  double top1_agreement = 0;  // share of held-apart positions with equal argmax
  int64_t positions = 0;      // held-apart positions measured
  int64_t calibration_prompts = 0, held_out_prompts = 0;
  bool written = false;                   // kl <= max_kl and the checkpoint was written
  std::unique_ptr<LlamaModel> fp8_model;  // the in-memory FP8 model measured (what the checkpoint loads as)
};

// Runs the steps above. kInvalidArgument for bad options (naming them: --holdout, --max-kl, ...), too few prompts,
// an output directory that holds a model already; errors from loading the model as LlamaModel::load gives them.
// A KL above max_kl is not an error: the result says written = false and nothing is written.
StatusOr<CalibrateResult> calibrate_fp8(const CalibrateOptions& options);

}  // namespace mmserve::models
