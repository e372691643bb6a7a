// A PEFT LoRA adapter over a Llama-family decoder (issue 16): adapter_config.json (peft_config.h) plus
// adapter_model.safetensors, read per (layer, linear): into f32 for a CPU model, or for a GPU model straight from the
// file's bytes into its slot image (a packer given to the load; no f32 copy then).
//
// PEFT saves module M's matrices as `base_model.model.<M>.lora_A.weight` [r, in] and `...lora_B.weight` [out, r],
// where <M> is the module's name in the base model: for a Llama "model.layers.L.self_attn.q_proj" (q/k/v/o) and
// "model.layers.L.mlp.gate_proj" (gate/up/down); under LLaVA the decoder's prefix replaces "model.". Every module's
// rank must be what the config's r / rank_pattern give it (PEFT itself would refuse a mismatch at load), and every
// module must be one target_modules names. Tensors of modules mmserve does not adapt yet (lm_head, embeddings, the
// vision tower) are kUnimplemented naming the first; anything else unexpected is kInvalidArgument, all before anything
// is used.
//
// Mixtral's experts come through target_parameters ("experts.gate_up_proj", "experts.down_proj": transformers 5's
// fused mlp.experts.gate_up_proj [E, 2I, H], whose rows [0, I) are each expert's gate w1 and [I, 2I) its up w3, and
// down_proj [E, H, I], its w2). PEFT's ParamWrapper saves a parameter's pair as "<prefix>layers.L.mlp.experts.lora_A
// .weight" [E r, in] and ".lora_B.weight" [out, E r], the two parameters' pairs nested (one under
// "experts.base_layer."), so a pair is known by its shapes: gate_up's A [E r, H] with B [2I, E r], down's A [E r, I]
// with B [H, E r]. Expert e's delta is scale * B_e A_e with A_e rows [e r, (e + 1) r) of A and B_e[:, j] =
// B[:, j E + e] (interleaved), split per expert at load (f32). Refused: target_parameters on a model without experts
// or naming anything else (kUnimplemented naming it), a pair of other shapes or half a pair (kInvalidArgument naming
// the tensor), and such an adapter for a GPU model (kUnimplemented: the CPU path only applies them).
// Tests: tests/unit/models/lora_adapter_test.cpp, lora_experts_test.cpp, tests/conformance/lora_hf_test.cpp (PEFT's
// outputs).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "models/llama/llama.h"
#include "models/lora/peft_config.h"

