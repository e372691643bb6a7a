// PEFT LoRA adapters on CLIP's towers (issue 16 item 1; SPEC 3.1's image adapters, `lora-vision-*` in the registry).
//
// PEFT over a CLIPModel names the linears `vision_model.encoder.layers.L.self_attn.{q,k,v,out}_proj`,
// `...mlp.fc1` / `fc2` (the same under `text_model.`), `visual_projection` and `text_projection`; those are what an
// adapter may hold (the patch convolution and the embeddings are kUnimplemented naming the module). An adapter is
// served MERGED: W' = W + scale * B A, computed in f32 from the base's f32 weights at load, into a copy of the model
// (models/clip ClipModel::load's `merge`), as PEFT's merge_and_unload() would; PEFT's unmerged forward gives the same
// embeddings to f32 rounding (tests/conformance/clip_lora_hf_test.cpp checks against PEFT's unmerged outputs).
// Merged, an adapter costs one model's weights but nothing per image: CLIP batches are short and every row of a
// tower's GEMM reads all its weights, so per-row deltas would cost more than grouping a batch by adapter does
// (engine/clip_batch.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/clip/clip.h"
#include "models/lora/peft_lora_file.h"

namespace mmserve::models {

struct ClipLora {
  std::string name;
  PeftLoraFile file;
  bool vision = false, text = false;  // which towers it changes
  // "image", "text" or "image+text" (the registry's modality).
  std::string modality() const;
  // The adapted linears' short names, sorted and unique ("fc1", "q_proj", "visual_projection").
  std::vector<std::string> target_names() const;
};

// Reads a PEFT adapter directory for a CLIPModel of `config`: every refusal of peft_lora_file.h.
StatusOr<std::shared_ptr<const ClipLora>> load_clip_lora(const std::string& dir, const std::string& name,
                                                         const ClipConfig& config);

// W += scale * B A for each of the adapter's modules, on the f32 weights a ClipModel loaded (before q/k/v are fused).
Status merge_clip_lora(const ClipLora& lora, F32Weights& weights);

}  // namespace mmserve::models
