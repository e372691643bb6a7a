// LlamaCudaModel's LoRA slots (see llama_cuda.h, issue 16): an adapter's matrices uploaded into a device slot, a
// step's adapters made resident (LRU over the slots the step does not use) with its rows' slots on the device, and
// the per-group delta launches (the forward calls lora_apply after each adapted group's base GEMM: llama_cuda.cpp);
// the router's input embedding on the device. The slot image an upload copies from: llama_cuda_lora_image.cpp.
#include <algorithm>

#include "core/cuda/cuda_status.h"
#include "kernels/lora/lora_cuda.h"
#include "models/llama/llama_cuda.h"
#include "models/llama/llama_cuda_kernels.h"

namespace mmserve::models {
Status LlamaCudaModel::lora_upload_async(const LoraAdapter& adapter, int64_t slot) {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  const int64_t layers = c.num_hidden_layers, r_max = lora_slot_rank(), params = layers * kLoraTargets;
  std::shared_ptr<const LoraSlotImage> image = adapter.slot_image;
  if (image == nullptr || image->dtype != d || image->r_max != r_max) {  // not packed for this model at load
    // From its f32 copies (a CPU-style load); one packed from the file for another model has none: refused there.
    ASSIGN_OR_RETURN(image, pack_lora_slot_image(adapter, c, d, options_.max_lora_rank));
  }
  for (int t = 0; t < kLoraTargets; ++t) {
    if (image->a_bytes[t] > 0 && lora_a_[t] == nullptr) {
      return unimplemented("adapter '" + adapter.name + "' adapts a linear this model lacks");
    }
  }
  LoraSlot& s = lora_slots_[static_cast<size_t>(slot)];
  if (s.copied == nullptr) {
    s.copied = std::make_shared<CudaEvent>();
    RETURN_IF_ERROR(s.copied->init());
  }
  // The slot's last readers (an earlier step) are done: every step ends with the host waiting for its sampled ids.
  const uint8_t* host = image->memory.get();
  cudaStream_t cs = lora_copy_stream_.get();
  for (int t = 0; t < kLoraTargets; ++t) {
    if (image->a_bytes[t] == 0) continue;
    const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<uint8_t*>(lora_a_[t]) + storage_bytes(d, slot * layers * r_max * in),
                                         host + image->a_offset[t], image->a_bytes[t], cudaMemcpyHostToDevice, cs));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<uint8_t*>(lora_b_[t]) + storage_bytes(d, slot * layers * out * r_max),
                                         host + image->b_offset[t], image->b_bytes[t], cudaMemcpyHostToDevice, cs));
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lora_ranks_ + slot * params, host + image->ranks_offset,
                                       storage_bytes(DType::kI32, params), cudaMemcpyHostToDevice, cs));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lora_scales_ + slot * params, host + image->scales_offset,
                                       storage_bytes(DType::kF32, params), cudaMemcpyHostToDevice, cs));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(s.copied->get(), cs));
  s.source = std::move(image), s.in_flight = true;
  return ok_status();
}

int64_t LlamaCudaModel::lora_victim(uint64_t older_than) const {
  int64_t slot = -1;
  for (size_t i = 0; i < lora_slots_.size(); ++i) {
    const LoraSlot& s = lora_slots_[i];
    if (s.adapter == 0) return static_cast<int64_t>(i);
    if (s.used < older_than && (slot < 0 || s.used < lora_slots_[slot].used)) slot = static_cast<int64_t>(i);
  }
  return slot;
}

StatusOr<bool> LlamaCudaModel::lora_ready(const LoraAdapter& adapter) {
  if (lora_slots_.empty()) return unimplemented("this model was loaded without LoRA slots (max_loras 0)");
  for (LoraSlot& s : lora_slots_) {
    if (s.adapter != adapter.id) continue;
    s.used = std::max(s.used, lora_clock_ + 1);  // claimed for the coming step: no prefetch evicts it
    if (!s.in_flight) return true;
    const cudaError_t done = cudaEventQuery(s.copied->get());
    if (done == cudaErrorNotReady) return false;
    CUDA_RETURN_IF_ERROR(done);
    s.in_flight = false, s.source.reset();
    return true;
  }
  // Not resident: copy it into a slot neither the last step used nor the coming one claimed.
  const int64_t slot = lora_victim(lora_clock_);
  if (slot < 0) return false;
  lora_slots_[slot].adapter = 0;  // half-written until the copy is queued
  RETURN_IF_ERROR(lora_upload_async(adapter, slot));
  lora_slots_[slot].adapter = adapter.id, lora_slots_[slot].used = lora_clock_ + 1;
  return false;
}

