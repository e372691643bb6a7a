// `mmserve calibrate`'s work: amax over calibration prompts, static FP8 scales, the KL check, the writer (see
// fp8_calibrate.h).
#include "models/quant/fp8_calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/dtype.h"
#include "core/json_config.h"
#include "core/safetensors.h"
#include "models/quant/fp8_checkpoint.h"
#include "models/quant/quant_load.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

constexpr int kSites = 4;  // LlamaActivation's values

// Files a model directory carries beside its weights that the FP8 copy needs unchanged.
constexpr const char* kSideFiles[] = {"tokenizer.json",    "tokenizer_config.json",  "special_tokens_map.json",
                                      "tokenizer.model",   "added_tokens.json",      "vocab.json",
                                      "merges.txt",        "generation_config.json", "chat_template.jinja",
                                      "chat_template.json"};

Status check_options(const CalibrateOptions& o) {
  if (o.model_dir.empty()) return invalid_argument("--model is required");
  if (o.output_dir.empty()) return invalid_argument("--output is required");
  if (!std::isfinite(o.max_kl) || o.max_kl < 0) {
    return invalid_argument("--max-kl " + std::to_string(o.max_kl) + ": expected a number >= 0");
  }
  if (o.holdout != -1 && o.holdout < 1) {
    return invalid_argument("--holdout " + std::to_string(o.holdout) + ": expected at least 1 prompt");
  }
  if (o.inputs != Fp8InputScale::kStatic && o.inputs != Fp8InputScale::kDynamicToken) {
    return invalid_argument("--activation-scheme: expected static or dynamic");
  }
  if (o.prompts.empty()) return invalid_argument("no calibration prompts (--data holds none)");
  for (size_t i = 0; i < o.prompts.size(); ++i) {
    if (o.prompts[i].empty()) return invalid_argument("prompt " + std::to_string(i + 1) + " has no tokens");
  }
  std::error_code ec;
  if (fs::exists(o.output_dir, ec) && fs::equivalent(o.model_dir, o.output_dir, ec)) {
    return invalid_argument("--output is the input directory");
  }
  if (fs::exists(fs::path(o.output_dir) / "config.json", ec)) {
    return Status(StatusCode::kAlreadyExists,
                  o.output_dir + " already holds a model (config.json); pick a new directory");
  }
  return ok_status();
}

// "model.layers.12.mlp.up_proj" -> 12.
int64_t layer_of(const std::string& module) {
  const size_t at = module.find("layers.");
  return at == std::string::npos ? -1 : std::strtoll(module.c_str() + at + 7, nullptr, 10);
}

// The activation site whose rows are `module`'s input.
LlamaActivation site_of(const std::string& module) {
  if (module.ends_with("o_proj")) return LlamaActivation::kAttnOutput;
  if (module.ends_with("gate_proj") || module.ends_with("up_proj")) return LlamaActivation::kMlpInput;
  if (module.ends_with("down_proj")) return LlamaActivation::kMlpHidden;
  return LlamaActivation::kAttnInput;
}

