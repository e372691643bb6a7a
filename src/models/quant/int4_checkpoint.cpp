// AWQ GEMM and GPTQ v1/v2 packing and unpacking (see int4_checkpoint.h for the layouts and their sources).
#include "models/quant/int4_checkpoint.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace mmserve::models {
namespace {

constexpr int kPack = 8;  // 4-bit values in an int32
// AutoAWQ's order_map: nibble i of a packed word holds column 8c + kAwqOrder[i] ...
constexpr int kAwqOrder[kPack] = {0, 2, 4, 6, 1, 3, 5, 7};
// ... so column 8c + j is nibble kAwqReverse[j] (packing_utils.py's AWQ_REVERSE_ORDER).
constexpr int kAwqReverse[kPack] = {0, 4, 1, 5, 2, 6, 3, 7};

bool is_gptq(const QuantConfig& c) { return c.method == QuantMethod::kGptq; }

// The tensor `name`, checked for one of two dtypes and an exact shape.
StatusOr<const TensorInfo*> find_tensor(const WeightStore& store, const std::string& name, DType dtype, DType also,
                                        const std::vector<int64_t>& shape) {
  const TensorInfo* t = store.find(name);
  if (t == nullptr) return invalid_argument(name + ": missing (a quantised linear stores qweight, qzeros and scales)");
  if (t->dtype != dtype && t->dtype != also) {
    return invalid_argument(name + ": dtype " + dtype_name(t->dtype) + ", expected " + dtype_name(dtype));
  }
  if (t->shape != shape) {
    return invalid_argument(name + ": shape " + shape_to_string(t->shape) + ", expected " + shape_to_string(shape));
  }
  return t;
}

std::vector<uint32_t> words_of(const TensorInfo& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data, out.size() * sizeof(uint32_t));
  return out;
}

uint8_t nibble(uint32_t word, int i) { return static_cast<uint8_t>((word >> (4 * i)) & 0xFu); }

// scales [groups, n] (f16 or bf16) into Int4Weight's [n, groups] f32.
void read_scales(const TensorInfo& t, int64_t n, int64_t groups, std::vector<float>& out) {
  std::vector<float> stored(static_cast<size_t>(groups * n));
  convert_to_f32(t.dtype, t.data, stored.data(), groups * n);
  out.assign(stored.size(), 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n; ++c) out[c * groups + g] = stored[g * n + c];
  }
}

std::vector<uint16_t> f16_scales(const Int4Weight& w) {  // [groups, n] f16 bits
  const int64_t groups = w.groups();
  std::vector<uint16_t> out(static_cast<size_t>(groups * w.n));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < w.n; ++c) out[g * w.n + c] = f32_to_f16(w.scales[c * groups + g]);
  }
  return out;
}

}  // namespace

Status check_int4_dims(const QuantConfig& config, const std::string& prefix, int64_t n, int64_t k) {
  const int64_t g = config.group_size_for(k);
  if (n % kPack != 0) {
    return invalid_argument(prefix + ": out_features " + std::to_string(n) + " is not a multiple of 8 (packed int32)");
  }
  if (is_gptq(config) && k % kPack != 0) {
    return invalid_argument(prefix + ": in_features " + std::to_string(k) + " is not a multiple of 8 (packed int32)");
  }
  if (g <= 0 || k % g != 0) {
    return invalid_argument(prefix + ": group_size " + std::to_string(g) + " does not divide in_features " +
                            std::to_string(k));
  }
  return ok_status();
}

std::vector<WeightSpec> int4_weight_specs(const QuantConfig& config, const std::string& prefix, int64_t n, int64_t k) {
  const int64_t groups = k / config.group_size_for(k);
  std::vector<WeightSpec> specs;
  if (is_gptq(config)) {
    specs.push_back({prefix + ".qweight", {k / kPack, n}});
  } else {
    specs.push_back({prefix + ".qweight", {k, n / kPack}});
  }
  specs.push_back({prefix + ".qzeros", {groups, n / kPack}});
  specs.push_back({prefix + ".scales", {groups, n}});
  // GPTQ-for-LLaMa's files from before act-order carry no g_idx; AutoGPTQ always writes it.
  if (is_gptq(config)) specs.push_back({prefix + ".g_idx", {k}, /*optional=*/!config.desc_act});
  return specs;
}

