// quantization_config parsing (see quant_config.h).
#include "models/quant/quant_config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "core/json_config.h"

namespace mmserve::models {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The first of `keys` present (aliases: AutoAWQ's w_bit / q_group_size beside transformers' bits / group_size).
std::string first_present(const JsonObject& o, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (o.has(k)) return k;
  }
  return *keys.begin();
}

Status parse_bits(const JsonObject& o, QuantConfig& c) {
  const std::string key = first_present(o, {"bits", "w_bit"});
  ASSIGN_OR_RETURN(c.bits, o.get_int_or(key, 4));
  if (c.bits == 2 || c.bits == 3 || c.bits == 8) {
    return unimplemented(o.label() + "." + key + ": " + std::to_string(c.bits) +
                         "-bit weights are not supported (4 only)");
  }
  if (c.bits != 4)
    return invalid_argument(o.label() + "." + key + ": " + std::to_string(c.bits) + " is not a bit width");
  return ok_status();
}

Status parse_group_size(const JsonObject& o, QuantConfig& c) {
  const std::string key = first_present(o, {"group_size", "q_group_size"});
  ASSIGN_OR_RETURN(c.group_size, o.get_int_or(key, 128));
  if (c.group_size != -1 && c.group_size <= 0) {
    return invalid_argument(o.label() + "." + key + ": " + std::to_string(c.group_size) +
                            " is not a group size (a positive number of input columns, or -1)");
  }
  return ok_status();
}

Status parse_modules_to_not_convert(const JsonObject& o, QuantConfig& c) {
  if (!o.has("modules_to_not_convert")) return ok_status();
  const nlohmann::json& v = o.raw()["modules_to_not_convert"];
  const std::string field = o.label() + ".modules_to_not_convert";
  if (!v.is_array()) return invalid_argument(field + ": expected a list of module names");
  for (const nlohmann::json& e : v) {
    if (!e.is_string() || e.get<std::string>().empty()) {
      return invalid_argument(field + ": expected a list of module names, got " + e.dump());
    }
    c.modules_to_not_convert.push_back(e.get<std::string>());
  }
  return ok_status();
}

Status parse_awq(const JsonObject& o, QuantConfig& c) {
  RETURN_IF_ERROR(parse_bits(o, c));
  RETURN_IF_ERROR(parse_group_size(o, c));
  ASSIGN_OR_RETURN(c.zero_point, o.get_bool_or("zero_point", true));
  ASSIGN_OR_RETURN(std::string version, o.get_string_or("version", "gemm"));
  if (lower(version) != "gemm") {
    return unimplemented(o.label() + ".version: '" + version +
                         "' is not supported (AWQ's GEMM packing only; gemv, gemv_fast, marlin, exllama and ipex "
                         "store their tensors differently)");
  }
  ASSIGN_OR_RETURN(std::string backend, o.get_string_or("backend", "autoawq"));
  if (lower(backend) != "autoawq") {
    return unimplemented(o.label() + ".backend: '" + backend + "' is not supported (AutoAWQ's packing only)");
  }
  return parse_modules_to_not_convert(o, c);
}

Status parse_gptq(const JsonObject& o, QuantConfig& c) {
  RETURN_IF_ERROR(parse_bits(o, c));
  RETURN_IF_ERROR(parse_group_size(o, c));
  ASSIGN_OR_RETURN(c.desc_act, o.get_bool_or("desc_act", false));
  ASSIGN_OR_RETURN(c.sym, o.get_bool_or("sym", true));
  const std::string format_key = first_present(o, {"checkpoint_format", "format"});
  ASSIGN_OR_RETURN(std::string format, o.get_string_or(format_key, "gptq"));
  if (format == "gptq_v2") {
    c.gptq_v2 = true;
  } else if (format != "gptq") {
    return unimplemented(o.label() + "." + format_key + ": '" + format +
                         "' is not supported (gptq and gptq_v2; marlin, bitblas, ... pack differently)");
  }
  ASSIGN_OR_RETURN(bool marlin, o.get_bool_or("is_marlin_format", false));
  if (marlin) return unimplemented(o.label() + ".is_marlin_format: Marlin-packed GPTQ checkpoints are not supported");
  ASSIGN_OR_RETURN(std::string pack_dtype, o.get_string_or("pack_dtype", "int32"));
  if (pack_dtype != "int32" && pack_dtype != "torch.int32") {
    return unimplemented(o.label() + ".pack_dtype: '" + pack_dtype + "' is not supported (int32 only)");
  }
  ASSIGN_OR_RETURN(bool lm_head, o.get_bool_or("lm_head", false));
  if (lm_head) return unimplemented(o.label() + ".lm_head: a quantised lm_head is not supported");
  if (o.has("dynamic") && !(o.raw()["dynamic"].is_object() && o.raw()["dynamic"].empty())) {
    return unimplemented(o.label() + ".dynamic: per-module overrides are not supported");
  }
  if (o.has("modules_in_block_to_quantize")) {
    return unimplemented(o.label() + ".modules_in_block_to_quantize: partial quantisation is not supported");
  }
  return parse_modules_to_not_convert(o, c);
}

