// adapter_config.json (see peft_config.h).
#include "models/lora/peft_config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace mmserve::models {
namespace {

using ojson = nlohmann::ordered_json;

// Python's re (what PEFT matches with) for what adapter configs use (alternation, classes, quantifiers, escapes),
// through PCRE2, whose syntax is Perl's like Python's, with its work bounded: std::regex backtracked for minutes on a
// pattern of nested quantifiers the fuzzer wrote (`q_pr*****...`), and an adapter's config is a tenant's bytes.
// Anchored at both ends: re.fullmatch, or re.match of a pattern ending in `$` (module names hold no newline).
constexpr uint32_t kMatchLimit = 1000000, kDepthLimit = 10000;

StatusOr<bool> full_match(const std::string& pattern, const std::string& text) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
  if (code == nullptr) {
    return invalid_argument("'" + pattern.substr(0, 120) + "' is not a regular expression mmserve can read");
  }
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(context, kMatchLimit);
  pcre2_set_depth_limit(context, kDepthLimit);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, context);
  pcre2_match_data_free(data);
  pcre2_match_context_free(context);
  pcre2_code_free(code);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
    return invalid_argument("the pattern '" + pattern.substr(0, 120) + "' takes too long to match '" +
                            text.substr(0, 120) + "' (nested quantifiers?)");
  }
  return internal_error("PCRE2 error " + std::to_string(rc) + " matching '" + pattern.substr(0, 120) + "'");
}

// PEFT's get_pattern_key: the first key whose `(.*\.)?(KEY)$` matches the whole name.
template <typename T>
StatusOr<const T*> pattern_value(const std::vector<std::pair<std::string, T>>& patterns, const std::string& module) {
  for (const auto& [key, value] : patterns) {
    ASSIGN_OR_RETURN(const bool match, full_match("(.*\\.)?(" + key + ")", module));
    if (match) return &value;
  }
  return static_cast<const T*>(nullptr);
}

