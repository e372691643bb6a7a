// LlamaCudaModel's W4A16 path (llama_cuda.h; issue 17 item 2): an AWQ / GPTQ checkpoint's decoder linears kept as
// 4-bit weights packed for kernels/w4a16 (w4a16_pack, w4a16_upload_into) in the model's weight arena, the plan of how
// each layer's four GEMMs hold their weights, random 4-bit weights for the benchmarks, and the forward's call of
// w4a16_gemm_cuda. The 16-bit path (llama_cuda.cpp) only asks w4a16_packed() while planning and takes a GEMM's
// `w4a16` parts when they are there.
//
// Per GEMM (qkv, o, gate_up, down) of a layer, from the checkpoint's linears (q/k/v_proj, o_proj, gate/up_proj,
// down_proj):
//   kFused: one packed weight, the linears' rows concatenated (valid: the groups run along the input columns, and the
//     linears of a GEMM share K and the group size; with act-order only when their g_idx are equal, which GPTQ gives
//     q/k/v and gate/up when it quantises them from the same inputs' Hessian);
//   kSeparate: GPTQ act-order linears whose g_idx differ: one W4A16 GEMM each into scratch rows, copied into their
//     columns of the fused row (the kernel writes y contiguous);
//   kDense: a GEMM the kernel cannot take (K % 64, N % 16, a group size not a multiple of 32: the tiny test Llama's
//     down_proj has K = 96) or whose linears are not all quantised (modules_to_not_convert): the quantised ones are
//     dequantised at load (exact in f32, then rounded to the compute dtype) into the 16-bit slot and run as today.
// Refused before any CUDA call: a compute dtype other than bf16 / f16, Mixtral's quantised experts.
// Tests: tests/conformance/llama_cuda_quant_test.cpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "core/cuda/cuda_status.h"
#include "models/llama/llama_cuda.h"
#include "models/llama/llama_cuda_linears.h"
#include "models/quant/int4_checkpoint.h"
#include "models/quant/quant_load.h"