// ---- FP8.

// A list of strings (`field` names it), or null / absent: empty.
Status string_list(const JsonObject& o, const std::string& key, std::vector<std::string>& out) {
  if (!o.has(key)) return ok_status();
  const nlohmann::json& v = o.raw()[key];
  if (!v.is_array()) return invalid_argument(o.label() + "." + key + ": expected a list of module names");
  for (const nlohmann::json& e : v) {
    if (!e.is_string() || e.get<std::string>().empty()) {
      return invalid_argument(o.label() + "." + key + ": expected a list of module names, got " + e.dump());
    }
    out.push_back(e.get<std::string>());
  }
  return ok_status();
}

// Python's re.match (anchored at the start only) through PCRE2, its work bounded as models/lora/peft_config.cpp's:
// a checkpoint's config is a user's bytes.
StatusOr<bool> regex_match_at_start(const std::string& pattern, const std::string& text) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_ANCHORED, &error,
                                   &offset, nullptr);
  if (code == nullptr) return invalid_argument("'re:" + pattern.substr(0, 120) + "' is not a regular expression");
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(context, 1000000);
  pcre2_set_depth_limit(context, 10000);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, context);
  pcre2_match_data_free(data);
  pcre2_match_context_free(context);
  pcre2_code_free(code);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  return invalid_argument("'re:" + pattern.substr(0, 120) + "' takes too long to match '" + text.substr(0, 120) + "'");
}

// compressed-tensors' _is_equal_or_regex_match, plus the class name "Linear" (every module we ask about is one).
StatusOr<bool> entry_matches(const std::string& entry, const std::string& module) {
  if (entry.starts_with("re:")) return regex_match_at_start(entry.substr(3), module);
  return entry == module || entry == "Linear";
}

// Every "re:" entry compiles (checked at parse time, so that a bad pattern is named with its field).
Status check_patterns(const std::vector<std::string>& entries, const std::string& field) {
  for (const std::string& e : entries) {
    if (!e.starts_with("re:")) continue;
    StatusOr<bool> m = regex_match_at_start(e.substr(3), "");
    if (!m.ok()) return m.status().with_context(field);
  }
  return ok_status();
}

bool is_fp8_format(const std::string& f) {
  return f == "float-quantized" || f == "naive-quantized";
}

Status check_format(const JsonObject& o, const std::string& key) {
  ASSIGN_OR_RETURN(std::string format, o.get_string_or(key, "float-quantized"));
  if (!is_fp8_format(format)) {
    return unimplemented(o.label() + "." + key + ": '" + format +
                         "' is not supported (FP8 weights: float-quantized or naive-quantized)");
  }
  return ok_status();
}

// One QuantizationArgs (weights or input_activations): 8-bit symmetric float, no groups or blocks.
Status check_fp8_args(const JsonObject& a) {
  ASSIGN_OR_RETURN(int64_t bits, a.get_int_or("num_bits", 8));
  if (bits != 8) return unimplemented(a.label() + ".num_bits: " + std::to_string(bits) + " is not supported (8: FP8)");
  ASSIGN_OR_RETURN(std::string type, a.get_string_or("type", "int"));
  if (lower(type) != "float") {
    return unimplemented(a.label() + ".type: '" + type + "' is not supported (float: FP8 E4M3; int8 is not read)");
  }
  ASSIGN_OR_RETURN(bool symmetric, a.get_bool_or("symmetric", true));
  if (!symmetric) return unimplemented(a.label() + ".symmetric: asymmetric FP8 is not supported");
  if (a.has("actorder") && !(a.raw()["actorder"].is_boolean() && !a.raw()["actorder"].get<bool>())) {
    return unimplemented(a.label() + ".actorder: activation ordering is not supported for FP8");
  }
  return ok_status();
}

