// LlamaCudaModel's FP8 path (llama_cuda.h; issue 17 item 3): an FP8 checkpoint with per-tensor weight scales and
// static per-tensor input scales (compressed-tensors weights.strategy tensor + input_activations {strategy tensor,
// dynamic false}; AutoFP8 quant_method fp8 + activation_scheme static) keeps each decoder linear's stored codes and
// its weight_scale / input_scale in the model's weight arena. Per GEMM (qkv, o, gate_up, down) of a layer: the
// linears' codes stacked by rows ([width, k], as the 16-bit fused weights), the input quantised by fp8_quantize_cuda
// with the linear's static input_scale into fp8_input_ ([rows, k] codes), then CublasLtGemm::run_fp8 (per-tensor
// scales, bf16 / f16 out; o and down with accumulate: cuBLASLt's beta = 1 with C = D in the f32 residual).
// Fused q/k/v (gate/up): when the linears' weight scales and input scales are all equal, one GEMM over the stacked
// rows; otherwise one GEMM per linear (its rows of the codes, its own two scales) writing its columns of the fused
// row (ldd = width): what the CPU path computes (each linear's input fake-quantised with its own input_scale, its
// weight dequantised with its own weight_scale), not vLLM's requantisation to the largest scale.
// Refused before any CUDA call (the CPU path, llama.cpp, serves them all): a compute dtype other than bf16 / f16
// (kInvalidArgument), per-channel or block-wise weight scales, weight-only or dynamic input schemes, an FP8 lm_head,
// router or expert, a GEMM only partly FP8 (ignore lists), a K not a multiple of 16 (cuBLASLt's FP8 rule), an o / down
// bias (cuBLASLt's FP8 GEMM into f32 takes a bf16 bias): all kUnimplemented naming what.
// Tests: tests/conformance/llama_cuda_fp8_test.cpp.
#include <algorithm>
#include <map>
#include <set>

#include "core/cuda/cuda_status.h"
#include "kernels/fp8/fp8_cuda.h"
#include "models/llama/llama_cuda.h"
#include "models/llama/llama_cuda_linears.h"
#include "models/quant/fp8_checkpoint.h"
#include "models/quant/quant_load.h"

