// W4A16 checkpoint tensors <-> the logical Int4Weight (int4_weight.h), for AWQ's GEMM format and GPTQ v1/v2.
//
// Layouts, for a linear of N outputs and K inputs in groups of G (groups = K / G), all int32 words little-endian,
// nibble i of a word at bits 4i..4i+3:
// - AWQ GEMM (AutoAWQ awq/modules/linear/gemm.py, WQLinear_GEMM.from_linear; unpacked as awq/utils/packing_utils.py
//   unpack_awq + reverse_awq_order, which transformers and vLLM use too): `qweight` I32 [K, N/8] packed along N,
//   word (k, c) nibble i holding column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i] (so column 8c + j sits in nibble
//   [0, 4, 1, 5, 2, 6, 3, 7][j], AWQ_REVERSE_ORDER); `qzeros` I32 [groups, N/8] in the same order; `scales` F16
//   [groups, N]. The zero is stored as is. Group of column k: k / G.
// - GPTQ (AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py QuantLinear.pack, and its torch unpacking in
//   forward): `qweight` I32 [K/8, N] packed along K, word (r, n) nibble i holding input row 8r + i; `qzeros` I32
//   [groups, N/8] packed along N, word (g, c) nibble i holding column 8c + i; `scales` F16 [groups, N]; `g_idx` I32
//   [K], the group of each input column (i / G without act-order, arbitrary with desc_act; may be absent without
//   desc_act, as in GPTQ-for-LLaMa's older files). v1 (checkpoint_format
//   "gptq") stores zero - 1 (pack does `zeros -= 1`, the readers `zeros + 1`); v2 ("gptq_v2", gptqmodel's internal
//   form: gptqmodel/utils/model.py convert_gptq_v1_to_v2_format_module adds 1 to every nibble of a v1 file) stores the
//   zero. A v1 nibble of 15 (zero 16) cannot be a 4-bit zero: it is what `zeros -= 1` of a zero 0 leaves in uint32
//   (every nibble of the word set), and is refused. g_idx equal to k / G is dropped (Int4Weight::g_idx empty).
// Scales F16 (BF16 accepted: both are exact in f32). Every problem is kInvalidArgument naming the tensor.
// Tests: tests/unit/models/quant_format_test.cpp (hand-worked words from the published order, round trips, refusals).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "models/common/weight_table.h"
#include "models/quant/int4_weight.h"
#include "models/quant/quant_config.h"

namespace mmserve::models {

// The stored tensors of one quantised linear, as a checkpoint holds them (shapes as above).
struct PackedInt4 {
  std::vector<int32_t> qweight, qzeros, g_idx;  // g_idx: GPTQ only
  std::vector<uint16_t> scales;                 // f16 bits
  std::vector<int64_t> qweight_shape, qzeros_shape, scales_shape;
};

// kInvalidArgument naming `prefix` unless N and (GPTQ) K are multiples of 8 and the group size divides K.
Status check_int4_dims(const QuantConfig& config, const std::string& prefix, int64_t n, int64_t k);
// The tensors a quantised linear `prefix` ("model.layers.0.mlp.up_proj") stores, with their shapes, for
// check_weights (call check_int4_dims first).
std::vector<WeightSpec> int4_weight_specs(const QuantConfig& config, const std::string& prefix, int64_t n, int64_t k);

// Reads and unpacks the linear `prefix` [n, k] from `store` in `config`'s format (dtypes, shapes, g_idx range and
// v1 zeros checked).
StatusOr<Int4Weight> read_int4_linear(const WeightStore& store, const QuantConfig& config, const std::string& prefix,
                                      int64_t n, int64_t k);

// The inverses, for `mmserve quantize` and round trips: kInvalidArgument for a weight whose arrays disagree with its
// sizes or hold values out of range; AWQ refuses g_idx (it has no act-order); GPTQ v1 refuses a zero of 0.
StatusOr<PackedInt4> pack_awq_gemm(const Int4Weight& w);
StatusOr<PackedInt4> pack_gptq(const Int4Weight& w, bool v2);
// `packed`'s tensors named `prefix`.qweight / .qzeros / .scales [/ .g_idx], pointing into `packed`.
std::vector<TensorToWrite> packed_tensors(const std::string& prefix, const PackedInt4& packed);

// Sizes and value ranges of `w` (what the packers and dequantize assume).
Status check_int4_weight(const Int4Weight& w, const std::string& label);
// W [n * k] f32, row-major: (q - zero) * scale, exact (an integer in [-15, 15] times an f16 value).
std::vector<float> dequantize(const Int4Weight& w);

}  // namespace mmserve::models