// The strategy of `a`, lower-cased; compressed-tensors infers tensor when it is absent and group_size is too.
StatusOr<std::string> strategy_of(const JsonObject& a) {
  ASSIGN_OR_RETURN(std::string strategy, a.get_string_or("strategy", "tensor"));
  return lower(strategy);
}

// `dynamic`: a boolean (compressed-tensors also has "local", for NVFP4 only).
StatusOr<bool> dynamic_of(const JsonObject& a) {
  if (a.has("dynamic") && a.raw()["dynamic"].is_string()) {
    return unimplemented(a.label() + ".dynamic: '" + a.raw()["dynamic"].get<std::string>() +
                         "' is not supported (true or false)");
  }
  return a.get_bool_or("dynamic", false);
}

struct Fp8Scheme {
  Fp8WeightScale weights = Fp8WeightScale::kTensor;
  Fp8InputScale inputs = Fp8InputScale::kNone;
  std::vector<int64_t> block;  // kBlock
  int64_t group = 0;           // kDynamicGroup
  bool operator==(const Fp8Scheme&) const = default;
};

// group_size absent, null or -1 (no groups).
Status check_no_groups(const JsonObject& a) {
  ASSIGN_OR_RETURN(int64_t group_size, a.get_int_or("group_size", -1));
  if (group_size != -1) {
    return unimplemented(a.label() + ".group_size: " + std::to_string(group_size) +
                         ": grouped scales are not supported");
  }
  if (a.has("block_structure")) return invalid_argument(a.label() + ".block_structure: needs the block strategy");
  return ok_status();
}

// block_structure: [rows, cols] or compressed-tensors' older "RxC" string, both positive.
StatusOr<std::vector<int64_t>> block_of(const JsonObject& a) {
  const std::string field = a.label() + ".block_structure";
  if (!a.has("block_structure")) return invalid_argument(field + ": the block strategy needs [rows, cols]");
  nlohmann::json b = a.raw()["block_structure"];
  if (b.is_string()) {
    const std::string t = b.get<std::string>();
    const size_t x = t.find('x');
    const long long r = x == std::string::npos ? 0 : std::strtoll(t.c_str(), nullptr, 10);
    const long long cols = x == std::string::npos ? 0 : std::strtoll(t.c_str() + x + 1, nullptr, 10);
    b = nlohmann::json::array({r, cols});
  }
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > (1 << 20) ||
      b[1].get<int64_t>() > (1 << 20)) {
    return invalid_argument(field + ": expected two positive integers [rows, cols], got " +
                            a.raw()["block_structure"].dump());
  }
  return std::vector<int64_t>{b[0].get<int64_t>(), b[1].get<int64_t>()};
}

StatusOr<Fp8Scheme> parse_scheme(const JsonObject& g) {
  Fp8Scheme s;
  if (g.has("format")) RETURN_IF_ERROR(check_format(g, "format"));
  if (!g.has("weights"))
    return unimplemented(g.label() + ".weights: null (activation-only quantisation) is not supported");
  ASSIGN_OR_RETURN(JsonObject w, g.get_object("weights"));
  RETURN_IF_ERROR(check_fp8_args(w));
  ASSIGN_OR_RETURN(const std::string ws, strategy_of(w));
  if (ws == "block") {  // llm-compressor's FP8_BLOCK
    s.weights = Fp8WeightScale::kBlock;
    ASSIGN_OR_RETURN(s.block, block_of(w));
  } else if (ws == "channel" || ws == "tensor") {
    s.weights = ws == "channel" ? Fp8WeightScale::kChannel : Fp8WeightScale::kTensor;
    RETURN_IF_ERROR(check_no_groups(w));
  } else {
    return unimplemented(w.label() + ".strategy: '" + ws +
                         "' is not supported for FP8 weights (tensor, channel, block)");
  }
  ASSIGN_OR_RETURN(const bool w_dynamic, dynamic_of(w));
  if (w_dynamic) return unimplemented(w.label() + ".dynamic: weights quantised at run time are not supported");
  if (g.has("output_activations")) {
    return unimplemented(g.label() + ".output_activations: quantised outputs are not supported");
  }
  if (!g.has("input_activations")) return s;
  ASSIGN_OR_RETURN(JsonObject a, g.get_object("input_activations"));
  RETURN_IF_ERROR(check_fp8_args(a));
  ASSIGN_OR_RETURN(const std::string as, strategy_of(a));
  ASSIGN_OR_RETURN(const bool a_dynamic, dynamic_of(a));
  if (as == "group") {  // FP8_BLOCK's inputs: each token's groups of group_size columns, dynamic
    if (!a_dynamic) return unimplemented(a.label() + ".dynamic: static group-wise inputs are not supported");
    ASSIGN_OR_RETURN(s.group, a.get_int_or("group_size", 0));
    if (s.group <= 0 || s.group > (1 << 20)) {
      return invalid_argument(a.label() + ".group_size: the group strategy needs a positive group size");
    }
    s.inputs = Fp8InputScale::kDynamicGroup;
    return s;
  }
  RETURN_IF_ERROR(check_no_groups(a));
  if (as == "tensor") {
    s.inputs = a_dynamic ? Fp8InputScale::kDynamicTensor : Fp8InputScale::kStatic;
  } else if (as == "token") {
    if (!a_dynamic) return invalid_argument(a.label() + ".dynamic: the token strategy needs dynamic: true");
    s.inputs = Fp8InputScale::kDynamicToken;
  } else {
    return unimplemented(a.label() + ".strategy: '" + as + "' is not supported for FP8 inputs (tensor, token, group)");
  }
  return s;
}

