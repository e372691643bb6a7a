// The built-in demo model: a small CLIPModel directory with deterministic random weights and the real CLIP
// tokenizer, written in HF's format so it loads through exactly the same code path as a downloaded
// openai/clip-vit-base-patch32. No real CLIP weights can be shipped or downloaded here, so its embeddings carry
// no meaning; it exists so that `make serve` and the tests have a model to run.
// Tests: tests/unit/models/clip_demo_test.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace mmserve::models {

struct DemoModelOptions {
  uint64_t seed = 20261129;
  bool overwrite = false;  // otherwise an existing non-empty directory is an error
  // "small" (the demo) or "vit-b32" (openai/clip-vit-base-patch32's architecture, for benchmarks).
  std::string architecture = "small";
};

// Writes config.json, model.safetensors (f16), vocab.json, merges.txt, tokenizer_config.json,
// special_tokens_map.json, preprocessor_config.json and a README into `dir`.
Status write_demo_clip(const std::string& dir, const DemoModelOptions& options = {});

}  // namespace mmserve::models