Status LlamaCudaModel::lora_stage(const DecoderStep& step, int64_t rows) {
  if (lora_slots_.empty()) {
    return unimplemented("this model was loaded without LoRA slots (max_loras 0); a step names an adapter");
  }
  const uint64_t now = ++lora_clock_;
  const int64_t cap = lora_rows_;
  int32_t* host = lora_host_rows_.data_as<int32_t>();  // [4, cap] as on the device
  float* weights = reinterpret_cast<float*>(host + 2 * cap);
  const bool mix =
      std::any_of(step.loras_second.begin(), step.loras_second.end(), [](const LoraAdapter* a) { return a; });
  std::fill(host, host + rows, -1);
  std::fill(weights, weights + rows, 1.0f);
  if (mix) {
    std::fill(host + cap, host + cap + rows, -1);
    std::fill(weights + cap, weights + cap + rows, 0.0f);
  }
  // The slot holding `a` for this step (resident, or its copy started now: the step then waits for it on the device).
  auto slot_for = [&](const LoraAdapter* a) -> StatusOr<int64_t> {
    int64_t slot = -1;
    for (size_t i = 0; i < lora_slots_.size() && slot < 0; ++i) {
      if (lora_slots_[i].adapter == a->id) slot = static_cast<int64_t>(i);
    }
    if (slot < 0) {  // not prefetched (a step the engine did not ask lora_ready about): copied now
      slot = lora_victim(now);
      if (slot < 0) {
        return resource_exhausted("a step with more distinct LoRA adapters than the model's " +
                                  std::to_string(lora_slots_.size()) + " slots (max_loras)");
      }
      lora_slots_[slot].adapter = 0;
      RETURN_IF_ERROR(lora_upload_async(*a, slot));
      lora_slots_[slot].adapter = a->id;
    }
    LoraSlot& resident = lora_slots_[slot];
    resident.used = now;
    if (resident.in_flight) {  // the step's kernels wait for the copy on the device; the host does not
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), resident.copied->get(), 0));
    }
    return slot;
  };
  for (int64_t s = 0; s < step.num_seqs(); ++s) {
    for (int which = 0; which < 2; ++which) {
      const LoraAdapter* a = which == 0 ? step.loras[s] : (mix ? step.loras_second[s] : nullptr);
      if (a == nullptr) continue;
      ASSIGN_OR_RETURN(const int64_t slot, slot_for(a));
      const float w = step.lora_weights.empty() ? (which == 0 ? 1.0f : 0.0f) : step.lora_weights[2 * s + which];
      for (int32_t r = step.query_start[s]; r < step.query_start[s + 1]; ++r) {
        host[which * cap + r] = static_cast<int32_t>(slot);
        weights[which * cap + r] = w;
      }
    }
  }
  cudaStream_t st = stream_.get();
  for (int part = 0; part < 4; ++part) {  // slots, second slots, weights, second weights: the seconds for a mix
    if (!mix && part % 2 == 1) continue;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lora_row_slot_ + part * cap, host + part * cap, storage_bytes(DType::kI32, rows),
                                         cudaMemcpyHostToDevice, st));
  }
  return ok_status();
}