Status parse_compressed_tensors(const JsonObject& o, QuantConfig& c) {
  c.compressed_tensors = true;
  RETURN_IF_ERROR(check_format(o, "format"));
  if (o.has("kv_cache_scheme")) return unimplemented(o.label() + ".kv_cache_scheme: an FP8 KV cache is not read yet");
  if (o.has("sparsity_config") && !(o.raw()["sparsity_config"].is_object() && o.raw()["sparsity_config"].empty())) {
    return unimplemented(o.label() + ".sparsity_config: sparse checkpoints are not supported");
  }
  ASSIGN_OR_RETURN(JsonObject groups, o.get_object("config_groups"));
  if (groups.raw().empty()) return invalid_argument(groups.label() + ": no groups");
  std::optional<Fp8Scheme> scheme;
  c.fp8_targets.clear();
  for (const auto& [name, value] : groups.raw().items()) {
    const std::string where = groups.label() + "." + name;
    Fp8Scheme s;
    if (value.is_array()) {  // a preset's name mapped to its targets (QuantizationConfig.model_post_init)
      if (name == "FP8") {
        s = {Fp8WeightScale::kTensor, Fp8InputScale::kStatic};
      } else if (name == "FP8_DYNAMIC") {
        s = {Fp8WeightScale::kChannel, Fp8InputScale::kDynamicToken};
      } else if (name == "FP8_BLOCK") {
        s = {Fp8WeightScale::kBlock, Fp8InputScale::kDynamicGroup, {128, 128}, 128};
      } else {
        return unimplemented(where + ": the preset scheme '" + name +
                             "' is not supported (FP8, FP8_DYNAMIC, FP8_BLOCK)");
      }
      for (const nlohmann::json& t : value) {
        if (!t.is_string() || t.get<std::string>().empty()) {
          return invalid_argument(where + ": expected a list of targets, got " + t.dump());
        }
        c.fp8_targets.push_back(t.get<std::string>());
      }
    } else {
      ASSIGN_OR_RETURN(JsonObject g, JsonObject::wrap(value, where));
      ASSIGN_OR_RETURN(s, parse_scheme(g));
      if (!g.has("targets")) return invalid_argument(where + ".targets: missing");
      RETURN_IF_ERROR(string_list(g, "targets", c.fp8_targets));
    }
    if (scheme.has_value() && !(*scheme == s)) {
      return unimplemented(where + ": config groups with different schemes are not supported");
    }
    scheme = s;
  }
  if (c.fp8_targets.empty()) return invalid_argument(groups.label() + ": no targets");
  c.fp8_weights = scheme->weights;
  c.fp8_inputs = scheme->inputs;
  c.fp8_block = scheme->block;
  c.fp8_input_group = scheme->group;
  RETURN_IF_ERROR(string_list(o, "ignore", c.fp8_ignore));
  RETURN_IF_ERROR(check_patterns(c.fp8_targets, groups.label() + ".targets"));
  return check_patterns(c.fp8_ignore, o.label() + ".ignore");
}

