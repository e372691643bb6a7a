// quantization_config parsing (see quant_config.h).
#include "models/quant/quant_config.h"

#include <algorithm>
#include <cctype>

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
    return unimplemented(o.label() + "." + key + ": " + std::to_string(c.bits) + "-bit weights are not supported (4 only)");
  }
  if (c.bits != 4) return invalid_argument(o.label() + "." + key + ": " + std::to_string(c.bits) + " is not a bit width");
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

}  // namespace

std::string QuantConfig::format_name() const {
  switch (method) {
    case QuantMethod::kAwq:
      return "awq gemm";
    case QuantMethod::kGptq:
      return gptq_v2 ? "gptq v2" : "gptq v1";
    case QuantMethod::kNone:
      break;
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
    return unimplemented(o.label() + ".quant_method: '" + method + "': FP8 checkpoints: not yet");
  } else {
    return unimplemented(o.label() + ".quant_method: '" + method +
                         "' is not supported (awq and gptq 4-bit checkpoints are read)");
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

nlohmann::json quant_config_to_json(const QuantConfig& c) {
  nlohmann::json j;
  if (c.method == QuantMethod::kAwq) {
    j = {{"quant_method", "awq"}, {"version", "gemm"}, {"bits", c.bits}, {"group_size", c.group_size},
         {"zero_point", c.zero_point}};
  } else if (c.method == QuantMethod::kGptq) {
    j = {{"quant_method", "gptq"},     {"bits", c.bits}, {"group_size", c.group_size},
         {"desc_act", c.desc_act},     {"sym", c.sym},   {"checkpoint_format", c.gptq_v2 ? "gptq_v2" : "gptq"}};
  }
  if (c.method == QuantMethod::kAwq || !c.modules_to_not_convert.empty()) {  // AwqConfig has the key, GPTQConfig not
    j["modules_to_not_convert"] = c.modules_to_not_convert.empty() ? nlohmann::json(nullptr)
                                                                   : nlohmann::json(c.modules_to_not_convert);
  }
  return j;
}

}  // namespace mmserve::models