Status LlamaCudaModel::sum_text_rows(const std::vector<int32_t>& ids) {
  // A step's worth of rows at a time through the residual buffer, summed into the logit-row buffer's first row: only
  // sums ever come back (2 MB of rows for a 128-token prompt at Llama-3-8B's width did, and cost more than the rest
  // of the routing).
  const LlamaConfig& c = config_;
  const int64_t h = c.hidden_size, chunk = std::max(options_.max_num_tokens, options_.max_num_seqs);
  cudaStream_t s = stream_.get();
  for (size_t first = 0; first < ids.size(); first += static_cast<size_t>(chunk)) {
    const int64_t m = std::min<int64_t>(chunk, static_cast<int64_t>(ids.size() - first));
    if (host_embeddings_) {  // the rows staged from the host table (llama_cuda_embed.cpp); the staging is reused
      RETURN_IF_ERROR(stream_.synchronize());
      RETURN_IF_ERROR(stage_embeddings(ids.data() + first, m));
    } else {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(arrays_.tokens, ids.data() + first, storage_bytes(DType::kI32, m), cudaMemcpyHostToDevice, s));
    }
    RETURN_IF_ERROR(gather_embeddings(m, s));
    RETURN_IF_ERROR(column_sum_f32(x_, m, h, 1.0f, /*accumulate=*/first > 0, gathered_, s));
  }
  return ok_status();
}

StatusOr<std::vector<float>> LlamaCudaModel::mean_input_embedding(const std::vector<int32_t>& tokens,
                                                                  const std::vector<int32_t>& embed_rows,
                                                                  const float* embeds) {
  const LlamaConfig& c = config_;
  const int64_t h = c.hidden_size, n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("the mean input embedding of an empty prompt");
  std::vector<float> sum(static_cast<size_t>(h), 0.0f);
  std::vector<int32_t> ids;  // the text rows' ids, in prompt order
  size_t next = 0;           // into embed_rows (ascending)
  for (int64_t p = 0; p < n; ++p) {
    if (next < embed_rows.size() && embed_rows[next] == p) {
      const float* row = embeds + next++ * h;
      for (int64_t k = 0; k < h; ++k) sum[k] += row[k];
    } else if (tokens[p] < 0 || tokens[p] >= c.vocab_size) {
      return invalid_argument("token id " + std::to_string(tokens[p]) + " is outside the vocabulary");
    } else {
      ids.push_back(tokens[p]);
    }
  }
  if (!ids.empty()) {
    RETURN_IF_ERROR(sum_text_rows(ids));
    std::vector<float> text(static_cast<size_t>(h));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(text.data(), gathered_, storage_bytes(DType::kF32, h), cudaMemcpyDeviceToHost, stream_.get()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    for (int64_t k = 0; k < h; ++k) sum[k] += text[k];
  }
  const float inv = 1.0f / static_cast<float>(n);
  for (float& v : sum) v *= inv;
  return sum;
}

StatusOr<std::vector<float>> LlamaCudaModel::gate_first_layer(const std::vector<int32_t>& tokens,
                                                              const std::shared_ptr<const GateHead>& gate,
                                                              std::vector<float>* e) {
  const LlamaConfig& c = config_;
  const int64_t d = c.hidden_size, n = static_cast<int64_t>(tokens.size());
  if (gate == nullptr || gate->input_dim() != d) return invalid_argument("a gate head of another width than the model");
  if (n == 0) return invalid_argument("the mean input embedding of an empty prompt");
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary");
  }
  const int64_t hidden = gate->hidden_dim();
  if (gate_on_device_ != gate) {  // a new head (or the first): its first layer to the device, once
    gate_on_device_.reset();
    const size_t bytes = storage_bytes(DType::kF32, hidden * d + 2 * hidden) + 4 * DeviceArena::kAlignment;
    RETURN_IF_ERROR(gate_weights_.init(bytes));
    ASSIGN_OR_RETURN(gate_w1_, gate_weights_.allocate_array<float>(hidden * d));
    ASSIGN_OR_RETURN(gate_b1_, gate_weights_.allocate_array<float>(hidden));
    ASSIGN_OR_RETURN(gate_out_, gate_weights_.allocate_array<float>(hidden));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(gate_w1_, gate->w1().data(), storage_bytes(DType::kF32, hidden * d), cudaMemcpyHostToDevice));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(gate_b1_, gate->b1().data(), storage_bytes(DType::kF32, hidden), cudaMemcpyHostToDevice));
    gate_on_device_ = gate;  // held: its address cannot be another head's while it is cached
  }
  RETURN_IF_ERROR(sum_text_rows(tokens));
  kernels::GemmCudaArgs g;  // hidden = (1/n) sum @ W1^T + b1: the mean folded into alpha
  g.m = 1, g.n = hidden, g.k = d, g.a = gathered_, g.lda = d, g.w = gate_w1_, g.ldw = d, g.in_dtype = DType::kF32;
  g.d = gate_out_, g.ldd = hidden, g.out_dtype = DType::kF32, g.bias = gate_b1_, g.alpha = 1.0f / static_cast<float>(n);
  cudaStream_t s = stream_.get();
  RETURN_IF_ERROR(gemm_->run(g, s));
  std::vector<float> out(static_cast<size_t>(hidden));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out.data(), gate_out_, storage_bytes(DType::kF32, hidden), cudaMemcpyDeviceToHost, s));
  if (e != nullptr) {
    e->resize(static_cast<size_t>(d));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(e->data(), gathered_, storage_bytes(DType::kF32, d), cudaMemcpyDeviceToHost, s));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  if (e != nullptr) {
    const float inv = 1.0f / static_cast<float>(n);
    for (float& v : *e) v *= inv;
  }
  return out;
}

