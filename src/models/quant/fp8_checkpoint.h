// FP8 checkpoint tensors (issue 17 item 3): each FP8 linear's stored E4M3 codes and scales to the f32 weight the CPU
// path computes with, and its input quantisation, so that the CPU forward computes what an FP8 engine computes (up to
// the order of f32 accumulation).
//
// Tensors of a linear `<m>` [out, in] (compressed-tensors as llm-compressor saves them, read by vLLM's
// CompressedTensorsW8A8Fp8 / CompressedTensorsW8A16Fp8; AutoFP8's FP8StaticLinear / FP8DynamicLinear, read by vLLM's
// Fp8LinearMethod):
//   <m>.weight            F8_E4M3 [out, in] (F8_E5M2 also decoded: the dtype says which)
//   <m>.weight_scale      [] or [1] per tensor (AutoFP8 saves a 0-d tensor), [out, 1] or [out] per channel
//   <m>.weight_scale_inv  block-wise [bn, bk] (transformers' FineGrainedFP8 weight_block_size, DeepSeek-V3's layout;
//                         compressed-tensors' block strategy calls it weight_scale): [ceil(out / bn), ceil(in / bk)],
//                         the dequantisation factor of each block despite the "inv"
//   <m>.input_scale       [] or [1], static input schemes only (absent otherwise; tolerated when present)
// Scales f32, bf16 or f16. W[r][c] = decode(code[r][c]) * weight_scale[r or 0] (block: [r / bn][c / bk]), in f32: exact
// for f32 scales (a 4-bit significand times a 24-bit one); compressed-tensors' own dequantisation multiplies in the
// scale's dtype, so a bf16-scaled checkpoint may round there where we do not. Scales must be positive and finite
// (kInvalidArgument naming the tensor). Input quantisation, x [rows, cols] -> what the GEMM sees, dequantised:
// decode(encode(x / s)) * s, the quotient in f32 and the code rounded to nearest even, saturating at +-448
// (kernels/fp8: torch's clamp, then .to(float8_e4m3fn)); s = input_scale (static), amax(x) / 448 over the whole input
// (dynamic per tensor: AutoFP8's per_tensor_quantize) or over each row (dynamic per token: kernels/fp8's
// fp8_quantize_rows) or over each row's groups of bk columns (block-wise checkpoints: transformers' act_quant, vLLM's
// per_token_group_quant_fp8; amax floored at 1e-12 as fp8_scale_for_amax). Per tensor means per forward call: on the
// CPU path a step's rows, as an engine's batch. Tests: tests/unit/models/quant_fp8_test.cpp (codes worked by hand,
// refusals), tests/conformance/quant_fp8_hf_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "kernels/fp8/fp8.h"
#include "models/llama/llama.h"
#include "models/quant/quant_config.h"

namespace mmserve::models {

// One linear's FP8 weight: codes [n, k] row-major in `format`, scales [1] (per tensor), [n] (per channel) or
// [ceil(n / block_n), ceil(k / block_k)] (block-wise, block_n > 0).
struct Fp8Weight {
  int64_t n = 0, k = 0;
  int64_t block_n = 0, block_k = 0;
  kernels::Fp8Format format = kernels::Fp8Format::kE4M3;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

// How one linear's input is quantised (scale: the static input_scale; group: kDynamicGroup's columns).
struct Fp8InputQuant {
  Fp8InputScale scheme = Fp8InputScale::kNone;
  float scale = 0.0f;
  int64_t group = 0;
};
using Fp8Inputs = std::map<std::string, Fp8InputQuant>;  // by module name ("model.layers.0.self_attn.q_proj")

// W [n * k] f32, row-major, as above.
std::vector<float> dequantize_fp8(const Fp8Weight& w);
// The FP8 weight of w [n, k] f32 with scales amax / 448 per tensor or per row (fp8_scale_for_amax), E4M3.
Fp8Weight quantize_fp8_weight(const float* w, int64_t n, int64_t k, Fp8WeightScale strategy);

// out [rows, cols] = x quantised and dequantised as `q` says (kNone: a copy).
void fp8_fake_quantize_input(const Fp8InputQuant& q, const float* x, int64_t rows, int64_t cols, float* out);
// The LlamaModel hooks that apply `inputs` (one per module with a scheme other than kNone).
LinearInputTransforms fp8_input_transforms(const Fp8Inputs& inputs);

// Reads the linear `prefix` [n, k] (weight and weight_scale) from `store` under `config`, checked as above.
StatusOr<Fp8Weight> read_fp8_linear(const WeightStore& store, const QuantConfig& config, const std::string& prefix,
                                    int64_t n, int64_t k);
// The input quantisation of `prefix` under `config` (static: its input_scale, which must be there).
StatusOr<Fp8InputQuant> read_fp8_input(const WeightStore& store, const QuantConfig& config, const std::string& prefix);

// The tensors a checkpoint of `w` stores for `prefix` (weight F8_E4M3 [n, k], weight_scale F32 [1] or [n, 1], and
// input_scale F32 [1] when q is static), pointing into `w` and `q`.
std::vector<TensorToWrite> fp8_tensors(const std::string& prefix, const Fp8Weight& w, const Fp8InputQuant& q);

}  // namespace mmserve::models
