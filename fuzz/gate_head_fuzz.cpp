// libFuzzer target for the adapter router's files (models/lora/gate_head.h: gate.safetensors and the gate.json
// beside it come with a model a tenant brings, so they are outside bytes). GateHead::load reads a path, so the input
// is split into the two files and written to a scratch directory: bytes 0-1 (little endian) give the length of
// gate.json's text, which follows them (cut at the input's end); the rest is gate.safetensors.
//
// Checked: a refusal carries a message; an accepted gate names as many adapters as it has outputs, and routing an
// embedding of its width returns top-k indices inside 0..N-1, distinct, by descending weight, weights summing to 1
// and probabilities to 1 when the gate's values are finite; k outside 1..N and an embedding of another width are
// refused. ASan/UBSan flag any read the loader lets through. Seeds (fuzz/corpus/gate_head_fuzz): tiny gates of the
// shapes tools/reference/make_gate_fixtures.py writes, f32/f16/bf16, and a few broken ones.
// Run: build/fuzz/fuzz/gate_head_fuzz -max_total_time=60 fuzz/corpus/gate_head_fuzz
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "models/lora/gate_head.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A gate's numbers scale with the file, so this bound also keeps route()'s work per input small.
  if (size < 2 || size > (64 << 10)) return 0;
  const size_t json_size = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
  const std::string json(reinterpret_cast<const char*>(data + 2), json_size);
  const std::string tensors(reinterpret_cast<const char*>(data + 2 + json_size), size - 2 - json_size);

  static const fs::path dir = fs::temp_directory_path() / ("mmserve_gate_head_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "gate.json", std::ios::binary) << json;
  std::ofstream(dir / "gate.safetensors", std::ios::binary) << tensors;
  auto gate = mmserve::models::GateHead::load((dir / "gate.safetensors").string());
  if (!gate.ok()) {
    if (gate.status().message().empty()) __builtin_trap();
    return 0;
  }
  const int64_t d = gate->input_dim(), n = static_cast<int64_t>(gate->adapters().size());
  if (d <= 0 || n <= 0) __builtin_trap();
  for (const std::string& name : gate->adapters()) {
    if (name.empty()) __builtin_trap();
  }
  if (gate->route(std::vector<float>(static_cast<size_t>(d) + 1), 1).ok()) __builtin_trap();
  if (gate->route(std::vector<float>(static_cast<size_t>(d)), 0).ok()) __builtin_trap();
  if (gate->route(std::vector<float>(static_cast<size_t>(d)), n + 1).ok()) __builtin_trap();

  std::vector<float> e(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) e[c] = static_cast<float>((c * 37 + 11) % 19) / 19.0f - 0.5f;
  const int64_t k = std::min<int64_t>(2, n);
  auto choice = gate->route(e, k);
  if (!choice.ok()) __builtin_trap();
  if (static_cast<int64_t>(choice->index.size()) != k || choice->weight.size() != choice->index.size() ||
      static_cast<int64_t>(choice->probs.size()) != n) {
    __builtin_trap();
  }
  if (std::set<int64_t>(choice->index.begin(), choice->index.end()).size() != choice->index.size()) __builtin_trap();
  for (int64_t i : choice->index) {
    if (i < 0 || i >= n) __builtin_trap();
  }
  // Non-finite weights in the file (NaN, inf) may give NaN probabilities; the sums are promised only otherwise.
  const bool finite = std::all_of(choice->probs.begin(), choice->probs.end(), [](float p) { return std::isfinite(p); });
  if (finite) {
    double prob_sum = 0, weight_sum = 0;
    for (float p : choice->probs) prob_sum += p;
    for (float w : choice->weight) weight_sum += w;
    if (std::abs(prob_sum - 1) > 1e-3 || std::abs(weight_sum - 1) > 1e-3) __builtin_trap();
    for (size_t i = 1; i < choice->weight.size(); ++i) {
      if (choice->weight[i] > choice->weight[i - 1]) __builtin_trap();
    }
  }
  return 0;
}
