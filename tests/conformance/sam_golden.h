// Reading SAM's HF goldens (tests/fixtures/sam/*/golden.json, made by tools/reference/make_sam_fixtures.py) for the
// CPU and CUDA conformance tests: the prompt exactly as HF's model received it (model_inputs: the processor's
// output, nested as HF nests one image's prompt).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/sam/sam.h"

namespace mmserve::testing {

inline std::vector<double> flatten(const nlohmann::json& j) {
  std::vector<double> out;
  if (j.is_array()) {
    for (const auto& e : j) {
      std::vector<double> inner = flatten(e);
      out.insert(out.end(), inner.begin(), inner.end());
    }
  } else {
    out.push_back(j.get<double>());
  }
  return out;
}

// `mask`: the case's input_masks ([mask_side, mask_side]) or null.
inline models::SamPrompt prompt_of(const nlohmann::json& c, const std::vector<float>* mask, int64_t mask_side) {
  models::SamPrompt p;
  const nlohmann::json& in = c["model_inputs"];
  if (in.contains("input_points")) {
    const std::vector<double> xy = flatten(in["input_points"]["values"]);
    for (size_t i = 0; i + 1 < xy.size(); i += 2) p.points.push_back({float(xy[i]), float(xy[i + 1])});
  }
  if (in.contains("input_labels")) {
    for (double l : flatten(in["input_labels"]["values"])) p.labels.push_back(static_cast<int32_t>(l));
  }
  if (in.contains("input_boxes")) {
    const std::vector<double> b = flatten(in["input_boxes"]["values"]);
    for (size_t i = 0; i + 3 < b.size(); i += 4)
      p.boxes.push_back({float(b[i]), float(b[i + 1]), float(b[i + 2]), float(b[i + 3])});
  }
  if (mask != nullptr) {
    p.mask_input = mask->data();
    p.mask_height = p.mask_width = mask_side;
  }
  return p;
}

}  // namespace mmserve::testing