bool list_matches(const std::vector<std::string>& list, const std::string& module) {
  for (const std::string& t : list) {
    if (module == t || (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
                        module[module.size() - t.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

Status check_regex(const std::string& pattern, const std::string& where) {
  if (pattern.size() > 512) return invalid_argument(where + ": a pattern of more than 512 characters");
  const StatusOr<bool> compiles = full_match(pattern, "");
  if (!compiles.ok()) return invalid_argument(where + ": " + std::string(compiles.status().message()));
  return ok_status();
}

// A list of strings or one string (a regular expression), or null/absent.
Status read_modules(const ojson& j, const std::string& key, const std::string& where, std::vector<std::string>& list,
                    std::optional<std::string>& regex) {
  if (!j.contains(key) || j[key].is_null()) return ok_status();
  const ojson& v = j[key];
  if (v.is_string()) {
    regex = v.get<std::string>();
    return check_regex(*regex, where + ": " + key);
  }
  if (!v.is_array()) return invalid_argument(where + ": " + key + " must be a list of module names or a string");
  for (const ojson& e : v) {
    if (!e.is_string()) return invalid_argument(where + ": " + key + " must hold strings");
    list.push_back(e.get<std::string>());
  }
  return ok_status();
}

// "a truthy value of an option we do not apply" -> kUnimplemented naming it.
bool set(const ojson& j, const std::string& key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  const ojson& v = j[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_array() || v.is_object() || v.is_string()) return !v.empty() && !(v.is_string() && v.get<std::string>().empty());
  return true;
}

}  // namespace

StatusOr<int64_t> PeftLoraConfig::rank_for(const std::string& module) const {
  ASSIGN_OR_RETURN(const int64_t* v, pattern_value(rank_pattern, module));
  return v != nullptr ? *v : r;
}

StatusOr<double> PeftLoraConfig::alpha_for(const std::string& module) const {
  ASSIGN_OR_RETURN(const double* v, pattern_value(alpha_pattern, module));
  return v != nullptr ? *v : lora_alpha;
}

StatusOr<double> PeftLoraConfig::scale_for(const std::string& module) const {
  ASSIGN_OR_RETURN(const int64_t rank, rank_for(module));
  ASSIGN_OR_RETURN(const double alpha, alpha_for(module));
  return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

StatusOr<bool> PeftLoraConfig::targets(const std::string& module) const {
  bool in = false, out = false;
  if (target_regex) {
    ASSIGN_OR_RETURN(in, full_match(*target_regex, module));
  } else {
    in = list_matches(target_list, module);
  }
  if (!in) return false;
  if (exclude_regex) {
    ASSIGN_OR_RETURN(out, full_match(*exclude_regex, module));
  } else {
    out = list_matches(exclude_list, module);
  }
  return !out;
}

StatusOr<PeftLoraConfig> parse_peft_lora_config(const std::string& json_text, const std::string& where) {
  const ojson j = ojson::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(where + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(where + ": must be a JSON object");
  const std::string type = j.contains("peft_type") && j["peft_type"].is_string() ? j["peft_type"].get<std::string>() : "";
  if (type != "LORA") {
    return unimplemented(where + ": peft_type '" + type.substr(0, 40) + "': mmserve serves LoRA adapters (LORA)");
  }
  // Options that change the forward (initialisation-only ones such as loftq_config, eva_config, corda_config and
  // lora_ga_config do not).
  for (const char* key : {"use_dora", "lora_bias", "modules_to_save", "layer_replication", "trainable_token_indices",
                          "alora_invocation_tokens", "use_qalora", "arrow_config", "kasa_config", "monteclora_config",
                          "velora_config", "use_bdlora"}) {
    if (set(j, key)) return unimplemented(where + ": " + key + " is not supported (mmserve applies plain LoRA deltas)");
  }
  if (j.contains("bias") && !j["bias"].is_null() && j["bias"] != "none") {
    return unimplemented(where + ": bias '" + j["bias"].dump().substr(0, 40) + "' is not supported (only \"none\")");
  }
  PeftLoraConfig c;
  auto number = [&](const char* key, double fallback) -> StatusOr<double> {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) return invalid_argument(where + ": " + key + " must be a number");
    return j[key].get<double>();
  };
  ASSIGN_OR_RETURN(const double r, number("r", 8));
  ASSIGN_OR_RETURN(c.lora_alpha, number("lora_alpha", 8));
  if (r <= 0 || r != std::floor(r) || r > 65536) return invalid_argument(where + ": r must be a positive integer");
  c.r = static_cast<int64_t>(r);
  for (const char* key : {"use_rslora", "fan_in_fan_out"}) {
    if (j.contains(key) && !j[key].is_null() && !j[key].is_boolean()) {
      return invalid_argument(where + ": " + key + " must be true or false");
    }
  }
  c.use_rslora = j.value("use_rslora", false);
  c.fan_in_fan_out = j.value("fan_in_fan_out", false);
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) {
    c.base_model = j["base_model_name_or_path"].get<std::string>();
  }
  RETURN_IF_ERROR(read_modules(j, "target_modules", where, c.target_list, c.target_regex));
  RETURN_IF_ERROR(read_modules(j, "exclude_modules", where, c.exclude_list, c.exclude_regex));
  if (j.contains("target_parameters") && !j["target_parameters"].is_null()) {
    const ojson& v = j["target_parameters"];
    if (!v.is_array()) return invalid_argument(where + ": target_parameters must be a list of parameter names");
    for (const ojson& e : v) {
      if (!e.is_string()) return invalid_argument(where + ": target_parameters must hold strings");
      c.target_parameters.push_back(e.get<std::string>());
    }
  }
  if (c.target_list.empty() && !c.target_regex && c.target_parameters.empty()) {
    return invalid_argument(where + ": target_modules names no module");
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_object()) return invalid_argument(where + ": " + key + " must be an object");
    for (const auto& [pattern, value] : j[key].items()) {
      RETURN_IF_ERROR(check_regex("(.*\\.)?(" + pattern + ")", where + ": " + key + " key"));
      if (!value.is_number() || value.get<double>() <= 0) {
        return invalid_argument(where + ": " + key + "['" + pattern.substr(0, 80) + "'] must be a positive number");
      }
      if (std::string(key) == "rank_pattern") {
        if (value.get<double>() != std::floor(value.get<double>()) || value.get<double>() > 65536) {
          return invalid_argument(where + ": rank_pattern['" + pattern.substr(0, 80) + "'] must be an integer");
        }
        c.rank_pattern.emplace_back(pattern, value.get<int64_t>());
      } else {
        c.alpha_pattern.emplace_back(pattern, value.get<double>());
      }
    }
    if (!j[key].empty() && !c.target_parameters.empty()) {
      return unimplemented(where + ": " + std::string(key) +
                           " beside target_parameters is not supported (how PEFT matches its keys to parameters is "
                           "not known to mmserve; give every parameter r and lora_alpha)");
    }
  }
  return c;
}

}  // namespace mmserve::models