namespace mmserve::models {

enum class LoraTarget : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kLoraTargets = 7;
const char* lora_target_name(LoraTarget t);  // "q_proj", ...
// {in, out} features of the linear in a decoder of `config`.
std::array<int64_t, 2> lora_target_features(const LlamaConfig& config, LoraTarget t);

// A parameter of Mixtral's experts adapted through target_parameters, and one expert's matrix of it: gate_up {H, 2I}
// (the first I outputs go to w1, the next I to w3), down {I, H}.
enum class LoraExpertParam : int { kGateUp = 0, kDown };
inline constexpr int kLoraExpertParams = 2;
const char* lora_expert_param_name(LoraExpertParam p);  // "experts.gate_up_proj", "experts.down_proj"
std::array<int64_t, 2> lora_expert_features(const LlamaConfig& config, LoraExpertParam p);  // {in, out}

struct LoraModule {
  int64_t rank = 0, in = 0, out = 0;  // rank 0: not adapted
  float scale = 0;
  std::vector<float> a;  // [rank, in]; empty when the load kept no f32 copy (a GPU model's: see LoraImagePacker)
  std::vector<float> b;  // [out, rank]
  bool present() const { return rank > 0; }
};

// An adapter's matrices laid out as one GPU slot holds them (LlamaCudaModel's: per target A [layers][r_max][in] and
// B [layers][out][r_max] in the model's dtype, then ranks and scales [layers][kLoraTargets]), built once at load on
// the loader's thread (LlamaCudaModel::pack_lora_slot_image) so that making the adapter resident is a few
// host-to-device copies, none of them a conversion on the engine thread. `memory` is one host allocation (pinned
// when the GPU could pin it) holding every array at its offset; a target with 0 bytes is adapted in no layer.
struct LoraSlotImage {
  DType dtype = DType::kF32;
  int64_t r_max = 0;
  std::shared_ptr<uint8_t> memory;
  size_t bytes = 0;
  bool pinned = false;  // cudaHostAlloc'ed (else pageable: no usable GPU)
  std::array<size_t, kLoraTargets> a_offset{}, a_bytes{}, b_offset{}, b_bytes{};
  size_t ranks_offset = 0, scales_offset = 0;
};

struct LoraAdapter {
  std::string name, dir;
  uint64_t id = 0;  // unique per load in this process (the prefix cache's salt: a reload never shares blocks)
  PeftLoraConfig config;
  int64_t max_rank = 0;
  std::vector<std::array<LoraModule, kLoraTargets>> layers;  // [num_hidden_layers]
  std::shared_ptr<const LoraSlotImage> slot_image;           // set at load for a GPU model (else built per upload)
  // LLaVA's projector (multi_modal_projector.linear_1, linear_2), always in f32: the image path applies them on the
  // host's model (LlavaModel::encode_images). Absent (rank 0) for every other adapter.
  std::array<LoraModule, 2> projector;
  // Mixtral's experts (target_parameters), always in f32 (the CPU forward applies them; a GPU model refuses them):
  // [num_hidden_layers][param] one module per expert (A_e [r, in], B_e [out, r], de-interleaved at load), or no
  // modules where the adapter leaves the parameter alone; empty for a model without experts.
  std::vector<std::array<std::vector<LoraModule>, kLoraExpertParams>> experts;
  bool adapts_projector() const { return projector[0].present() || projector[1].present(); }
  bool adapts_experts() const;
  const LoraModule& module(int64_t layer, LoraTarget t) const { return layers[layer][static_cast<int>(t)]; }
  // Expert e's module of `p` in `layer`, or null where the adapter leaves the parameter alone.
  const LoraModule* expert_module(int64_t layer, LoraExpertParam p, int64_t e) const {
    if (experts.empty()) return nullptr;
    const std::vector<LoraModule>& modules = experts[layer][static_cast<int>(p)];
    return modules.empty() ? nullptr : &modules[e];
  }
  // The host memory it holds: its f32 copies (a CPU model's) and its slot image (a GPU model's).
  int64_t bytes() const;
  // Whether LoraModule::a/b hold the matrices (what the CPU forward and the f32 packer read).
  bool holds_f32() const;
  // The adapted linears' short names, in LoraTarget order ("q_proj", "v_proj"), then the experts' parameters
  // ("experts.gate_up_proj", "experts.down_proj") and LLaVA's projector linears.
  std::vector<std::string> target_names() const;
};

// A validated module's two matrices as adapter_model.safetensors stores them (views into the mapped file, of the shapes
// the module's rank gives and f32, f16 or bf16), per [layer][target]; nulls where the adapter leaves the module alone.
struct LoraFileModule {
  const TensorInfo* a = nullptr;  // [rank, in]
  const TensorInfo* b = nullptr;  // [out, rank]
};
using LoraFileModules = std::vector<std::array<LoraFileModule, kLoraTargets>>;

// A GPU model's slot image made from the file's bytes (LlamaCudaModel::pack_lora_slot_image_from_file): called by
// load_lora_adapter once every check has passed, while the file is mapped, with the adapter's ranks and scales set.
using LoraImagePacker =
    std::function<StatusOr<std::shared_ptr<const LoraSlotImage>>(const LoraAdapter&, const LoraFileModules&)>;

// LLaVA's projector as an adapter may adapt it: its module prefixes ("model.multi_modal_projector." as transformers 5
// names it, "multi_modal_projector." as 4.x did), linear_1 [in -> hidden] and linear_2 [hidden -> hidden].
struct LoraProjectorShape {
  std::vector<std::string> prefixes;
  int64_t in = 0, hidden = 0;
};

// Reads `dir` for the decoder `config`. `prefixes`: the decoder's module prefixes PEFT may have recorded ("model."
// for a Llama; under LLaVA "model.language_model." as transformers 5 names the module tree and
// "language_model.model." as 4.x did); one adapter uses one of them. Without `pack` each module's matrices are
// converted to f32 (LoraModule::a/b, what a CPU model computes with); with it they are handed to `pack` and the
// adapter keeps its result as slot_image and no f32 copy (a GPU model's: half the bytes for a bf16 adapter, and no
// conversion at all into a bf16 model). Every refusal comes before either, the same with or without `pack`; the
// packer's own errors are returned as they are. With `projector` (a LLaVA), its two linears may be adapted too. An
// adapter on Mixtral's experts is refused with `pack` (kUnimplemented, after every other check).
// Mutable until the caller shares it.
StatusOr<std::shared_ptr<LoraAdapter>> load_lora_adapter(const std::string& dir, const std::string& name,
                                                         const LlamaConfig& config,
                                                         const std::vector<std::string>& prefixes = {"model."},
                                                         const LoraImagePacker& pack = nullptr,
                                                         const LoraProjectorShape* projector = nullptr);

// Threads for a load's bulk pass over `bytes` of output (the f32 conversion, a slot image's pack): one per 16 MB (below
// that a thread's start costs more than it saves), at most 8 and the cores, so a load never takes every core from the
// serving threads (docs/perf/lora_cpu.md).
int lora_load_threads(size_t bytes);

}  // namespace mmserve::models
