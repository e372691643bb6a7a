// libFuzzer target for HF config.json files (the models' config parsers: parse_clip_config, parse_llama_config,
// parse_llava_config; a checkpoint's config is outside bytes a user downloads). Arbitrary text as JSON, then each
// parser; an accepted config must keep the invariants the models rely on: positive sizes, head_dim even and the
// heads a multiple of the K/V heads, 1 <= experts_per_token <= num_experts <= 4096 for a Mixtral, and for a LLaVA
// feature layers inside the tower's hidden states, an image token inside the vocabulary and a positive token count.
// A broken promise aborts.
// Seeds (fuzz/corpus/hf_config_fuzz): the fixtures' llama, mixtral and llava config.json files.
// Run: build/fuzz/fuzz/hf_config_fuzz -max_total_time=60 fuzz/corpus/hf_config_fuzz (docs/testing.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "models/clip/clip.h"
#include "models/llama/llama.h"
#include "models/llava/llava.h"

namespace {

void check_llama(const mmserve::models::LlamaConfig& c) {
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.head_dim <= 0 || c.head_dim % 2 != 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    std::abort();
  }
  if (c.num_experts > 0 && (c.experts_per_token < 1 || c.experts_per_token > c.num_experts || c.num_experts > 4096)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64 << 10)) return 0;
  const nlohmann::json json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  if (auto llama = mmserve::models::parse_llama_config(json, "config.json"); llama.ok()) check_llama(*llama);
  (void)mmserve::models::parse_clip_config(json, "config.json");
  auto llava = mmserve::models::parse_llava_config(json, "config.json");
  if (llava.ok()) {
    check_llama(llava->text);
    const int64_t states = llava->vision.num_hidden_layers + 1;
    for (int64_t l : llava->feature_layers) {
      if (l < 0 || l >= states) std::abort();
    }
    if (llava->feature_layers.empty() || llava->tokens_per_image() <= 0 || llava->image_token_index < 0 ||
        llava->image_token_index >= llava->text.vocab_size) {
      std::abort();
    }
  }
  return 0;
}