namespace mmserve::models {
namespace {

// The W4A16 kernel's shape rules (w4a16.h: w4a16_check's sizes; its value checks run when packing).
bool kernel_takes_k(int64_t k, int64_t group_size) {
  return k % kernels::kW4A16ColTile == 0 && group_size % kernels::kW4A16MinGroup == 0 && k % group_size == 0;
}

// What w4a16_upload_into places for a linear of n x k (each array 256-byte aligned), at most: a fused weight's arrays
// take no more than its linears' apart, and an act-order weight whose g_idx is sorted stores no permutation.
size_t packed_bytes_bound(int64_t n, int64_t k, int64_t group_size, bool act_order) {
  const size_t q = static_cast<size_t>(n * k / 2), sz = static_cast<size_t>(k / group_size * n * 4);
  return DeviceArena::aligned(q) + DeviceArena::aligned(sz) + (act_order ? DeviceArena::aligned(k * 4) : 0);
}

// A GPTQ linear's stored g_idx, empty when absent or trivial (k / G: no act-order), as read_int4_linear keeps it.
// A g_idx of the wrong dtype or size reads as empty here; read_int4_linear refuses it when the weight is read.
std::vector<int32_t> stored_g_idx(const WeightStore* store, const QuantConfig& quant, const std::string& prefix,
                                  int64_t k) {
  if (store == nullptr || quant.method != QuantMethod::kGptq) return {};
  const TensorInfo* t = store->find(prefix + ".g_idx");
  if (t == nullptr || t->dtype != DType::kI32 || t->nbytes != static_cast<size_t>(k) * 4) return {};
  std::vector<int32_t> g(static_cast<size_t>(k));
  std::memcpy(g.data(), t->data, t->nbytes);
  const int64_t gs = quant.group_size_for(k);
  for (int64_t c = 0; c < k; ++c) {
    if (g[static_cast<size_t>(c)] != c / gs) return g;
  }
  return {};
}

// Refusals that need no GPU (and come before any CUDA call): the method and the dtype, then (`plan`) the linears.
Status check_w4a16_request(const QuantConfig& quant, const QuantizedWeightPlan* plan, const LlamaCudaOptions& o) {
  if (quant.method != QuantMethod::kAwq && quant.method != QuantMethod::kGptq) {
    return unimplemented(quant.format_name() +
                         " checkpoints do not run on the GPU Llama yet (issue 17 item 3; "
                         "the GPU reads AWQ and GPTQ W4A16 checkpoints); the CPU path reads them");
  }
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    return invalid_argument("a W4A16 checkpoint (" + quant.format_name() +
                            ") runs on the GPU in bf16 or f16 (the W4A16 kernel's activations), not " +
                            dtype_name(o.dtype) + ": ask for bf16 or f16 (the CPU path dequantises it to f32)");
  }
  if (plan == nullptr) return ok_status();
  for (const QuantizedLinear& l : plan->linears) {
    if (l.prefix.find("block_sparse_moe.experts.") != std::string::npos) {
      return unimplemented("Mixtral's experts are quantised (" + l.prefix +
                           ", ...): the GPU path has no W4A16 expert GEMM yet (issue 17 item 2); keep the experts in "
                           "16 bits (modules_to_not_convert: [\"block_sparse_moe\"]) or run the model on the CPU, "
                           "which dequantises them");
    }
  }
  return ok_status();
}

kernels::Int4WeightView view_of(const Int4Weight& w) {
  return {
      w.n, w.k, w.group_size, w.q.data(), w.scales.data(), w.zeros.data(), w.g_idx.empty() ? nullptr : w.g_idx.data()};
}

// Rows of `parts` (same k, group size and g_idx) stacked into one weight.
Int4Weight concat_rows(std::vector<Int4Weight>& parts) {
  Int4Weight w = std::move(parts[0]);
  for (size_t i = 1; i < parts.size(); ++i) {
    const Int4Weight& p = parts[i];
    w.n += p.n;
    w.q.insert(w.q.end(), p.q.begin(), p.q.end());
    w.scales.insert(w.scales.end(), p.scales.begin(), p.scales.end());
    w.zeros.insert(w.zeros.end(), p.zeros.begin(), p.zeros.end());
  }
  return w;
}

// A random 4-bit weight (benchmarks): q uniform in 0..15, zero 8, one f16 scale a group near 0.0043, so that
// (q - 8) * s has a std of about 0.02 (random()'s).
Int4Weight random_int4(int64_t n, int64_t k, int64_t group_size, uint64_t seed) {
  Int4Weight w;
  w.n = n, w.k = k, w.group_size = group_size;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {  // splitmix64
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  w.q.resize(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.q.size(); i += 16) {
    const uint64_t r = next();
    for (size_t j = 0; j < 16 && i + j < w.q.size(); ++j) w.q[i + j] = static_cast<uint8_t>((r >> (4 * j)) & 15);
  }
  w.zeros.assign(static_cast<size_t>(n * w.groups()), 8);
  w.scales.resize(w.zeros.size());
  for (float& s : w.scales)
    s = f16_to_f32(f32_to_f16(0.0035f + 0.0016f * static_cast<float>(next() >> 40) / 16777216.0f));
  return w;
}

}  // namespace

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::load_w4a16(const std::string& model_dir,
                                                                     const WeightStore& store,
                                                                     const LlamaConfig& config,
                                                                     const QuantConfig& quant,
                                                                     const LlamaCudaOptions& options) {
  RETURN_IF_ERROR(check_w4a16_request(quant, nullptr, options).with_context(model_dir));
  ASSIGN_OR_RETURN(const QuantizedWeightPlan plan, plan_quantized_weights(quant, llama_weight_specs(config)));
  RETURN_IF_ERROR(check_w4a16_request(quant, &plan, options).with_context(model_dir));
  WeightCheckOptions check;
  check.ignored_suffixes = {"rotary_emb.inv_freq"};
  RETURN_IF_ERROR(check_weights(store, plan.stored, check).with_context(model_dir));
  std::vector<std::string> quantized;
  for (const QuantizedLinear& l : plan.linears) quantized.push_back(l.prefix);
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  RETURN_IF_ERROR(m->init(config, options));
  RETURN_IF_ERROR(m->plan_w4a16(&store, quant, quantized));
  RETURN_IF_ERROR(m->plan_weights());
  RETURN_IF_ERROR(m->upload_w4a16(store, quant).with_context(model_dir));
  RETURN_IF_ERROR(m->upload(store));
  RETURN_IF_ERROR(m->plan_buffers());
  if (options.graphs) RETURN_IF_ERROR(m->capture_graphs());
  return m;
}

Status LlamaCudaModel::plan_w4a16(const WeightStore* store, const QuantConfig& quant,
                                  const std::vector<std::string>& quantized) {
  const LlamaConfig& c = config_;
  const std::set<std::string> is_quantized(quantized.begin(), quantized.end());
  std::array<W4A16Mode, kGemms> dense;
  dense.fill(W4A16Mode::kDense);
  w4a16_modes_.assign(static_cast<size_t>(c.num_hidden_layers), dense);
  w4a16_planned_bytes_ = 0;
  w4a16_summary_ = W4A16Summary();
  w4a16_summary_.format = quant.format_name();
  w4a16_quantized_ = is_quantized;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = names_.model + "layers." + std::to_string(l) + ".";
    for (int g = 0; g < kGemms; ++g) {
      if (c.num_experts > 0 && (g == kGateUpGemm || g == kDownGemm)) continue;  // Mixtral: the experts (refused)
      const std::vector<LinearShape> linears = gemm_linears(c, p, g);
      int64_t count = 0, width = 0;
      bool rows_fit = true;
      for (const LinearShape& s : linears) {
        count += is_quantized.count(s.prefix);
        width += s.n;
        rows_fit = rows_fit && s.n % kernels::kW4A16RowTile == 0;
      }
      if (count == 0) continue;  // a 16-bit GEMM
      const int64_t k = linears[0].k, gs = quant.group_size_for(k);
      W4A16Mode mode = W4A16Mode::kDense;
      std::vector<std::vector<int32_t>> g_idx;
      for (const LinearShape& s : linears) g_idx.push_back(stored_g_idx(store, quant, s.prefix, s.k));
      const bool same_order = std::all_of(g_idx.begin(), g_idx.end(), [&](const auto& v) { return v == g_idx[0]; });
      if (count == static_cast<int64_t>(linears.size()) && kernel_takes_k(k, gs)) {
        if (same_order && width % kernels::kW4A16RowTile == 0) {
          mode = W4A16Mode::kFused;
        } else if (!same_order && rows_fit) {
          mode = W4A16Mode::kSeparate;
        }
      }
      w4a16_modes_[static_cast<size_t>(l)][g] = mode;
      if (mode == W4A16Mode::kDense) {
        ++w4a16_summary_.dequantized;
        continue;
      }
      ++(mode == W4A16Mode::kFused ? w4a16_summary_.fused : w4a16_summary_.separate);
      for (size_t i = 0; i < linears.size(); ++i) {
        w4a16_planned_bytes_ += packed_bytes_bound(linears[i].n, k, gs, !g_idx[i].empty());
      }
    }
  }
  return ok_status();
}

