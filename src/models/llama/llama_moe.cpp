// LlamaModel's Mixtral sparse MLP on the CPU (see llama.h; modeling_mixtral.py's MixtralSparseMoeBlock), with the
// LoRA deltas of adapters on the experts (issue 16: PEFT's target_parameters, models/lora/lora_adapter.h).
// Tests: tests/conformance/mixtral_hf_test.cpp (HF's logits), tests/unit/models/lora_experts_test.cpp (adapters
// against merged checkpoints), tests/conformance/lora_hf_test.cpp (PEFT's).
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/moe.h"
#include "kernels/swiglu/swiglu.h"
#include "models/llama/llama.h"
#include "models/lora/lora_step.h"

namespace mmserve::models {

// Route, group the (token, expert) pairs by expert, run each expert's w2(silu(w1 x) * w3 x) over its rows, and add the
// weighted sum to x (the residual). ids/weights [n, k] receive the routing. Under adapters, each row's adapter's
// delta for the expert is added after the gate/up GEMMs (before the activation: PEFT merges it into the weight) and
// after the down GEMM; the gate's and up's outputs share one [rows, 2I] buffer, as gate_up_proj's delta covers both.
void LlamaModel::moe_mlp(const Layer& w, int64_t layer, const DecoderStep& step, bool lora, const float* normed,
                         float* x, int32_t* ids, float* weights) const {
  const LlamaConfig& c = config_;
  const int64_t n = step.num_tokens(), h = c.hidden_size, i = c.intermediate_size, e_count = c.num_experts,
                k = c.experts_per_token, seqs = step.num_seqs();
  std::vector<float> router(static_cast<size_t>(n * e_count));
  Tensor in(const_cast<float*>(normed), DType::kF32, {n, h});
  Tensor router_t(router.data(), DType::kF32, {n, e_count});
  kernels::linear(in, w.router, nullptr, router_t);
  kernels::moe_route(router.data(), e_count, n, e_count, k, ids, weights);
  const kernels::MoePlan plan = kernels::moe_plan(ids, n, e_count, k);
  std::vector<float> xp(static_cast<size_t>(n * k * h)), gate_up(static_cast<size_t>(n * k * 2 * i)), yp(xp.size()),
      out(static_cast<size_t>(n * h));
  std::vector<int32_t> seg_start(static_cast<size_t>(seqs + 1));
  kernels::moe_permute(normed, h, plan, h, xp.data(), h);
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t first = plan.offsets[e], rows = plan.rows(e);
    if (rows == 0) continue;
    float* g = gate_up.data() + first * 2 * i;  // [rows, 2I]: the gate's columns, then the up's
    Tensor xe(xp.data() + first * h, DType::kF32, {rows, h}), ye(yp.data() + first * h, DType::kF32, {rows, h});
    Tensor gu(g, DType::kF32, {rows, 2 * i});
    Tensor ge = gu.slice_cols(0, i), ue = gu.slice_cols(i, 2 * i);
    if (lora) {
      // Sequence s's rows among the expert's: the plan keeps tokens ascending within an expert, and a sequence's
      // tokens are the step's rows [query_start[s], query_start[s + 1]).
      int64_t r = 0;
      for (int64_t s = 0; s <= seqs; ++s) {
        while (r < rows && plan.pair[first + r] / k < step.query_start[s]) ++r;
        seg_start[s] = static_cast<int32_t>(s == seqs ? rows : r);
      }
    }
    auto expert_lora = [&](LoraExpertParam p, const float* from, int64_t from_ld, float* to, int64_t to_ld) {
      if (!lora) return;
      add_lora_deltas(
          step, seg_start.data(), [&](const LoraAdapter& a) { return a.expert_module(layer, p, e); }, from, from_ld, to,
          to_ld);
    };
    kernels::linear(xe, w.w1[e], nullptr, ge);
    kernels::linear(xe, w.w3[e], nullptr, ue);
    expert_lora(LoraExpertParam::kGateUp, xe.data_as<float>(), h, g, 2 * i);
    kernels::swiglu(g, g + i, 2 * i, rows, i, g, 2 * i);
    kernels::linear(ge, w.w2[e], nullptr, ye);
    expert_lora(LoraExpertParam::kDown, g, 2 * i, ye.data_as<float>(), h);
  }
  kernels::moe_combine(yp.data(), h, plan, ids, weights, h, out.data(), h);
  Tensor xt(x, DType::kF32, {n, h}), out_t(out.data(), DType::kF32, {n, h});
  kernels::add(xt, out_t, xt);
}

}  // namespace mmserve::models
