// libFuzzer target for config.json's quantization_config (models/quant/quant_config.h: a checkpoint a user brings is
// outside bytes). Arbitrary text through parse_json and parse_quant_config; an accepted config must hold 4 bits and a
// group size that is -1 or positive, answer quant_converts_module for a few names, give consistent tensor specs for a
// few linear sizes (check_int4_dims first), and survive quant_config_to_json -> parse_quant_config with the same
// method, group size and GPTQ settings. An accepted FP8 config (compressed-tensors, AutoFP8) must answer
// fp8_converts_module for those names (its "re:" patterns are bounded) and survive the round trip with the same weight
// and input schemes, targets and ignore list. A refusal must say why. A broken promise aborts.
// Seeds (fuzz/corpus/quant_config_fuzz): AWQ, GPTQ and FP8 configs as the hub's files carry them.
// Run: build/fuzz/fuzz/quant_config_fuzz -max_total_time=60 fuzz/corpus/quant_config_fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/json_config.h"
#include "models/quant/int4_checkpoint.h"
#include "models/quant/quant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmserve::models;
  if (size > (16 << 10)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto json = mmserve::parse_json(text, "config.json");
  if (!json.ok()) return 0;
  auto config = parse_quant_config(*json, "config.json");
  if (!config.ok()) {
    if (config.status().message().empty()) std::abort();
    return 0;
  }
  if (!config->quantized()) return 0;
  if (config->bits != 4 || (config->group_size != -1 && config->group_size <= 0)) std::abort();
  for (const char* module : {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj", "lm_head", ""}) {
    (void)quant_converts_module(*config, module);
    if (config->method == QuantMethod::kFp8) (void)fp8_converts_module(*config, module);
  }
  if (config->method == QuantMethod::kFp8) {
    auto back = parse_quant_config(nlohmann::json{{"quantization_config", quant_config_to_json(*config)}}, "again");
    if (!back.ok() || back->method != QuantMethod::kFp8 || back->fp8_weights != config->fp8_weights ||
        back->fp8_inputs != config->fp8_inputs || back->fp8_targets != config->fp8_targets ||
        back->fp8_ignore != config->fp8_ignore || back->fp8_block != config->fp8_block ||
        back->fp8_input_group != config->fp8_input_group) {
      std::abort();
    }
    return 0;
  }
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{64, 96}, {8, 8}, {4096, 14336}}) {
    if (!check_int4_dims(*config, "l", n, k).ok()) continue;
    const auto specs = int4_weight_specs(*config, "l", n, k);
    if (specs.size() != (config->method == QuantMethod::kGptq ? 4u : 3u)) std::abort();
    for (const auto& s : specs) {
      for (int64_t d : s.shape) {
        if (d <= 0) std::abort();
      }
    }
  }
  nlohmann::json again = {{"quantization_config", quant_config_to_json(*config)}};
  auto back = parse_quant_config(again, "again");
  if (!back.ok() || back->method != config->method || back->group_size != config->group_size ||
      back->desc_act != config->desc_act || back->sym != config->sym || back->gptq_v2 != config->gptq_v2 ||
      back->modules_to_not_convert != config->modules_to_not_convert) {
    std::abort();
  }
  return 0;
}