StatusOr<Int4Weight> read_int4_linear(const WeightStore& store, const QuantConfig& config, const std::string& prefix,
                                      int64_t n, int64_t k) {
  RETURN_IF_ERROR(check_int4_dims(config, prefix, n, k));
  Int4Weight w;
  w.n = n, w.k = k, w.group_size = config.group_size_for(k);
  const int64_t groups = w.groups();
  const bool gptq = is_gptq(config);
  const std::vector<WeightSpec> specs = int4_weight_specs(config, prefix, n, k);
  ASSIGN_OR_RETURN(const TensorInfo* qweight, find_tensor(store, specs[0].name, DType::kI32, DType::kI32, specs[0].shape));
  ASSIGN_OR_RETURN(const TensorInfo* qzeros, find_tensor(store, specs[1].name, DType::kI32, DType::kI32, specs[1].shape));
  ASSIGN_OR_RETURN(const TensorInfo* scales, find_tensor(store, specs[2].name, DType::kF16, DType::kBF16, specs[2].shape));
  read_scales(*scales, n, groups, w.scales);
  for (float s : w.scales) {
    if (!std::isfinite(s)) return invalid_argument(specs[2].name + ": a scale that is not finite");
  }

  const std::vector<uint32_t> qw = words_of(*qweight), qz = words_of(*qzeros);
  w.q.resize(static_cast<size_t>(n * k));
  w.zeros.resize(static_cast<size_t>(n * groups));
  if (!gptq) {  // AWQ: both packed along N in AWQ's order
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t c = 0; c < n; ++c) {
        w.q[c * k + kk] = nibble(qw[kk * (n / kPack) + c / kPack], kAwqReverse[c % kPack]);
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t c = 0; c < n; ++c) {
        w.zeros[c * groups + g] = nibble(qz[g * (n / kPack) + c / kPack], kAwqReverse[c % kPack]);
      }
    }
    return w;
  }
  // GPTQ: qweight packed along K (nibble i = input row 8r + i), qzeros along N in plain order.
  for (int64_t r = 0; r < k / kPack; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const uint32_t word = qw[r * n + c];
      for (int i = 0; i < kPack; ++i) w.q[c * k + r * kPack + i] = nibble(word, i);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n; ++c) {
      uint8_t z = nibble(qz[g * (n / kPack) + c / kPack], static_cast<int>(c % kPack));
      if (!config.gptq_v2) {
        if (z == 15) {
          return invalid_argument(specs[1].name + ": stored zero 15 at group " + std::to_string(g) + ", column " +
                                  std::to_string(c) + " means 16 in GPTQ v1 (zero - 1 is stored), outside 0..15 (what "
                                  "packing a zero of 0 as v1 leaves)");
        }
        z = static_cast<uint8_t>(z + 1);
      }
      w.zeros[c * groups + g] = z;
    }
  }
  if (!config.desc_act && store.find(specs[3].name) == nullptr) return w;  // no g_idx: k / group_size
  ASSIGN_OR_RETURN(const TensorInfo* g_idx, find_tensor(store, specs[3].name, DType::kI32, DType::kI32, specs[3].shape));
  std::vector<int32_t> idx(static_cast<size_t>(k));
  std::memcpy(idx.data(), g_idx->data, idx.size() * sizeof(int32_t));
  bool trivial = true;
  for (int64_t kk = 0; kk < k; ++kk) {
    if (idx[kk] < 0 || idx[kk] >= groups) {
      return invalid_argument(specs[3].name + ": g_idx[" + std::to_string(kk) + "] = " + std::to_string(idx[kk]) +
                              " is outside the " + std::to_string(groups) + " groups");
    }
    trivial = trivial && idx[kk] == kk / w.group_size;
  }
  if (!trivial) w.g_idx = std::move(idx);
  return w;
}

Status check_int4_weight(const Int4Weight& w, const std::string& label) {
  if (w.n <= 0 || w.k <= 0 || w.group_size <= 0 || w.k % w.group_size != 0) {
    return invalid_argument(label + ": sizes n " + std::to_string(w.n) + ", k " + std::to_string(w.k) +
                            ", group_size " + std::to_string(w.group_size) + " (the group size must divide k)");
  }
  const size_t nk = static_cast<size_t>(w.n * w.k), ng = static_cast<size_t>(w.n * w.groups());
  if (w.q.size() != nk || w.scales.size() != ng || w.zeros.size() != ng ||
      (!w.g_idx.empty() && w.g_idx.size() != static_cast<size_t>(w.k))) {
    return invalid_argument(label + ": q, scales, zeros or g_idx disagree with n, k and group_size");
  }
  for (uint8_t v : w.q) {
    if (v > 15) return invalid_argument(label + ": a q value above 15");
  }
  for (uint8_t v : w.zeros) {
    if (v > 15) return invalid_argument(label + ": a zero above 15");
  }
  for (int32_t g : w.g_idx) {
    if (g < 0 || g >= w.groups()) return invalid_argument(label + ": a g_idx value outside the groups");
  }
  for (float s : w.scales) {
    if (!std::isfinite(s)) return invalid_argument(label + ": a scale that is not finite");
  }
  return ok_status();
}

