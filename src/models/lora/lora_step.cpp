// A decoder step's LoRA deltas on the CPU (see lora_step.h).
#include "models/lora/lora_step.h"

#include <vector>

#include "kernels/lora/lora.h"

namespace mmserve::models {

void add_lora_deltas(const DecoderStep& step, const int32_t* seg_start, const LoraModuleOf& module_of, const float* in,
                     int64_t in_ld, float* out, int64_t out_ld) {
  const int64_t seqs = step.num_seqs();
  std::vector<kernels::LoraSegmentWeights> segments(static_cast<size_t>(seqs));
  for (int which = 0; which < 2; ++which) {
    const std::vector<const LoraAdapter*>& adapters = which == 0 ? step.loras : step.loras_second;
    if (adapters.empty()) continue;
    const LoraModule* first = nullptr;  // the linear's shape (every adapter's is the model's)
    for (int64_t s = 0; s < seqs; ++s) {
      const LoraModule* m = adapters[s] != nullptr ? module_of(*adapters[s]) : nullptr;
      const float weight = step.lora_weights.empty() ? (which == 0 ? 1.0f : 0.0f) : step.lora_weights[2 * s + which];
      segments[s] = m != nullptr && m->present()
                        ? kernels::LoraSegmentWeights{m->a.data(), m->b.data(), m->rank, m->scale * weight}
                        : kernels::LoraSegmentWeights{};
      if (first == nullptr && segments[s].rank > 0) first = m;
    }
    if (first == nullptr) continue;
    kernels::lora_sgmv(in, in_ld, seg_start, seqs, segments.data(), first->in, first->out, out, out_ld);
  }
}

}  // namespace mmserve::models