namespace mmserve::models {
namespace {

const char* kCpuServes = "; the CPU path (LlamaModel) serves it";

// Refusals that need no GPU: the dtype and the scheme.
Status check_fp8_request(const QuantConfig& quant, const LlamaCudaOptions& o) {
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    return invalid_argument("an FP8 checkpoint (" + quant.format_name() + ") runs on the GPU in bf16 or f16, not " +
                            dtype_name(o.dtype));
  }
  if (quant.fp8_weights == Fp8WeightScale::kChannel) {
    return unimplemented("FP8 weights with per-channel scales (weights.strategy channel) do not run on the GPU "
                         "Llama yet (cuBLASLt's rowwise scales are refused on the H100; per-tensor only)" +
                         std::string(kCpuServes));
  }
  if (quant.fp8_weights == Fp8WeightScale::kBlock) {
    return unimplemented("block-wise FP8 weights (weight_block_size / weights.strategy block) do not run on the GPU "
                         "Llama yet" + std::string(kCpuServes));
  }
  if (quant.fp8_inputs != Fp8InputScale::kStatic) {
    return unimplemented(std::string("FP8 input_activations / activation_scheme ") +
                         fp8_input_scale_name(quant.fp8_inputs) +
                         " do not run on the GPU Llama yet (static per-tensor input scales only)" + kCpuServes);
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::load_fp8(const std::string& model_dir,
                                                                   const WeightStore& store, const LlamaConfig& config,
                                                                   const QuantConfig& quant,
                                                                   const LlamaCudaOptions& options) {
  RETURN_IF_ERROR(check_fp8_request(quant, options).with_context(model_dir));
  ASSIGN_OR_RETURN(const QuantizedWeightPlan plan, plan_quantized_weights(quant, llama_weight_specs(config)));
  std::set<std::string> fp8;
  for (const QuantizedLinear& l : plan.linears) {
    if (l.prefix.find(".layers.") == std::string::npos || l.prefix.find("block_sparse_moe") != std::string::npos) {
      return unimplemented(l.prefix + " is FP8: the GPU Llama runs FP8 in the decoder layers' attention and MLP "
                           "linears only (add it to the checkpoint's ignore list)" + std::string(kCpuServes))
          .with_context(model_dir);
    }
    fp8.insert(l.prefix);
  }
  WeightCheckOptions check;
  check.ignored_suffixes = {"rotary_emb.inv_freq"};
  for (const std::string& s : plan.tolerated_suffixes) check.ignored_suffixes.push_back(s);
  RETURN_IF_ERROR(check_weights(store, plan.stored, check).with_context(model_dir));
  // Which GEMMs are FP8: all of their linears, or none.
  std::array<bool, kGemms> none{};
  std::vector<std::array<bool, kGemms>> gemms(static_cast<size_t>(config.num_hidden_layers), none);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = LlamaWeightNames{}.model + "layers." + std::to_string(l) + ".";
    for (int g = 0; g < kGemms; ++g) {
      const std::vector<LinearShape> linears = gemm_linears(config, p, g);
      size_t count = 0;
      for (const LinearShape& s : linears) count += fp8.count(s.prefix);
      if (count == 0) continue;
      if (count != linears.size()) {
        return unimplemented(linears[0].prefix + ": only some of the linears of its fused GEMM are FP8 (ignore "
                             "lists): the GPU Llama runs a GEMM all FP8 or all 16-bit" + std::string(kCpuServes))
            .with_context(model_dir);
      }
      if (linears[0].k % 16 != 0) {
        return unimplemented(linears[0].prefix + ": " + std::to_string(linears[0].k) +
                             " inputs, not a multiple of 16 (cuBLASLt's FP8 GEMM)" + std::string(kCpuServes))
            .with_context(model_dir);
      }
      if ((g == kOGemm && config.o_bias) || (g == kDownGemm && config.mlp_bias)) {
        // cuBLASLt's FP8 GEMM with f32 out takes a bf16 bias (its type table), the residual's bias is f32.
        return unimplemented(linears[0].prefix + ": an FP8 projection into the f32 residual with a bias (o_proj / "
                             "down_proj bias)" + std::string(kCpuServes))
            .with_context(model_dir);
      }
      gemms[static_cast<size_t>(l)][g] = true;
    }
  }
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  RETURN_IF_ERROR(m->init(config, options));
  m->fp8_gemms_ = std::move(gemms);
  RETURN_IF_ERROR(m->plan_fp8());
  RETURN_IF_ERROR(m->plan_weights());
  RETURN_IF_ERROR(m->upload_fp8(store, quant).with_context(model_dir));
  RETURN_IF_ERROR(m->upload(store));
  RETURN_IF_ERROR(m->plan_buffers());
  if (options.graphs) RETURN_IF_ERROR(m->capture_graphs());
  return m;
}

StatusOr<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::random_fp8(const LlamaConfig& config,
                                                                     const LlamaCudaOptions& options, uint64_t seed) {
  QuantConfig quant;
  quant.method = QuantMethod::kFp8, quant.fp8_inputs = Fp8InputScale::kStatic;
  RETURN_IF_ERROR(check_fp8_request(quant, options));
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  RETURN_IF_ERROR(m->init(config, options));
  m->fp8_gemms_.assign(static_cast<size_t>(config.num_hidden_layers), {true, true, true, true});
  RETURN_IF_ERROR(m->plan_fp8());
  RETURN_IF_ERROR(m->plan_weights());
  RETURN_IF_ERROR(m->randomise(seed));
  // Codes: sign random, magnitude uniform over the E4M3 codes 0x20..0x4F (2^-4 .. 3.75, finite), weight scale
  // 0.015 (values of std ~0.02), input scale 8 / 448 (rms-normed activations of order 1 use the codes' range).
  const float w_scale = 0.015f, a_scale = 8.0f / 448.0f;
  std::map<std::pair<int64_t, int64_t>, std::vector<uint8_t>> codes;  // one random block per (width, k)
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 3;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    for (int g = 0; g < kGemms; ++g) {
      const std::vector<LinearShape> linears = gemm_linears(config, m->names_.model, g);
      Fp8Linear& out = m->layers_[static_cast<size_t>(l)].fp8[g];
      out.k = linears[0].k;
      for (const LinearShape& s : linears) out.width += s.n;
      std::vector<uint8_t>& block = codes[{out.width, out.k}];
      if (block.empty()) {
        block.resize(static_cast<size_t>(out.width * out.k));
        for (uint8_t& c : block) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;  // LCG: the top bits are random enough here
          const uint32_t r = static_cast<uint32_t>(x >> 33);
          c = static_cast<uint8_t>(((r & 1u) << 7) | (0x20 + (r >> 1) % 0x30));
        }
      }
      ASSIGN_OR_RETURN(void* dst, m->weights_.allocate(block.size()));
      CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, block.data(), block.size(), cudaMemcpyHostToDevice));
      out.codes = static_cast<const uint8_t*>(dst);
      ASSIGN_OR_RETURN(float* ws, m->weights_.allocate_array<float>(1));
      ASSIGN_OR_RETURN(float* as, m->weights_.allocate_array<float>(1));
      CUDA_RETURN_IF_ERROR(cudaMemcpy(ws, &w_scale, sizeof(float), cudaMemcpyHostToDevice));
      CUDA_RETURN_IF_ERROR(cudaMemcpy(as, &a_scale, sizeof(float), cudaMemcpyHostToDevice));
      int64_t offset = 0;
      for (const LinearShape& s : linears) {  // the same scales: one fused GEMM, as a checkpoint with shared scales
        Fp8Part part;
        part.offset = offset, part.n = s.n, part.w_scale = ws, part.a_scale = as;
        part.w_scale_host = w_scale, part.a_scale_host = a_scale;
        out.parts.push_back(part);
        offset += s.n;
      }
      out.fused = true;
    }
  }
  RETURN_IF_ERROR(m->plan_buffers());
  if (options.graphs) RETURN_IF_ERROR(m->capture_graphs());
  return m;
}