Status LlamaCudaModel::upload_w4a16(const WeightStore& store, const QuantConfig& quant) {
  const LlamaConfig& c = config_;
  const DType d = options_.dtype;
  std::set<std::string> written;  // the dequantised linears' dense slots, filled here
  std::vector<uint16_t> half;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = names_.model + "layers." + std::to_string(l) + ".";
    for (int g = 0; g < kGemms; ++g) {
      if (c.num_experts > 0 && (g == kGateUpGemm || g == kDownGemm)) continue;
      const std::vector<LinearShape> linears = gemm_linears(c, p, g);
      const W4A16Mode mode = w4a16_modes_[static_cast<size_t>(l)][g];
      if (mode == W4A16Mode::kDense) {  // its quantised linears dequantised into the 16-bit slot plan_weights made
        for (const LinearShape& s : linears) {
          if (w4a16_quantized_.count(s.prefix) == 0) continue;  // stored in 16 bits: upload() reads it
          ASSIGN_OR_RETURN(const Int4Weight w, read_int4_linear(store, quant, s.prefix, s.n, s.k));
          const std::vector<float> f = dequantize(w);
          const std::string name = s.prefix + ".weight";
          auto slot =
              std::find_if(weight_slots_.begin(), weight_slots_.end(), [&](const auto& e) { return e.first == name; });
          if (slot == weight_slots_.end()) return internal_error("no 16-bit slot planned for " + name);
          half.resize(f.size());
          for (size_t i = 0; i < f.size(); ++i) half[i] = d == DType::kBF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
          CUDA_RETURN_IF_ERROR(cudaMemcpy(slot->second, half.data(), half.size() * 2, cudaMemcpyHostToDevice));
          written.insert(name);
        }
        continue;
      }
      std::vector<Int4Weight> parts;
      for (const LinearShape& s : linears) {
        ASSIGN_OR_RETURN(Int4Weight w, read_int4_linear(store, quant, s.prefix, s.n, s.k));
        parts.push_back(std::move(w));
      }
      W4A16Linear& out = layers_[static_cast<size_t>(l)].w4a16[g];
      out = W4A16Linear();
      int64_t offset = 0;
      for (const Int4Weight& w : parts) out.offsets.push_back(offset), offset += w.n;
      out.width = offset;
      if (mode == W4A16Mode::kFused) {
        for (const Int4Weight& w : parts) {
          if (w.g_idx != parts[0].g_idx || w.group_size != parts[0].group_size) {
            return internal_error(linears[0].prefix + ": planned as one weight, but its linears' groups differ");
          }
        }
        Int4Weight fused = concat_rows(parts);
        parts.clear();
        parts.push_back(std::move(fused));
        out.offsets = {0};
      }
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::string label = mode == W4A16Mode::kFused && linears.size() > 1
                                      ? linears[0].prefix + " (fused with the rest of its GEMM)"
                                      : linears[i].prefix;
        StatusOr<kernels::W4A16Packed> packed = kernels::w4a16_pack(view_of(parts[i]), d);
        if (!packed.ok()) return packed.status().with_context(label);
        ASSIGN_OR_RETURN(const kernels::W4A16Device dev, kernels::w4a16_upload_into(*packed, weights_));
        out.parts.push_back(dev);
        w4a16_summary_.packed_bytes += static_cast<int64_t>(kernels::w4a16_device_bytes(*packed));
      }
    }
  }
  weight_slots_.erase(std::remove_if(weight_slots_.begin(), weight_slots_.end(),
                                     [&](const auto& e) { return written.count(e.first) > 0; }),
                      weight_slots_.end());
  return ok_status();
}

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::random_w4a16(const LlamaConfig& config,
                                                                       const LlamaCudaOptions& options, uint64_t seed,
                                                                       int64_t group_size) {
  QuantConfig quant;
  quant.method = QuantMethod::kAwq, quant.group_size = group_size;
  RETURN_IF_ERROR(check_w4a16_request(quant, nullptr, options));
  ASSIGN_OR_RETURN(const QuantizedWeightPlan plan, plan_quantized_weights(quant, llama_weight_specs(config)));
  RETURN_IF_ERROR(check_w4a16_request(quant, &plan, options));
  std::vector<std::string> quantized;
  for (const QuantizedLinear& l : plan.linears) quantized.push_back(l.prefix);
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  RETURN_IF_ERROR(m->init(config, options));
  RETURN_IF_ERROR(m->plan_w4a16(nullptr, quant, quantized));
  m->w4a16_summary_.format = "random " + quant.format_name();
  RETURN_IF_ERROR(m->plan_weights());
  RETURN_IF_ERROR(m->randomise(seed));  // the 16-bit slots, dequantised GEMMs' included
  const LlamaConfig& c = m->config_;
  std::map<std::pair<int64_t, int64_t>, kernels::W4A16Packed> packed;  // one random weight per (n, k)
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (int g = 0; g < kGemms; ++g) {
      if (!m->w4a16_packed(l, static_cast<Gemm>(g))) continue;
      const std::vector<LinearShape> linears = gemm_linears(c, m->names_.model, g);
      int64_t width = 0;
      for (const LinearShape& s : linears) width += s.n;
      const int64_t k = linears[0].k;
      auto it = packed.find({width, k});
      if (it == packed.end()) {
        const Int4Weight w = random_int4(width, k, quant.group_size_for(k), seed + 7919 * packed.size());
        ASSIGN_OR_RETURN(kernels::W4A16Packed p, kernels::w4a16_pack(view_of(w), m->options_.dtype));
        it = packed.emplace(std::make_pair(width, k), std::move(p)).first;
      }
      ASSIGN_OR_RETURN(const kernels::W4A16Device dev, kernels::w4a16_upload_into(it->second, m->weights_));
      W4A16Linear& out = m->layers_[static_cast<size_t>(l)].w4a16[g];
      out.parts = {dev}, out.offsets = {0}, out.width = width;
      m->w4a16_summary_.packed_bytes += static_cast<int64_t>(kernels::w4a16_device_bytes(it->second));
    }
  }
  RETURN_IF_ERROR(m->plan_buffers());
  if (options.graphs) RETURN_IF_ERROR(m->capture_graphs());
  return m;
}

