// The adapter router (issue 16 item 4, SPEC 4.2): a small MLP over a request's fused multimodal embedding that picks
// the LoRA adapters to apply to it.
//
// Files: gate.safetensors holds PyTorch's nn.Sequential(Linear(D, H), ReLU(), Linear(H, N)) state dict,
// `gate.0.weight` [H, D], `gate.0.bias` [H], `gate.2.weight` [N, H], `gate.2.bias` [N] (H = 256 as the issue
// specifies, any H read), f32/f16/bf16; gate.json beside it names the N adapters in output order:
// {"adapters": ["sql", "chat", ...]}.
//
// The embedding e (D = the decoder's hidden size): the mean over the prompt's positions of the decoder's input
// embeddings, i.e. each text token's embed_tokens row and, for a LLaVA, each image placeholder's projected image
// feature row (the rows the decoder's first layer reads), in f32 (docs/lora.md).
//
// route(e): p = softmax(W2 relu(W1 e + b1) + b2) in f32; the top k (2; ties to the lower index), their probabilities
// renormalised to sum to 1: the adapters' weights, applied together (y += sum_i w_i * delta_i).
// Tests: tests/unit/models/gate_head_test.cpp (a PyTorch reference of the same MLP: tools/reference/make_gate_fixtures.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::models {

struct GateChoice {
  std::vector<int64_t> index;  // into adapters(), by descending weight
  std::vector<float> weight;   // renormalised, summing to 1
  std::vector<float> probs;    // the softmax over every adapter
};

class GateHead {
 public:
  // `path`: gate.safetensors; its gate.json next to it. kInvalidArgument naming the tensor or key for shapes that
  // disagree (D, H, N), a names list of another length, non-string names.
  static StatusOr<GateHead> load(const std::string& path);
  int64_t input_dim() const { return d_; }
  const std::vector<std::string>& adapters() const { return names_; }
  // kInvalidArgument when e's size is not input_dim() or k is outside 1..N.
  StatusOr<GateChoice> route(const std::vector<float>& e, int64_t k = 2) const;

 private:
  int64_t d_ = 0, h_ = 0, n_ = 0;
  std::vector<float> w1_, b1_, w2_, b2_;
  std::vector<std::string> names_;
};

}  // namespace mmserve::models
