// LlamaCudaModel's LoRA slots (see llama_cuda.h, issue 16): an adapter's matrices uploaded into a device slot, a
// step's adapters made resident (LRU over the slots the step does not use) with its rows' slots on the device, and
// the per-linear delta launch. The forward calls lora_apply after each adapted linear (llama_cuda.cpp).
#include <algorithm>
#include <cstring>

#include "core/cuda/cuda_status.h"
#include "kernels/lora/lora_cuda.h"
#include "models/llama/llama_cuda.h"

namespace mmserve::models {
namespace {

size_t bytes_of(DType d, int64_t n) { return static_cast<size_t>(n) * dtype_size(d); }

}  // namespace

Status LlamaCudaModel::lora_upload(const LoraAdapter& adapter, int64_t slot) {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  const int64_t layers = c.num_hidden_layers, r_max = options_.max_lora_rank;
  if (adapter.max_rank > r_max) {
    return invalid_argument("adapter '" + adapter.name + "' has rank " + std::to_string(adapter.max_rank) +
                            "; this model's slots hold rank " + std::to_string(r_max) + " (max_lora_rank)");
  }
  std::vector<int32_t> ranks(static_cast<size_t>(layers * kLoraTargets), 0);
  std::vector<float> scales(ranks.size(), 0.0f);
  std::vector<uint8_t> staging;
  auto to_dtype = [&](const std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld) {  // [rows, cols] -> ld
    staging.assign(bytes_of(d, rows * ld), 0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) {
        const float x = v[r * cols + k];
        uint8_t* at = staging.data() + bytes_of(d, r * ld + k);
        if (d == DType::kF32) {
          std::memcpy(at, &x, 4);
        } else {
          const uint16_t hbits = d == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x);
          std::memcpy(at, &hbits, 2);
        }
      }
    }
  };
  for (int64_t l = 0; l < layers; ++l) {
    for (int t = 0; t < kLoraTargets; ++t) {
      const LoraModule& m = adapter.module(l, static_cast<LoraTarget>(t));
      if (!m.present()) continue;
      if (lora_a_[t] == nullptr) return unimplemented("adapter '" + adapter.name + "' adapts a linear this model lacks");
      const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
      to_dtype(m.a, m.rank, in, in);  // A's first `rank` rows of the slot's [r_max, in]
      uint8_t* a = static_cast<uint8_t*>(lora_a_[t]) + bytes_of(d, (slot * layers + l) * r_max * in);
      CUDA_RETURN_IF_ERROR(cudaMemcpy(a, staging.data(), staging.size(), cudaMemcpyHostToDevice));
      to_dtype(m.b, out, m.rank, r_max);  // B [out, rank] into the slot's [out, r_max]
      uint8_t* b = static_cast<uint8_t*>(lora_b_[t]) + bytes_of(d, (slot * layers + l) * out * r_max);
      CUDA_RETURN_IF_ERROR(cudaMemcpy(b, staging.data(), staging.size(), cudaMemcpyHostToDevice));
      ranks[l * kLoraTargets + t] = static_cast<int32_t>(m.rank);
      scales[l * kLoraTargets + t] = m.scale;
    }
  }
  const int64_t params = layers * kLoraTargets;
  CUDA_RETURN_IF_ERROR(cudaMemcpy(lora_ranks_ + slot * params, ranks.data(), ranks.size() * 4, cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(lora_scales_ + slot * params, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
  return ok_status();
}

Status LlamaCudaModel::lora_stage(const DecoderStep& step, int64_t rows) {
  if (lora_slots_.empty()) {
    return unimplemented("this model was loaded without LoRA slots (max_loras 0); a step names an adapter");
  }
  const uint64_t now = ++lora_clock_;
  auto* host = lora_host_rows_.data_as<int32_t>();
  std::fill(host, host + rows, -1);
  for (int64_t s = 0; s < step.num_seqs(); ++s) {
    const LoraAdapter* a = step.loras[s];
    if (a == nullptr) continue;
    int64_t slot = -1;
    for (size_t i = 0; i < lora_slots_.size() && slot < 0; ++i) {
      if (lora_slots_[i].adapter == a->id) slot = static_cast<int64_t>(i);
    }
    if (slot < 0) {  // a free slot, else the least recently used one this step does not use
      for (size_t i = 0; i < lora_slots_.size(); ++i) {
        if (lora_slots_[i].used == now) continue;
        if (slot < 0 || lora_slots_[i].adapter == 0 || lora_slots_[i].used < lora_slots_[slot].used) {
          slot = static_cast<int64_t>(i);
          if (lora_slots_[i].adapter == 0) break;
        }
      }
      if (slot < 0) {
        return resource_exhausted("a step with more distinct LoRA adapters than the model's " +
                                  std::to_string(lora_slots_.size()) + " slots (max_loras)");
      }
      lora_slots_[slot].adapter = 0;  // half-written until the upload succeeds
      RETURN_IF_ERROR(lora_upload(*a, slot));
      lora_slots_[slot].adapter = a->id;
    }
    lora_slots_[slot].used = now;
    for (int32_t r = step.query_start[s]; r < step.query_start[s + 1]; ++r) host[r] = static_cast<int32_t>(slot);
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lora_row_slot_, host, bytes_of(DType::kI32, rows), cudaMemcpyHostToDevice,
                                       stream_.get()));
  return ok_status();
}

Status LlamaCudaModel::lora_apply(int64_t layer, LoraTarget t, const void* x, int64_t x_ld, void* y, DType y_dtype,
                                  int64_t y_ld, int64_t tokens) {
  const int ti = static_cast<int>(t);
  if (lora_a_[ti] == nullptr) return ok_status();  // Mixtral's MLP: no dense linears
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  const int64_t layers = c.num_hidden_layers, r_max = options_.max_lora_rank;
  const auto [in, out] = lora_target_features(c, t);
  kernels::LoraCudaArgs p;
  p.x = x, p.x_ld = x_ld, p.rows = tokens, p.in = in, p.dtype = d, p.row_slot = lora_row_slot_;
  p.a = static_cast<const uint8_t*>(lora_a_[ti]) + bytes_of(d, layer * r_max * in), p.a_slot_stride = layers * r_max * in;
  p.b = static_cast<const uint8_t*>(lora_b_[ti]) + bytes_of(d, layer * out * r_max), p.b_slot_stride = layers * out * r_max;
  p.ranks = lora_ranks_ + layer * kLoraTargets + ti, p.scales = lora_scales_ + layer * kLoraTargets + ti;
  p.param_stride = layers * kLoraTargets, p.r_max = r_max, p.out = out, p.t = lora_t_;
  p.y = y, p.y_dtype = y_dtype, p.y_ld = y_ld;
  return kernels::lora_apply_cuda(p, stream_.get());
}

}  // namespace mmserve::models