int64_t LlamaCudaModel::lora_workspace_floats(int64_t rows) const {
  const LlamaConfig& c = config_;
  const int64_t r = lora_slot_rank(), h = c.hidden_size, q = c.num_attention_heads * c.head_dim;
  return std::max({kernels::lora_cuda_workspace_floats(rows, h, r, 3),
                   kernels::lora_cuda_workspace_floats(rows, q, r, 1),
                   kernels::lora_cuda_workspace_floats(rows, h, r, 2),
                   kernels::lora_cuda_workspace_floats(rows, c.intermediate_size, r, 1)});
}

kernels::LoraCudaArgs LlamaCudaModel::lora_args(int64_t layer, std::initializer_list<LoraTarget> targets, const void* x,
                                                int64_t x_ld, void* y, DType y_dtype, int64_t y_ld,
                                                int64_t tokens) const {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  const int64_t layers = c.num_hidden_layers, r_max = lora_slot_rank();
  kernels::LoraCudaArgs p;
  p.x = x, p.x_ld = x_ld, p.rows = tokens, p.dtype = d, p.row_slot = lora_row_slot_;
  p.row_weight = reinterpret_cast<const float*>(lora_row_slot_ + 2 * lora_rows_);
  p.param_stride = layers * kLoraTargets, p.r_max = r_max, p.num_targets = 0;
  p.y_dtype = y_dtype, p.y_ld = y_ld, p.workspace = lora_t_, p.workspace_floats = lora_t_floats_;
  int64_t column = 0;  // the target's first column in y's fused row
  for (LoraTarget t : targets) {
    const int ti = static_cast<int>(t);
    const auto [in, out] = lora_target_features(c, t);
    p.in = in;
    if (lora_a_[ti] != nullptr) {  // Mixtral's MLP: no dense linears
      kernels::LoraCudaTarget& g = p.target[p.num_targets++];
      g.a = static_cast<const uint8_t*>(lora_a_[ti]) + storage_bytes(d, layer * r_max * in),
      g.a_slot_stride = layers * r_max * in;
      g.b = static_cast<const uint8_t*>(lora_b_[ti]) + storage_bytes(d, layer * out * r_max),
      g.b_slot_stride = layers * out * r_max;
      g.ranks = lora_ranks_ + layer * kLoraTargets + ti, g.scales = lora_scales_ + layer * kLoraTargets + ti;
      g.out = out, g.y = static_cast<uint8_t*>(y) + storage_bytes(y_dtype, column);
    }
    column += out;
  }
  return p;
}

Status LlamaCudaModel::lora_apply(kernels::LoraCudaArgs p) {
  if (p.num_targets == 0) return ok_status();
  RETURN_IF_ERROR(kernels::lora_apply_cuda(p, stream_.get()));
  if (!lora_mix_active_) return ok_status();
  p.row_slot += lora_rows_, p.row_weight += lora_rows_;  // the rows' second adapters: a whole pass after the first
  return kernels::lora_apply_cuda(p, stream_.get());
}

}  // namespace mmserve::models
