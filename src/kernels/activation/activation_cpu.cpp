// Activations on CPU: the scalar reference formulas, the element-wise op and the fused GEMM epilogue.
//
// activation_scalar() is the readable definition (libm exp/erf/tanh, as PyTorch writes it). The loops use
// the branch-free exp of common/cpu_math.h for quick_gelu and gelu_tanh so that they vectorise; exact GELU
// keeps std::erf as PyTorch does (a scalar libm call, so that variant runs unvectorised). activation()
// splits the flat array over OpenMP threads; the epilogue is serial because linear() runs it inside its
// own parallel region, on each thread's block of y.
// Tests: activation_test.cpp (each activation vs its formula in double, in place, HF names) and
// gemm_test.cpp (epilogues); bench: activation_bench.cpp.
#include <algorithm>
#include <cmath>

#include "kernels/activation/activation.h"
#include "kernels/activation/epilogue.h"
#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"

namespace mmserve::kernels {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;

inline float quick_gelu_fast(float v) {
  return v * cpu::sigmoid_f32(1.702f * v);
}
inline float gelu_tanh_fast(float v) {
  return 0.5f * v * (1.0f + cpu::tanh_f32(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}
inline float gelu_erf(float v) {
  return 0.5f * v * (1.0f + std::erf(v * kSqrtHalf));
}

// y[j] = f(x[j] + bias[j]) (bias may be null); inlined into each case below so that every activation
// gets its own vector loop instead of a per-element dispatch.
template <typename F>
inline void map_span(const float* x, const float* bias, float* y, int64_t n, F f) {
  // NOLINTNEXTLINE(bugprone-branch-clone): false positive, the check does not compare omp simd loop bodies
  if (bias) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = f(x[j] + bias[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = f(x[j]);
  }
}

// y = act(x + bias) over one contiguous span; bias may be null; y may alias x.
MMSERVE_CPU_CLONES
void activation_span(const float* x, const float* bias, float* y, int64_t n, Activation act) {
  switch (act) {
    case Activation::kNone:
      if (bias != nullptr || x != y) map_span(x, bias, y, n, [](float v) { return v; });
      return;
    case Activation::kQuickGelu: map_span(x, bias, y, n, quick_gelu_fast); return;
    case Activation::kGeluTanh: map_span(x, bias, y, n, gelu_tanh_fast); return;
    case Activation::kGelu:  // libm erf is a scalar call: this loop does not vectorise
      for (int64_t j = 0; j < n; ++j) y[j] = gelu_erf(bias ? x[j] + bias[j] : x[j]);
      return;
  }
}

}  // namespace

std::optional<Activation> activation_from_hf_name(std::string_view name) {
  if (name == "quick_gelu") return Activation::kQuickGelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::kGeluTanh;
  return std::nullopt;
}

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kNone: return "none";
    case Activation::kQuickGelu: return "quick_gelu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "unknown";
}

float activation_scalar(float x, Activation act) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kQuickGelu: return x * (1.0f / (1.0f + std::exp(-1.702f * x)));
    case Activation::kGelu: return gelu_erf(x);
    case Activation::kGeluTanh: return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
  return x;
}

void activation(const Tensor& x, Tensor& y, Activation act) {
  MMSERVE_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "activation: f32 only");
  MMSERVE_CHECK(x.is_contiguous() && y.is_contiguous(), "activation: contiguous tensors only");
  MMSERVE_CHECK(x.numel() == y.numel(), "activation: x and y differ in size");
  const int64_t n = x.numel();
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const float* src = x.data_as<float>();
  float* dst = y.data_as<float>();
#pragma omp parallel for schedule(static) num_threads(parallel_threads(n))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    activation_span(src + begin, nullptr, dst + begin, std::min(kChunk, n - begin), act);
  }
}

void bias_activation_rows(float* y, int64_t rows, int64_t cols, int64_t ldy, const float* bias, Activation act) {
  if (bias == nullptr && act == Activation::kNone) return;
  for (int64_t i = 0; i < rows; ++i) activation_span(y + i * ldy, bias, y + i * ldy, cols, act);
}

}  // namespace mmserve::kernels
