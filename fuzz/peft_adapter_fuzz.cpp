// libFuzzer target for PEFT adapter directories (issue 16: adapter_config.json and adapter_model.safetensors are a
// tenant's bytes): the decoders' reader (models/lora/lora_adapter.h, over a tiny Llama and a tiny LLaVA's projector)
// and CLIP's (models/clip/clip_lora.h, over a tiny CLIPModel; models/lora/peft_lora_file.h underneath). The input is
// split into the two files: bytes 0-1 (little endian) give the length of adapter_config.json, which follows them (cut
// at the input's end); the rest is adapter_model.safetensors. Byte 2's low bit, when present, picks the reader.
//
// Checked: a refusal carries a message; an accepted adapter has at least one module, and every module's matrices
// hold rank x in and out x rank values of the reader's shapes, with a rank inside 1..the largest. ASan/UBSan flag any
// read the readers let through. Seeds (fuzz/corpus/peft_adapter_fuzz): the committed PEFT fixtures
// (tests/fixtures/lora) in this format, and a few broken ones.
// Run: build/fuzz/fuzz/peft_adapter_fuzz -max_total_time=60 fuzz/corpus/peft_adapter_fuzz
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/clip/clip_lora.h"
#include "models/lora/lora_adapter.h"

namespace fs = std::filesystem;
using namespace mmserve::models;

namespace {

void check_module(const LoraModule& m, int64_t max_rank) {
  if (!m.present()) return;
  if (m.rank < 1 || m.rank > max_rank || m.in < 1 || m.out < 1) __builtin_trap();
  if (static_cast<int64_t>(m.a.size()) != m.rank * m.in || static_cast<int64_t>(m.b.size()) != m.out * m.rank) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3 || size > (256 << 10)) return 0;
  const size_t json_size = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
  const std::string json(reinterpret_cast<const char*>(data + 2), json_size);
  const std::string tensors(reinterpret_cast<const char*>(data + 2 + json_size), size - 2 - json_size);
  const bool clip = (data[2] & 1) != 0;

  static const fs::path dir = fs::temp_directory_path() / ("mmserve_peft_adapter_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json", std::ios::binary) << json;
  std::ofstream(dir / "adapter_model.safetensors", std::ios::binary) << tensors;

  if (clip) {  // clip-tiny-quickgelu-f32's shapes
    ClipConfig c;
    c.vision.hidden_size = 24, c.vision.intermediate_size = 53, c.vision.num_hidden_layers = 2;
    c.text.hidden_size = 12, c.text.intermediate_size = 37, c.text.num_hidden_layers = 2;
    c.projection_dim = 10;
    auto lora = load_clip_lora(dir.string(), "fuzz", c);
    if (!lora.ok()) {
      if (lora.status().message().empty()) __builtin_trap();
      return 0;
    }
    if ((*lora)->file.modules.empty() || !((*lora)->vision || (*lora)->text)) __builtin_trap();
    for (const auto& [name, m] : (*lora)->file.modules) check_module(m, (*lora)->file.max_rank);
    return 0;
  }
  LlamaConfig c;  // llama-gqa-f32's shapes, under a LLaVA's two prefixes, with a projector
  c.hidden_size = 64, c.intermediate_size = 48, c.num_hidden_layers = 2, c.num_attention_heads = 4;
  c.num_key_value_heads = 2, c.head_dim = 16, c.vocab_size = 256;
  const LoraProjectorShape projector{{"model.multi_modal_projector.", "multi_modal_projector."}, 24, 64};
  auto adapter = load_lora_adapter(dir.string(), "fuzz", c, {"model.", "model.language_model."}, nullptr, &projector);
  if (!adapter.ok()) {
    if (adapter.status().message().empty()) __builtin_trap();
    return 0;
  }
  const LoraAdapter& a = **adapter;
  if (static_cast<int64_t>(a.layers.size()) != c.num_hidden_layers || a.max_rank < 1 || a.target_names().empty()) {
    __builtin_trap();
  }
  for (const auto& layer : a.layers) {
    for (const LoraModule& m : layer) check_module(m, a.max_rank);
  }
  for (const LoraModule& m : a.projector) check_module(m, a.max_rank);
  return 0;
}
