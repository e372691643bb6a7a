// RTN quantisation and the checkpoint writer of `mmserve quantize` (see quantize.h).
#include "models/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>

#include "core/dtype.h"
#include "core/json_config.h"
#include "core/safetensors.h"
#include "models/llama/llama.h"
#include "models/quant/awq.h"
#include "models/quant/int4_checkpoint.h"
#include "models/quant/quant_config.h"
#include "models/quant/quant_load.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

// Files a model directory carries beside its weights that a quantised copy needs unchanged.
constexpr const char* kCopiedFiles[] = {"tokenizer.json",       "tokenizer_config.json", "special_tokens_map.json",
                                        "tokenizer.model",      "added_tokens.json",     "vocab.json",
                                        "merges.txt",           "generation_config.json", "chat_template.jinja",
                                        "chat_template.json"};

Status check_options(const QuantizeOptions& o) {
  if (o.method != "rtn" && o.method != "awq") return invalid_argument("--method '" + o.method + "': expected rtn or awq");
  if (o.format != "awq" && o.format != "gptq") return invalid_argument("--format '" + o.format + "': expected awq or gptq");
  if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128 && o.group_size != -1) {
    return invalid_argument("--group-size " + std::to_string(o.group_size) + ": expected 32, 64, 128 or -1");
  }
  if (o.method == "awq" && o.calibration.empty()) {
    return invalid_argument("--method awq needs calibration prompts: --data FILE.jsonl (one {\"text\": ...} a line)");
  }
  if (o.model_dir.empty()) return invalid_argument("--model is required");
  if (o.output_dir.empty()) return invalid_argument("--output is required");
  std::error_code ec;
  if (fs::exists(o.output_dir, ec) && fs::equivalent(o.model_dir, o.output_dir, ec)) {
    return invalid_argument("--output is the input directory");
  }
  if (fs::exists(fs::path(o.output_dir) / "config.json", ec)) {
    return Status(StatusCode::kAlreadyExists, o.output_dir + " already holds a model (config.json); pick a new directory");
  }
  return ok_status();
}

// The smallest f16 value >= v (v positive and finite): 15 steps of it cover the group's range.
float f16_at_least(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v && h < 0x7bffu) ++h;  // the next f16 up (positive values order as their bits)
  return f16_to_f32(h);
}

// "model.layers.12.mlp.up_proj" -> 12 (-1 when there is no layer index).
int64_t layer_of(const std::string& prefix) {
  const size_t at = prefix.find("layers.");
  if (at == std::string::npos) return -1;
  return std::strtoll(prefix.c_str() + at + 7, nullptr, 10);
}

}  // namespace

Int4Weight quantize_rtn(const float* w, int64_t n, int64_t k, int64_t group_size, int zero_min) {
  Int4Weight q;
  q.n = n, q.k = k, q.group_size = group_size;
  const int64_t groups = q.groups();
  q.q.resize(static_cast<size_t>(n * k));
  q.scales.resize(static_cast<size_t>(n * groups));
  q.zeros.resize(q.scales.size());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = w + r * k + g * group_size;
      const auto [lo_it, hi_it] = std::minmax_element(x, x + group_size);
      const float lo = std::min(*lo_it, 0.0f), hi = std::max(*hi_it, 0.0f);  // the range holds 0, as GPTQ's
      const float scale = f16_at_least(std::max(hi - lo, 1e-5f) / 15.0f);
      const float zero = std::clamp(std::nearbyint(-lo / scale), static_cast<float>(zero_min), 15.0f);
      q.scales[r * groups + g] = scale;
      q.zeros[r * groups + g] = static_cast<uint8_t>(zero);
      for (int64_t i = 0; i < group_size; ++i) {
        q.q[r * k + g * group_size + i] =
            static_cast<uint8_t>(std::clamp(std::nearbyint(x[i] / scale) + zero, 0.0f, 15.0f));
      }
    }
  }
  return q;
}

