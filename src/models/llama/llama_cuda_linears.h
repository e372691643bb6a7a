// The checkpoint linears behind each of a LlamaCudaModel layer's four GEMMs (0: fused q/k/v, 1: o, 2: fused gate/up,
// 3: down), in the fused row's order: what the quantised weight paths (llama_cuda_quant.cpp for W4A16,
// llama_cuda_fp8.cpp for FP8) read, check and pack per GEMM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/llama/llama.h"

namespace mmserve::models {

struct LinearShape {
  std::string prefix;  // "model.layers.0.self_attn.q_proj"
  int64_t n = 0, k = 0;
};

// The linears of GEMM `g` of the layer whose tensor names start with `p` ("model.layers.0.").
inline std::vector<LinearShape> gemm_linears(const LlamaConfig& c, const std::string& p, int g) {
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  switch (g) {
    case 0: return {{p + "self_attn.q_proj", q, h}, {p + "self_attn.k_proj", kv, h}, {p + "self_attn.v_proj", kv, h}};
    case 1: return {{p + "self_attn.o_proj", h, q}};
    case 2: return {{p + "mlp.gate_proj", i, h}, {p + "mlp.up_proj", i, h}};
    default: return {{p + "mlp.down_proj", h, i}};
  }
}

}  // namespace mmserve::models