Status parse_autofp8(const JsonObject& o, QuantConfig& c) {
  ASSIGN_OR_RETURN(std::string scheme, o.get_string_or("activation_scheme", "dynamic"));
  if (scheme == "static") {
    c.fp8_inputs = Fp8InputScale::kStatic;
  } else if (scheme == "dynamic") {
    c.fp8_inputs = Fp8InputScale::kDynamicTensor;
  } else {
    return invalid_argument(o.label() + ".activation_scheme: '" + scheme + "': expected static or dynamic");
  }
  if (o.has("weight_block_size")) {
    const nlohmann::json& b = o.raw()["weight_block_size"];
    const std::string field = o.label() + ".weight_block_size";
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > (1 << 20) ||
        b[1].get<int64_t>() > (1 << 20)) {
      return invalid_argument(field + ": expected two positive integers [rows, cols], got " + b.dump());
    }
    if (c.fp8_inputs == Fp8InputScale::kStatic) {
      return unimplemented(o.label() +
                           ".activation_scheme: 'static' with block-wise weights is not supported "
                           "(block-wise checkpoints quantise their inputs dynamically)");
    }
    c.fp8_weights = Fp8WeightScale::kBlock;
    c.fp8_inputs = Fp8InputScale::kDynamicGroup;
    c.fp8_block = {b[0].get<int64_t>(), b[1].get<int64_t>()};
    c.fp8_input_group = c.fp8_block[1];
  }
  if (o.has("kv_cache_scheme")) return unimplemented(o.label() + ".kv_cache_scheme: an FP8 KV cache is not read yet");
  ASSIGN_OR_RETURN(std::string fmt, o.get_string_or("fmt", "e4m3"));
  if (lower(fmt) != "e4m3") return unimplemented(o.label() + ".fmt: '" + fmt + "' is not supported (e4m3)");
  RETURN_IF_ERROR(string_list(o, "ignored_layers", c.fp8_ignore));
  RETURN_IF_ERROR(string_list(o, "modules_to_not_convert", c.fp8_ignore));
  return check_patterns(c.fp8_ignore, o.label() + ".ignored_layers");
}

}  // namespace

const char* fp8_input_scale_name(Fp8InputScale s) {
  switch (s) {
    case Fp8InputScale::kNone: return "none";
    case Fp8InputScale::kStatic: return "static";
    case Fp8InputScale::kDynamicTensor: return "dynamic (per tensor)";
    case Fp8InputScale::kDynamicToken: return "dynamic (per token)";
  }
  return "?";
}

std::string QuantConfig::format_name() const {
  switch (method) {
    case QuantMethod::kAwq: return "awq gemm";
    case QuantMethod::kGptq: return gptq_v2 ? "gptq v2" : "gptq v1";
    case QuantMethod::kFp8: return compressed_tensors ? "fp8 compressed-tensors" : "fp8";
    case QuantMethod::kNone: break;
  }
  return "none";
}

StatusOr<QuantConfig> parse_quant_config(const nlohmann::json& config, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::wrap(config, label));
  QuantConfig c;
  if (!root.has("quantization_config")) return c;
  ASSIGN_OR_RETURN(JsonObject o, root.get_object("quantization_config"));
  ASSIGN_OR_RETURN(std::string method, o.get_string("quant_method"));
  const std::string m = lower(method);
  if (m == "awq") {
    c.method = QuantMethod::kAwq;
    RETURN_IF_ERROR(parse_awq(o, c));
  } else if (m == "gptq") {
    c.method = QuantMethod::kGptq;
    RETURN_IF_ERROR(parse_gptq(o, c));
  } else if (m == "fp8" || m == "compressed-tensors") {
    c.method = QuantMethod::kFp8;
    RETURN_IF_ERROR(m == "fp8" ? parse_autofp8(o, c) : parse_compressed_tensors(o, c));
  } else {
    return unimplemented(
        o.label() + ".quant_method: '" + method +
        "' is not supported (awq and gptq 4-bit, fp8 and compressed-tensors FP8 checkpoints are read)");
  }
  return c;
}

bool quant_converts_module(const QuantConfig& config, const std::string& module) {
  for (const std::string& e : config.modules_to_not_convert) {
    if (module == e || module.starts_with(e + ".") || module.ends_with("." + e) ||
        module.find("." + e + ".") != std::string::npos) {
      return false;
    }
  }
  return true;
}

