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
//
// Training (the online distillation, gate_distill.h): kl_divergence() is torch's
// kl_div(log_softmax(z), t, reduction="batchmean") over a batch with its gradient by hand (f32), sgd_step() plain SGD,
// save() the same two files back (f32). A GateHead is a value: copying it is the distiller's snapshot and rollback.
// Tests: tests/unit/models/gate_head_test.cpp (a PyTorch reference of the same MLP:
// tools/reference/make_gate_fixtures.py), tests/unit/models/gate_distill_test.cpp (the gradient by finite differences,
// one step against torch's).
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

// dL/d(every parameter) of a batch, laid out as the head's tensors.
struct GateGradient {
  std::vector<float> w1, b1, w2, b2;
  double norm() const;  // the L2 norm over all four
  void scale(float factor);
};

class GateHead {
 public:
  // `path`: gate.safetensors; its gate.json next to it. kInvalidArgument naming the tensor or key for shapes that
  // disagree (D, H, N), a names list of another length, non-string names.
  static StatusOr<GateHead> load(const std::string& path);
  // From tensors in PyTorch's layout (w1 [H, D], w2 [N, H]); kInvalidArgument when the sizes disagree.
  static StatusOr<GateHead> from_weights(int64_t d, int64_t h, std::vector<float> w1, std::vector<float> b1,
                                         std::vector<float> w2, std::vector<float> b2, std::vector<std::string> names);
  // Writes `path` (gate.safetensors, f32, the names load() reads) and gate.json beside it, each written beside
  // itself and renamed (a crash never leaves half a file); kFailedPrecondition when the directory is not writable.
  Status save(const std::string& path) const;
  int64_t input_dim() const { return d_; }
  int64_t hidden_dim() const { return h_; }
  const std::vector<std::string>& adapters() const { return names_; }
  const std::vector<float>& w1() const { return w1_; }
  const std::vector<float>& b1() const { return b1_; }
  const std::vector<float>& w2() const { return w2_; }
  const std::vector<float>& b2() const { return b2_; }
  // z = W2 relu(W1 e + b1) + b2, f32 [N]; kInvalidArgument when e's size is not input_dim().
  StatusOr<std::vector<float>> logits(const std::vector<float>& e) const;
  // kInvalidArgument when e's size is not input_dim() or k is outside 1..N.
  StatusOr<GateChoice> route(const std::vector<float>& e, int64_t k = 2) const;
  // The same from the first layer's output computed elsewhere (W1 e + b1 before the ReLU, [H]: a GPU model's
  // LlamaCudaModel::gate_first_layer, where the embedding table is): ReLU, W2, softmax, top-k.
  StatusOr<GateChoice> route_from_hidden(std::vector<float> hidden, int64_t k = 2) const;
  // KL(t || softmax(z)) over a batch: e [batch, D] row-major, t [batch, N] (each row a distribution), as torch's
  // F.kl_div(log_softmax(z), t, reduction="batchmean"): (1/batch) sum_b sum_j t_bj (log t_bj - log p_bj), a zero
  // t_bj contributing 0. With `grad` (resized here): its gradient, by hand through Linear-ReLU-Linear, where
  // dL/dz_b = (p_b * sum_j t_bj - t_b) / batch (log_softmax's backward: p_b - t_b for a normalised row) and ReLU's
  // derivative is 0 at 0 (torch's). Loss in f64, gradients in f32. kInvalidArgument for batch < 1.
  StatusOr<double> kl_divergence(const float* e, const float* t, int64_t batch, GateGradient* grad = nullptr) const;
  // Plain SGD (torch.optim.SGD without momentum or decay): every parameter -= lr * its gradient.
  void sgd_step(const GateGradient& grad, float lr);

 private:
  // hidden [H]: W1 e + b1 before the ReLU; z [N]: the logits.
  void forward(const float* e, float* hidden, float* z) const;
  void second_layer(const float* hidden, float* z) const;  // z = W2 relu(hidden) + b2
  GateChoice choose(std::vector<float> z, int64_t k) const;  // softmax, top-k renormalised
  int64_t d_ = 0, h_ = 0, n_ = 0;
  std::vector<float> w1_, b1_, w2_, b2_;
  std::vector<std::string> names_;
};

}  // namespace mmserve::models