Status LlamaCudaModel::plan_fp8() {
  fp8_planned_bytes_ = 0;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    for (int g = 0; g < kGemms; ++g) {
      if (!fp8_gemm(l, static_cast<Gemm>(g))) continue;
      const std::vector<LinearShape> linears = gemm_linears(config_, names_.model, g);
      int64_t width = 0;
      for (const LinearShape& s : linears) width += s.n;
      fp8_planned_bytes_ += DeviceArena::aligned(static_cast<size_t>(width * linears[0].k)) +
                            linears.size() * 2 * DeviceArena::aligned(sizeof(float));
    }
  }
  return ok_status();
}

Status LlamaCudaModel::upload_fp8(const WeightStore& store, const QuantConfig& quant) {
  const LlamaConfig& c = config_;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = names_.model + "layers." + std::to_string(l) + ".";
    for (int g = 0; g < kGemms; ++g) {
      if (!fp8_gemm(l, static_cast<Gemm>(g))) continue;
      const std::vector<LinearShape> linears = gemm_linears(c, p, g);
      Fp8Linear& out = layers_[static_cast<size_t>(l)].fp8[g];
      out = Fp8Linear();
      out.k = linears[0].k;
      for (const LinearShape& s : linears) out.width += s.n;
      ASSIGN_OR_RETURN(void* codes, weights_.allocate(static_cast<size_t>(out.width * out.k)));
      out.codes = static_cast<const uint8_t*>(codes);
      int64_t offset = 0;
      for (size_t i = 0; i < linears.size(); ++i) {
        const LinearShape& s = linears[i];
        ASSIGN_OR_RETURN(const Fp8Weight w, read_fp8_linear(store, quant, s.prefix, s.n, s.k));
        ASSIGN_OR_RETURN(const Fp8InputQuant in, read_fp8_input(store, quant, s.prefix));
        if (w.block_n > 0 || w.scales.size() != 1 || in.scheme != Fp8InputScale::kStatic) {
          return unimplemented(s.prefix + ": not a per-tensor weight with a static input scale" +
                               std::string(kCpuServes));
        }
        if (i > 0 && w.format != out.format) {
          return unimplemented(s.prefix + ": its FP8 format differs from the rest of its fused GEMM's");
        }
        out.format = w.format;
        CUDA_RETURN_IF_ERROR(cudaMemcpy(static_cast<uint8_t*>(codes) + offset * out.k, w.codes.data(), w.codes.size(),
                                        cudaMemcpyHostToDevice));
        Fp8Part part;
        part.offset = offset, part.n = s.n;
        part.w_scale_host = w.scales[0], part.a_scale_host = in.scale;
        ASSIGN_OR_RETURN(float* ws, weights_.allocate_array<float>(1));
        ASSIGN_OR_RETURN(float* as, weights_.allocate_array<float>(1));
        CUDA_RETURN_IF_ERROR(cudaMemcpy(ws, &part.w_scale_host, sizeof(float), cudaMemcpyHostToDevice));
        CUDA_RETURN_IF_ERROR(cudaMemcpy(as, &part.a_scale_host, sizeof(float), cudaMemcpyHostToDevice));
        part.w_scale = ws, part.a_scale = as;
        out.parts.push_back(part);
        offset += s.n;
      }
      out.fused = std::all_of(out.parts.begin(), out.parts.end(), [&](const Fp8Part& q) {
        return q.w_scale_host == out.parts[0].w_scale_host && q.a_scale_host == out.parts[0].a_scale_host;
      });
    }
  }
  return ok_status();
}

