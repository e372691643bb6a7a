// FP8 checkpoint tensors and input quantisation (see fp8_checkpoint.h).
#include "models/quant/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/dtype.h"

namespace mmserve::models {
namespace {

using kernels::Fp8Format;

// A scale tensor's values (f32, bf16 or f16) if its shape is one of `shapes`, each positive and finite.
StatusOr<std::vector<float>> read_scales(const WeightStore& store, const std::string& name,
                                         const std::vector<std::vector<int64_t>>& shapes, const std::string& why) {
  const TensorInfo* t = store.find(name);
  if (t == nullptr) return invalid_argument(name + ": missing (" + why + ")");
  if (std::find(shapes.begin(), shapes.end(), t->shape) == shapes.end()) {
    std::string expected;
    for (const auto& s : shapes) expected += (expected.empty() ? "" : " or ") + shape_to_string(s);
    return invalid_argument(name + ": shape " + shape_to_string(t->shape) + ", expected " + expected);
  }
  std::vector<float> out(static_cast<size_t>(t->numel()));
  if (!convert_to_f32(t->dtype, t->data, out.data(), t->numel())) {
    return invalid_argument(name + ": dtype " + std::string(dtype_name(t->dtype)) + ", expected f32, bf16 or f16");
  }
  for (float s : out) {
    if (!(s > 0.0f) || !std::isfinite(s)) {
      return invalid_argument(name + ": a scale of " + std::to_string(s) + " (scales must be positive and finite)");
    }
  }
  return out;
}

}  // namespace

std::vector<float> dequantize_fp8(const Fp8Weight& w) {
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = kernels::fp8_decode(static_cast<uint8_t>(c), w.format);
  std::vector<float> out(w.codes.size());
  if (w.block_n > 0) {
    const int64_t cols = (w.k + w.block_k - 1) / w.block_k;
    for (int64_t r = 0; r < w.n; ++r) {
      const float* s = w.scales.data() + (r / w.block_n) * cols;
      for (int64_t c = 0; c < w.k; ++c) out[r * w.k + c] = table[w.codes[r * w.k + c]] * s[c / w.block_k];
    }
    return out;
  }
  const bool per_row = w.scales.size() > 1;
  for (int64_t r = 0; r < w.n; ++r) {
    const float s = w.scales[per_row ? r : 0];
    for (int64_t c = 0; c < w.k; ++c) out[r * w.k + c] = table[w.codes[r * w.k + c]] * s;
  }
  return out;
}

Fp8Weight quantize_fp8_weight(const float* w, int64_t n, int64_t k, Fp8WeightScale strategy) {
  Fp8Weight q;
  q.n = n, q.k = k;
  q.codes.resize(static_cast<size_t>(n * k));
  if (strategy == Fp8WeightScale::kChannel) {
    q.scales.resize(static_cast<size_t>(n));
    kernels::fp8_quantize_rows(w, n, k, k, Fp8Format::kE4M3, q.codes.data(), k, q.scales.data());
    return q;
  }
  float amax = 0.0f;
  for (int64_t i = 0; i < n * k; ++i) amax = std::max(amax, std::fabs(w[i]));
  q.scales = {kernels::fp8_scale_for_amax(amax, Fp8Format::kE4M3)};
  kernels::fp8_quantize(w, n * k, q.scales[0], Fp8Format::kE4M3, q.codes.data());
  return q;
}

void fp8_fake_quantize_input(const Fp8InputQuant& q, const float* x, int64_t rows, int64_t cols, float* out) {
  const int64_t count = rows * cols;
  if (q.scheme == Fp8InputScale::kNone) {
    std::copy(x, x + count, out);
    return;
  }
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  std::vector<float> scales(static_cast<size_t>(rows), q.scale);
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = kernels::fp8_decode(static_cast<uint8_t>(c), Fp8Format::kE4M3);
  if (q.scheme == Fp8InputScale::kDynamicGroup) {  // each row's groups of q.group columns (the last may be short)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += q.group) {
        const int64_t width = std::min(q.group, cols - c0);
        float s = 0.0f;
        kernels::fp8_quantize_rows(x + r * cols + c0, 1, width, width, Fp8Format::kE4M3, codes.data() + r * cols + c0,
                                   width, &s);
        for (int64_t c = c0; c < c0 + width; ++c) out[r * cols + c] = table[codes[r * cols + c]] * s;
      }
    }
    return;
  }
  if (q.scheme == Fp8InputScale::kDynamicToken) {
    kernels::fp8_quantize_rows(x, rows, cols, cols, Fp8Format::kE4M3, codes.data(), cols, scales.data());
  } else {
    float s = q.scale;
    if (q.scheme == Fp8InputScale::kDynamicTensor) {
      float amax = 0.0f;
      for (int64_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(x[i]));
      s = kernels::fp8_scale_for_amax(amax, Fp8Format::kE4M3);
      std::fill(scales.begin(), scales.end(), s);
    }
    kernels::fp8_quantize(x, count, s, Fp8Format::kE4M3, codes.data());
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = table[codes[r * cols + c]] * scales[r];
  }
}