size_t LlamaCudaModel::w4a16_workspace_need(int64_t rows) const {
  size_t need = 0;
  std::set<std::tuple<int64_t, int64_t, bool>> seen;  // (n, k, act-order): the need depends on nothing else
  for (const Layer& layer : layers_) {
    for (const W4A16Linear& g : layer.w4a16) {
      for (const kernels::W4A16Device& p : g.parts) {
        if (!seen.insert({p.n, p.k, p.perm != nullptr}).second) continue;
        for (int64_t m = 1; m <= std::min(rows, kernels::kW4A16MmaMaxRows); ++m) {
          need = std::max(need, kernels::w4a16_workspace_bytes(m, p));
        }
        if (rows > kernels::kW4A16MmaMaxRows) need = std::max(need, kernels::w4a16_workspace_bytes(rows, p));
      }
    }
  }
  return need;
}

size_t LlamaCudaModel::w4a16_scratch_need(int64_t rows) const {
  int64_t widest = 0;
  for (const Layer& layer : layers_) {
    for (const W4A16Linear& g : layer.w4a16) {
      if (g.parts.size() < 2) continue;
      for (const kernels::W4A16Device& p : g.parts) widest = std::max(widest, p.n);
    }
  }
  return static_cast<size_t>(rows * widest) * dtype_size(options_.dtype);
}

