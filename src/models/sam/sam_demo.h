// The built-in demo SAM: a small SamModel directory (256 px, 16 x 16 grid, windowed + global attention with
// rel-pos bias) with deterministic random weights, in HF's format so it loads through exactly the same code
// path as a downloaded facebook/sam-vit-base. Its masks carry no meaning; it exists so that `make serve` serves
// a segmentation model and users can try /v1/segment and `mmserve segment` at once.
// Tests: tests/unit/engine/sam_executor_test.cpp (SamDemo).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace mmserve::models {

// Writes config.json, preprocessor_config.json and model.safetensors (f32) into `dir` (which must be empty or
// absent unless `overwrite`).
Status write_demo_sam(const std::string& dir, bool overwrite = false, uint64_t seed = 20261202);

}  // namespace mmserve::models