StatusOr<PackedInt4> pack_awq_gemm(const Int4Weight& w) {
  RETURN_IF_ERROR(check_int4_weight(w, "AWQ packing"));
  if (!w.g_idx.empty()) return invalid_argument("AWQ packing: AWQ has no act-order (g_idx)");
  if (w.n % kPack != 0) return invalid_argument("AWQ packing: n is not a multiple of 8");
  const int64_t n8 = w.n / kPack, groups = w.groups(), k = w.k;
  PackedInt4 p;
  p.qweight_shape = {k, n8}, p.qzeros_shape = {groups, n8}, p.scales_shape = {groups, w.n};
  p.qweight.assign(static_cast<size_t>(k * n8), 0);
  p.qzeros.assign(static_cast<size_t>(groups * n8), 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t c = 0; c < n8; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < kPack; ++i) word |= uint32_t{w.q[(c * kPack + kAwqOrder[i]) * k + kk]} << (4 * i);
      p.qweight[kk * n8 + c] = static_cast<int32_t>(word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n8; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < kPack; ++i) word |= uint32_t{w.zeros[(c * kPack + kAwqOrder[i]) * groups + g]} << (4 * i);
      p.qzeros[g * n8 + c] = static_cast<int32_t>(word);
    }
  }
  p.scales = f16_scales(w);
  return p;
}

StatusOr<PackedInt4> pack_gptq(const Int4Weight& w, bool v2) {
  RETURN_IF_ERROR(check_int4_weight(w, "GPTQ packing"));
  if (w.n % kPack != 0 || w.k % kPack != 0) return invalid_argument("GPTQ packing: n or k is not a multiple of 8");
  const int64_t n8 = w.n / kPack, k8 = w.k / kPack, groups = w.groups(), n = w.n;
  PackedInt4 p;
  p.qweight_shape = {k8, n}, p.qzeros_shape = {groups, n8}, p.scales_shape = {groups, n};
  p.qweight.assign(static_cast<size_t>(k8 * n), 0);
  p.qzeros.assign(static_cast<size_t>(groups * n8), 0);
  for (int64_t r = 0; r < k8; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < kPack; ++i) word |= uint32_t{w.q[c * w.k + r * kPack + i]} << (4 * i);
      p.qweight[r * n + c] = static_cast<int32_t>(word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n8; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < kPack; ++i) {
        const uint8_t z = w.zeros[(c * kPack + i) * groups + g];
        if (!v2 && z == 0) {
          return invalid_argument("GPTQ v1 packing: a zero of 0 (group " + std::to_string(g) + ", column " +
                                  std::to_string(c * kPack + i) + ") cannot be stored as zero - 1; write gptq_v2");
        }
        word |= uint32_t{static_cast<uint8_t>(v2 ? z : z - 1)} << (4 * i);
      }
      p.qzeros[g * n8 + c] = static_cast<int32_t>(word);
    }
  }
  p.scales = f16_scales(w);
  p.g_idx.resize(static_cast<size_t>(w.k));
  for (int64_t kk = 0; kk < w.k; ++kk) {
    p.g_idx[kk] = w.g_idx.empty() ? static_cast<int32_t>(kk / w.group_size) : w.g_idx[kk];
  }
  return p;
}

std::vector<TensorToWrite> packed_tensors(const std::string& prefix, const PackedInt4& p) {
  std::vector<TensorToWrite> out = {
      {prefix + ".qweight", DType::kI32, p.qweight_shape, p.qweight.data()},
      {prefix + ".qzeros", DType::kI32, p.qzeros_shape, p.qzeros.data()},
      {prefix + ".scales", DType::kF16, p.scales_shape, p.scales.data()},
  };
  if (!p.g_idx.empty()) {
    out.push_back({prefix + ".g_idx", DType::kI32, {static_cast<int64_t>(p.g_idx.size())}, p.g_idx.data()});
  }
  return out;
}

std::vector<float> dequantize(const Int4Weight& w) {
  const int64_t groups = w.groups();
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  for (int64_t c = 0; c < w.n; ++c) {
    for (int64_t kk = 0; kk < w.k; ++kk) {
      const int64_t g = w.g_idx.empty() ? kk / w.group_size : w.g_idx[kk];
      const float q = static_cast<float>(w.q[c * w.k + kk]), z = static_cast<float>(w.zeros[c * groups + g]);
      out[c * w.k + kk] = (q - z) * w.scales[c * groups + g];
    }
  }
  return out;
}

}  // namespace mmserve::models