Status LlamaCudaModel::w4a16_linear(const W4A16Linear& w, const void* x, void* y, bool f32_accumulate, const void* bias,
                                    int64_t m) {
  const DType d = options_.dtype;
  cudaStream_t s = stream_.get();
  if (w.parts.size() == 1) {
    return kernels::w4a16_gemm_cuda(x, d, m, w.parts[0], y, w4a16_workspace_, w4a16_workspace_bytes_, gemm_.get(), s,
                                    {f32_accumulate, f32_accumulate, bias});
  }
  if (f32_accumulate) return internal_error("a W4A16 GEMM into the residual planned linear by linear");
  // Linear by linear (act-order permutations that differ): each into the scratch rows, then its columns of the row.
  const size_t e = dtype_size(d);
  for (size_t i = 0; i < w.parts.size(); ++i) {
    const kernels::W4A16Device& p = w.parts[i];
    const size_t offset = static_cast<size_t>(w.offsets[i]) * e;
    const void* part_bias = bias != nullptr ? static_cast<const uint8_t*>(bias) + offset : nullptr;
    RETURN_IF_ERROR(kernels::w4a16_gemm_cuda(x, d, m, p, w4a16_scratch_, w4a16_workspace_, w4a16_workspace_bytes_,
                                             gemm_.get(), s, {false, false, part_bias}));
    CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(static_cast<uint8_t*>(y) + offset, static_cast<size_t>(w.width) * e,
                                           w4a16_scratch_, static_cast<size_t>(p.n) * e, static_cast<size_t>(p.n) * e,
                                           static_cast<size_t>(m), cudaMemcpyDeviceToDevice, s));
  }
  return ok_status();
}

}  // namespace mmserve::models
