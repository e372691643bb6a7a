// libFuzzer target for PEFT adapter_config.json files (models/lora/peft_config.h: an adapter directory a tenant
// brings is outside bytes). Arbitrary text through parse_peft_lora_config; an accepted config is asked for the rank,
// scale and targeting of a few module names, which must give a positive rank and a finite scale, or (a pattern too
// costly to match) the same refusal for both, with its reason, in bounded time (PCRE2's limits). A broken promise
// aborts. Seeds (fuzz/corpus/peft_config_fuzz): adapter configs of the kinds PEFT writes (lists, regex targets,
// patterns, rsLoRA). Run: build/fuzz/fuzz/peft_config_fuzz -max_total_time=60 fuzz/corpus/peft_config_fuzz.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "models/lora/peft_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (16 << 10)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = mmserve::models::parse_peft_lora_config(text, "adapter_config.json");
  if (!config.ok()) return 0;
  for (const char* module : {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj", "q_proj", ""}) {
    const auto r = config->rank_for(module);
    const auto scale = config->scale_for(module);
    if (r.ok() != scale.ok()) std::abort();  // the same patterns decide both
    if (r.ok() && (*r <= 0 || !std::isfinite(*scale))) std::abort();
    if (!r.ok() && r.status().message().empty()) std::abort();  // a refusal says why
    (void)config->targets(module);
  }
  return 0;
}