std::string fixed(double v, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// KL(p || q) of softmax(a) and softmax(b) over `v` logits, in double.
double kl_of_logits(const float* a, const float* b, int64_t v) {
  double ma = -std::numeric_limits<double>::infinity(), mb = ma;
  for (int64_t i = 0; i < v; ++i)
    ma = std::max(ma, static_cast<double>(a[i])), mb = std::max(mb, static_cast<double>(b[i]));
  double za = 0, zb = 0;
  for (int64_t i = 0; i < v; ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
  const double log_za = std::log(za), log_zb = std::log(zb);
  double kl = 0;
  for (int64_t i = 0; i < v; ++i) {
    const double log_p = a[i] - ma - log_za, log_q = b[i] - mb - log_zb;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);
}

Status write_checkpoint(const CalibrateOptions& o, nlohmann::json config_json, const QuantConfig& quant,
                        const std::vector<TensorToWrite>& tensors) {
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec) return failed_precondition(o.output_dir + ": cannot create: " + ec.message());
  RETURN_IF_ERROR(write_safetensors(o.output_dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  config_json["quantization_config"] = quant_config_to_json(quant);
  std::ofstream out(o.output_dir + "/config.json");
  out << config_json.dump(2) << "\n";
  if (!out) return failed_precondition(o.output_dir + "/config.json: write failed");
  for (const char* name : kSideFiles) {
    const fs::path from = fs::path(o.model_dir) / name;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, fs::path(o.output_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return failed_precondition(from.string() + ": cannot copy: " + ec.message());
  }
  return ok_status();
}

}  // namespace

StatusOr<CalibrateResult> calibrate_fp8(const CalibrateOptions& o) {
  RETURN_IF_ERROR(check_options(o));
  auto progress = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  const int64_t total = static_cast<int64_t>(o.prompts.size());
  const int64_t held = o.holdout == -1 ? std::max<int64_t>(1, total / 5) : o.holdout;
  if (held >= total) {
    return invalid_argument("--holdout " + std::to_string(held) + " leaves no calibration prompt (" +
                            std::to_string(total) + " prompts; at least 2 are needed)");
  }
  const int64_t calibration = total - held;
  const std::string config_path = o.model_dir + "/config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  ASSIGN_OR_RETURN(const LlamaConfig config, parse_llama_config(json, config_path));
  ASSIGN_OR_RETURN(const QuantConfig existing, parse_quant_config(json, config_path));
  if (existing.quantized()) {
    return unimplemented(o.model_dir + " is already quantised (" + existing.format_name() +
                         "); give an f32, f16 or "
                         "bf16 checkpoint");
  }
  if (config.num_experts > 0)
    return unimplemented(config.architecture + ": FP8 calibration of Mixtral's experts is not supported");
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> base, LlamaModel::load(o.model_dir));
  for (int64_t i = 0; i < total; ++i) {
    if (static_cast<int64_t>(o.prompts[i].size()) > base->max_length()) {
      return invalid_argument("prompt " + std::to_string(i + 1) + " has " + std::to_string(o.prompts[i].size()) +
                              " tokens; the model takes at most " + std::to_string(base->max_length()));
    }
  }

  // 2. amax of each layer's linear inputs over the calibration prompts.
  std::vector<float> amax(static_cast<size_t>(config.num_hidden_layers * kSites), 0.0f);
  const LlamaActivationCallback record = [&](int64_t layer, LlamaActivation site, const float* rows, int64_t n,
                                             int64_t width) {
    float& m = amax[static_cast<size_t>(layer * kSites + static_cast<int>(site))];
    for (int64_t i = 0; i < n * width; ++i) m = std::max(m, std::fabs(rows[i]));
  };
  if (o.inputs == Fp8InputScale::kStatic) {
    for (int64_t p = 0; p < calibration; ++p) {
      const std::vector<int32_t>& prompt = o.prompts[p];
      const int64_t n = static_cast<int64_t>(prompt.size());
      ASSIGN_OR_RETURN(LlamaKvCache cache, base->new_cache(n));
      LlamaForwardExtras extras;
      extras.activations = &record;
      RETURN_IF_ERROR(base->forward(prompt.data(), n, cache, nullptr, nullptr, extras));
      progress("calibrate: prompt " + std::to_string(p + 1) + "/" + std::to_string(calibration) + " (" +
               std::to_string(n) + " tokens): input amax recorded");
    }
  }

  // 3. Scales and codes; the FP8 model's weights, made as LlamaModel::load makes them.
  QuantConfig quant;
  quant.method = QuantMethod::kFp8;
  quant.compressed_tensors = true;
  quant.fp8_weights = o.weights;
  quant.fp8_inputs = o.inputs;
  quant.fp8_targets = {"Linear"};
  quant.fp8_ignore = {"lm_head"};
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(o.model_dir));
  const std::vector<WeightSpec> specs = llama_weight_specs(config);
  ASSIGN_OR_RETURN(const QuantizedWeightPlan plan, plan_quantized_weights(quant, specs));
  ASSIGN_OR_RETURN(std::unique_ptr<F32Weights> weights, F32Weights::load(*store, plan.floats));
  std::deque<Fp8Weight> codes;       // stable addresses for the TensorToWrite pointers
  std::deque<Fp8InputQuant> scales;  // parallel to codes
  Fp8Inputs inputs;
  for (const QuantizedLinear& l : plan.linears) {
    const TensorInfo* info = store->find(l.prefix + ".weight");
    std::vector<float> w(static_cast<size_t>(l.n * l.k));
    if (info == nullptr || !convert_to_f32(info->dtype, info->data, w.data(), l.n * l.k)) {
      return unimplemented(l.prefix + ".weight: not an f32, f16 or bf16 tensor");
    }
    codes.push_back(quantize_fp8_weight(w.data(), l.n, l.k, o.weights));
    Fp8InputQuant q;
    q.scheme = o.inputs;
    if (o.inputs == Fp8InputScale::kStatic) {
      const float a = amax[static_cast<size_t>(layer_of(l.prefix) * kSites + static_cast<int>(site_of(l.prefix)))];
      q.scale = kernels::fp8_scale_for_amax(a, kernels::Fp8Format::kE4M3);
    }
    scales.push_back(q);
    inputs[l.prefix] = q;
    const std::vector<float> d = dequantize_fp8(codes.back());
    Tensor t = weights->add_owned(l.prefix + ".weight", {l.n, l.k});
    std::memcpy(t.data(), d.data(), d.size() * sizeof(float));
  }
  progress("calibrate: " + std::to_string(plan.linears.size()) + " linears to FP8 E4M3 (weights per " +
           (o.weights == Fp8WeightScale::kChannel ? "channel" : "tensor") + ", inputs " +
           fp8_input_scale_name(o.inputs) + ")");
  CalibrateResult r;
  r.calibration_prompts = calibration;
  r.held_out_prompts = held;
  r.fp8_model = LlamaModel::from_weights(config, std::shared_ptr<const F32Weights>(std::move(weights)), {});
  r.fp8_model->set_linear_inputs(fp8_input_transforms(inputs));

  // 5. KL over the held-apart prompts' positions.
  double kl_sum = 0;
  int64_t agree = 0;
  const int64_t v = config.vocab_size;
  for (int64_t p = calibration; p < total; ++p) {
    const std::vector<int32_t>& prompt = o.prompts[p];
    const int64_t n = static_cast<int64_t>(prompt.size());
    std::vector<float> a(static_cast<size_t>(n * v)), b(a.size());
    ASSIGN_OR_RETURN(LlamaKvCache ca, base->new_cache(n));
    ASSIGN_OR_RETURN(LlamaKvCache cb, r.fp8_model->new_cache(n));
    RETURN_IF_ERROR(base->forward(prompt.data(), n, ca, nullptr, a.data()));
    RETURN_IF_ERROR(r.fp8_model->forward(prompt.data(), n, cb, nullptr, b.data()));
    double prompt_kl = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float *x = a.data() + t * v, *y = b.data() + t * v;
      prompt_kl += kl_of_logits(x, y, v);
      agree += (std::max_element(x, x + v) - x) == (std::max_element(y, y + v) - y);
    }
    kl_sum += prompt_kl;
    r.positions += n;
    progress("calibrate: held-apart prompt " + std::to_string(p - calibration + 1) + "/" + std::to_string(held) + " (" +
             std::to_string(n) + " tokens): mean KL " + fixed(prompt_kl / static_cast<double>(n)));
  }
  r.kl = kl_sum / static_cast<double>(r.positions);
  r.top1_agreement = static_cast<double>(agree) / static_cast<double>(r.positions);
  progress("calibrate: KL(p_orig || p_fp8) = " + fixed(r.kl) + " over " + std::to_string(r.positions) +
           " held-apart positions (limit " + fixed(o.max_kl) + "), top-1 agreement " + fixed(r.top1_agreement, 4));
  if (r.kl > o.max_kl) return r;

  // The checkpoint: each FP8 linear's codes and scales, everything else as stored.
  std::vector<TensorToWrite> tensors;
  size_t next = 0;
  for (const WeightSpec& spec : specs) {
    const TensorInfo* info = store->find(spec.name);
    if (info == nullptr) continue;  // an optional tensor the checkpoint does not have
    if (next < plan.linears.size() && plan.linears[next].prefix + ".weight" == spec.name) {
      for (TensorToWrite& t : fp8_tensors(plan.linears[next].prefix, codes[next], scales[next])) {
        tensors.push_back(std::move(t));
      }
      ++next;
      continue;
    }
    tensors.push_back({spec.name, info->dtype, info->shape, info->data});
  }
  RETURN_IF_ERROR(write_checkpoint(o, json, quant, tensors));
  r.written = true;
  return r;
}

}  // namespace mmserve::models