LinearInputTransforms fp8_input_transforms(const Fp8Inputs& inputs) {
  LinearInputTransforms out;
  for (const auto& entry : inputs) {
    const Fp8InputQuant q = entry.second;  // by value: the hook outlives `inputs`
    if (q.scheme == Fp8InputScale::kNone) continue;
    out[entry.first] = [q](const float* x, int64_t rows, int64_t cols, float* y) {
      fp8_fake_quantize_input(q, x, rows, cols, y);
    };
  }
  return out;
}

StatusOr<Fp8Weight> read_fp8_linear(const WeightStore& store, const QuantConfig& config, const std::string& prefix,
                                    int64_t n, int64_t k) {
  const std::string name = prefix + ".weight";
  const TensorInfo* t = store.find(name);
  if (t == nullptr) return invalid_argument(name + ": missing");
  if (t->dtype != DType::kF8E4M3 && t->dtype != DType::kF8E5M2) {
    return invalid_argument(name + ": dtype " + std::string(dtype_name(t->dtype)) +
                            ", expected f8e4m3 (the checkpoint's quantization_config makes this linear FP8)");
  }
  if (t->shape != std::vector<int64_t>{n, k}) {
    return invalid_argument(name + ": shape " + shape_to_string(t->shape) + ", expected " + shape_to_string({n, k}));
  }
  Fp8Weight w;
  w.n = n, w.k = k;
  w.format = t->dtype == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  w.codes.assign(t->data, t->data + n * k);
  if (config.fp8_weights == Fp8WeightScale::kBlock) {
    w.block_n = config.fp8_block[0], w.block_k = config.fp8_block[1];
    const std::vector<int64_t> shape = {(n + w.block_n - 1) / w.block_n, (k + w.block_k - 1) / w.block_k};
    // transformers / DeepSeek name it weight_scale_inv, compressed-tensors weight_scale.
    const std::string scale_name = prefix + (config.compressed_tensors ? ".weight_scale" : ".weight_scale_inv");
    ASSIGN_OR_RETURN(w.scales, read_scales(store, scale_name, {shape},
                                           "block-wise scales, one per " + std::to_string(w.block_n) + " x " +
                                               std::to_string(w.block_k) + " block"));
  }
  const bool channel = config.fp8_weights == Fp8WeightScale::kChannel;
  const std::vector<std::vector<int64_t>> shapes =
      channel ? std::vector<std::vector<int64_t>>{{n, 1}, {n}} : std::vector<std::vector<int64_t>>{{}, {1}};
  if (config.fp8_weights != Fp8WeightScale::kBlock) {
    ASSIGN_OR_RETURN(w.scales, read_scales(store, prefix + ".weight_scale", shapes,
                                           channel ? "per-channel weight scales" : "a per-tensor weight scale"));
  }
  for (uint8_t code : w.codes) {
    const bool nan = w.format == Fp8Format::kE4M3 ? (code & 0x7F) == 0x7F : (code & 0x7C) == 0x7C;
    if (nan) return invalid_argument(name + ": holds a NaN or infinite code");
  }
  return w;
}

StatusOr<Fp8InputQuant> read_fp8_input(const WeightStore& store, const QuantConfig& config, const std::string& prefix) {
  Fp8InputQuant q;
  q.scheme = config.fp8_inputs;
  if (q.scheme == Fp8InputScale::kDynamicGroup) q.group = config.fp8_input_group;
  if (q.scheme != Fp8InputScale::kStatic) return q;
  ASSIGN_OR_RETURN(const std::vector<float> s,
                   read_scales(store, prefix + ".input_scale", {{}, {1}}, "static input scales: one per linear"));
  q.scale = s[0];
  return q;
}

std::vector<TensorToWrite> fp8_tensors(const std::string& prefix, const Fp8Weight& w, const Fp8InputQuant& q) {
  std::vector<TensorToWrite> out = {
      {prefix + ".weight", w.format == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2, {w.n, w.k}, w.codes.data()}};
  if (w.block_n > 0) {
    out.push_back({prefix + ".weight_scale_inv",
                   DType::kF32,
                   {(w.n + w.block_n - 1) / w.block_n, (w.k + w.block_k - 1) / w.block_k},
                   w.scales.data()});
  } else if (w.scales.size() > 1) {
    out.push_back({prefix + ".weight_scale", DType::kF32, {w.n, 1}, w.scales.data()});
  } else {
    out.push_back({prefix + ".weight_scale", DType::kF32, {1}, w.scales.data()});
  }
  if (q.scheme == Fp8InputScale::kStatic) out.push_back({prefix + ".input_scale", DType::kF32, {1}, &q.scale});
  return out;
}

}  // namespace mmserve::models