StatusOr<bool> fp8_converts_module(const QuantConfig& config, const std::string& module) {
  bool targeted = false;
  for (const std::string& t : config.fp8_targets) {
    ASSIGN_OR_RETURN(const bool m, entry_matches(t, module));
    targeted = targeted || m;
  }
  if (!targeted) return false;
  for (const std::string& e : config.fp8_ignore) {
    if (e == "Linear") return false;  // ignoring the class: nothing is quantised
    ASSIGN_OR_RETURN(const bool m, entry_matches(e, module));
    if (m) return false;
  }
  // quant_method fp8: transformers' modules_to_not_convert also names a module's parents or a suffix ("model.layers.0",
  // "mlp.down_proj"), matched at dots as quant_converts_module does.
  if (!config.compressed_tensors) {
    QuantConfig dotted;
    for (const std::string& e : config.fp8_ignore) {
      if (!e.starts_with("re:")) dotted.modules_to_not_convert.push_back(e);
    }
    return quant_converts_module(dotted, module);
  }
  return true;
}

nlohmann::json quant_config_to_json(const QuantConfig& c) {
  nlohmann::json j;
  if (c.method == QuantMethod::kFp8 && !c.compressed_tensors) {  // AutoFP8's, or transformers' FineGrainedFP8Config
    j = {{"quant_method", "fp8"},
         {"activation_scheme", c.fp8_inputs == Fp8InputScale::kStatic ? "static" : "dynamic"},
         {"ignored_layers", c.fp8_ignore}};
    if (c.fp8_weights == Fp8WeightScale::kBlock) j["weight_block_size"] = c.fp8_block;
    return j;
  }
  if (c.method == QuantMethod::kFp8) {  // compressed-tensors, as llm-compressor's FP8 / FP8_DYNAMIC presets save
    auto args = [](const char* strategy, bool dynamic) {
      return nlohmann::json{{"num_bits", 8},
                            {"type", "float"},
                            {"strategy", strategy},
                            {"symmetric", true},
                            {"dynamic", dynamic},
                            {"group_size", nullptr},
                            {"block_structure", nullptr},
                            {"actorder", nullptr},
                            {"observer", dynamic ? nullptr : nlohmann::json("minmax")},
                            {"observer_kwargs", nlohmann::json::object()}};
    };
    nlohmann::json group = {{"targets", c.fp8_targets},
                            {"weights", args(c.fp8_weights == Fp8WeightScale::kChannel ? "channel"
                                             : c.fp8_weights == Fp8WeightScale::kBlock ? "block"
                                                                                       : "tensor",
                                             false)},
                            {"input_activations", nullptr},
                            {"output_activations", nullptr},
                            {"format", "float-quantized"}};
    if (c.fp8_inputs == Fp8InputScale::kStatic) group["input_activations"] = args("tensor", false);
    if (c.fp8_inputs == Fp8InputScale::kDynamicTensor) group["input_activations"] = args("tensor", true);
    if (c.fp8_inputs == Fp8InputScale::kDynamicToken) group["input_activations"] = args("token", true);
    if (c.fp8_inputs == Fp8InputScale::kDynamicGroup) {
      group["input_activations"] = args("group", true);
      group["input_activations"]["group_size"] = c.fp8_input_group;
    }
    if (c.fp8_weights == Fp8WeightScale::kBlock) group["weights"]["block_structure"] = c.fp8_block;
    return {{"quant_method", "compressed-tensors"},
            {"format", "float-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups", {{"group_0", group}}},
            {"ignore", c.fp8_ignore},
            {"kv_cache_scheme", nullptr},
            {"global_compression_ratio", nullptr},
            {"sparsity_config", nlohmann::json::object()}};
  }
  if (c.method == QuantMethod::kAwq) {
    j = {{"quant_method", "awq"},
         {"version", "gemm"},
         {"bits", c.bits},
         {"group_size", c.group_size},
         {"zero_point", c.zero_point}};
  } else if (c.method == QuantMethod::kGptq) {
    j = {{"quant_method", "gptq"}, {"bits", c.bits}, {"group_size", c.group_size},
         {"desc_act", c.desc_act}, {"sym", c.sym},   {"checkpoint_format", c.gptq_v2 ? "gptq_v2" : "gptq"}};
  }
  if (c.method == QuantMethod::kAwq || !c.modules_to_not_convert.empty()) {  // AwqConfig has the key, GPTQConfig not
    j["modules_to_not_convert"] =
        c.modules_to_not_convert.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.modules_to_not_convert);
  }
  return j;
}

}  // namespace mmserve::models