int64_t LlamaCudaModel::fp8_input_k() const {
  int64_t k = 0;
  for (const Layer& layer : layers_) {
    for (const Fp8Linear& g : layer.fp8) {
      if (!g.parts.empty()) k = std::max(k, g.k);
    }
  }
  return k;
}

Status LlamaCudaModel::fp8_linear(const Fp8Linear& w, const void* x, void* y, bool f32_accumulate, const void* bias,
                                  int64_t m) {
  cudaStream_t s = stream_.get();
  const DType out_dtype = f32_accumulate ? DType::kF32 : options_.dtype;
  const size_t e = dtype_size(out_dtype);
  kernels::Fp8QuantizeCudaArgs q;
  q.x = x, q.dtype = options_.dtype, q.rows = m, q.cols = w.k, q.ld_x = w.k, q.format = kernels::Fp8Format::kE4M3;
  q.q = fp8_input_, q.ld_q = w.k;
  const size_t runs = w.fused ? 1 : w.parts.size();
  const float* quantized_with = nullptr;  // the input scale fp8_input_ holds (same stream: the GEMM before read it)
  for (size_t i = 0; i < runs; ++i) {
    const Fp8Part& p = w.parts[i];
    if (quantized_with == nullptr || *quantized_with != p.a_scale_host) {
      RETURN_IF_ERROR(kernels::fp8_quantize_cuda(q, p.a_scale, s));
      quantized_with = &p.a_scale_host;
    }
    kernels::Fp8GemmCudaArgs g;
    g.m = m, g.n = w.fused ? w.width : p.n, g.k = w.k;
    g.a = fp8_input_, g.lda = w.k, g.a_format = kernels::Fp8Format::kE4M3;
    g.w = w.codes + p.offset * w.k, g.ldw = w.k, g.w_format = w.format;
    g.scale_mode = kernels::Fp8ScaleMode::kTensor, g.a_scale = p.a_scale, g.w_scale = p.w_scale;
    g.d = static_cast<uint8_t*>(y) + static_cast<size_t>(p.offset) * e, g.ldd = w.width, g.out_dtype = out_dtype;
    g.bias = bias != nullptr ? static_cast<const uint8_t*>(bias) + static_cast<size_t>(p.offset) * e : nullptr;
    g.accumulate = f32_accumulate;
    RETURN_IF_ERROR(gemm_->run_fp8(g, s));
  }
  return ok_status();
}

}  // namespace mmserve::models