Status quantize_checkpoint(const QuantizeOptions& o) {
  RETURN_IF_ERROR(check_options(o));
  const std::string config_path = o.model_dir + "/config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  ASSIGN_OR_RETURN(const LlamaConfig config, parse_llama_config(json, config_path));
  ASSIGN_OR_RETURN(const QuantConfig existing, parse_quant_config(json, config_path));
  if (existing.quantized()) {
    return unimplemented(o.model_dir + " is already quantised (" + existing.format_name() + "); give an f32, f16 or "
                         "bf16 checkpoint");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(o.model_dir));
  const std::vector<WeightSpec> specs = llama_weight_specs(config);
  WeightCheckOptions check;
  check.ignored_suffixes = {"rotary_emb.inv_freq"};
  RETURN_IF_ERROR(check_weights(*store, specs, check).with_context(o.model_dir));

  QuantConfig quant;
  quant.method = o.format == "awq" ? QuantMethod::kAwq : QuantMethod::kGptq;
  quant.group_size = o.group_size;
  quant.sym = false;
  ASSIGN_OR_RETURN(const QuantizedWeightPlan plan, plan_quantized_weights(quant, specs));
  const bool gptq_v1 = quant.method == QuantMethod::kGptq && !quant.gptq_v2;
  AwqResult awq;  // --method awq: the scaled tensors written instead of the checkpoint's
  if (o.method == "awq") {
    ASSIGN_OR_RETURN(awq, awq_scale(o.model_dir, o.calibration, quant.group_size, gptq_v1 ? 1 : 0, o.progress));
  }

  std::deque<PackedInt4> packed;  // stable addresses for the TensorToWrite pointers
  std::deque<std::vector<uint8_t>> rescaled;  // AWQ's scaled norms and biases in their stored dtype
  std::vector<TensorToWrite> tensors;
  size_t next = 0;  // into plan.linears (in the specs' order)
  float layer_error = 0.0f;
  int64_t layer_linears = 0;
  for (const WeightSpec& spec : specs) {
    const TensorInfo* info = store->find(spec.name);
    if (info == nullptr) continue;  // an optional tensor the checkpoint does not have
    const auto scaled = awq.tensors.find(spec.name);
    if (next >= plan.linears.size() || plan.linears[next].prefix + ".weight" != spec.name) {
      if (scaled == awq.tensors.end()) {
        tensors.push_back({spec.name, info->dtype, info->shape, info->data});
        continue;
      }
      rescaled.emplace_back(storage_bytes(info->dtype, info->numel()));
      if (!convert_from_f32(scaled->second.data(), info->dtype, rescaled.back().data(), info->numel())) {
        return unimplemented(spec.name + ": dtype " + dtype_name(info->dtype) + " cannot be rescaled (f32, f16, bf16)");
      }
      tensors.push_back({spec.name, info->dtype, info->shape, rescaled.back().data()});
      continue;
    }
    const QuantizedLinear& l = plan.linears[next++];
    std::vector<float> w(static_cast<size_t>(l.n * l.k));
    if (scaled != awq.tensors.end()) {
      w = scaled->second;
    } else if (!convert_to_f32(info->dtype, info->data, w.data(), l.n * l.k)) {
      return unimplemented(spec.name + ": dtype " + dtype_name(info->dtype) + " cannot be quantised (f32, f16, bf16)");
    }
    const Int4Weight q = quantize_rtn(w.data(), l.n, l.k, quant.group_size_for(l.k), gptq_v1 ? 1 : 0);
    StatusOr<PackedInt4> p = quant.method == QuantMethod::kAwq ? pack_awq_gemm(q) : pack_gptq(q, quant.gptq_v2);
    if (!p.ok()) return p.status().with_context(l.prefix);
    packed.push_back(std::move(p).value());
    for (TensorToWrite& t : packed_tensors(l.prefix, packed.back())) tensors.push_back(std::move(t));
    const std::vector<float> d = dequantize(q);
    for (size_t i = 0; i < d.size(); ++i) layer_error = std::max(layer_error, std::fabs(d[i] - w[i]));
    ++layer_linears;
    const bool last_of_layer = next == plan.linears.size() || layer_of(plan.linears[next].prefix) != layer_of(l.prefix);
    if (last_of_layer && o.progress) {
      o.progress("quantize: layer " + std::to_string(layer_of(l.prefix) + 1) + "/" +
                 std::to_string(config.num_hidden_layers) + ": " + std::to_string(layer_linears) +
                 " linears, max |w - dequantised| " + std::to_string(layer_error));
      layer_error = 0.0f, layer_linears = 0;
    }
  }

  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec) return failed_precondition(o.output_dir + ": cannot create: " + ec.message());
  RETURN_IF_ERROR(write_safetensors(o.output_dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  json["quantization_config"] = quant_config_to_json(quant);
  std::ofstream out(o.output_dir + "/config.json");
  out << json.dump(2) << "\n";
  if (!out) return failed_precondition(o.output_dir + "/config.json: write failed");
  for (const char* name : kCopiedFiles) {
    const fs::path from = fs::path(o.model_dir) / name;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, fs::path(o.output_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return failed_precondition(from.string() + ": cannot copy: " + ec.message());
  }
  return ok_status();
}

}  // namespace mmserve::models
