// Test helper: a PEFT LoRA adapter directory written as PEFT saves one (adapter_config.json as given, and
// adapter_model.safetensors with base_model.model.model.layers.L.<path>.lora_A.weight [rank, in] and .lora_B.weight
// [out, rank]), random values (normal, std 0.3, fixed seeds) stored in f32, f16 or bf16, and a test fixture with a
// scratch directory to write them in; Mixtral's experts as PEFT's ParamWrapper saves them (experts_matrices). Used by
// lora_adapter_test, lora_experts_test and llama_cuda_lora_image_test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "models/llama/llama.h"

namespace mmserve::testing {

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One matrix as adapter_model.safetensors holds it (f32 here; written in the dtype asked for).
struct SavedMatrix {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::string param;  // Mixtral's experts: the parameter the pair adapts ("experts.gate_up_proj"); else empty
};

// adapter_config.json as given and `matrices` stored in `dtype`.
inline void write_adapter_files(const std::filesystem::path& dir, const std::string& config_json,
                                const std::vector<SavedMatrix>& matrices, DType dtype = DType::kF32) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << config_json;
  std::vector<std::vector<uint8_t>> storage;  // each matrix's bytes in `dtype`
  std::vector<TensorToWrite> out;
  storage.reserve(matrices.size());
  for (const SavedMatrix& m : matrices) {
    std::vector<uint8_t> bytes(m.values.size() * dtype_size(dtype));
    convert_from_f32(m.values.data(), dtype, bytes.data(), static_cast<int64_t>(m.values.size()));
    storage.push_back(std::move(bytes));
    out.push_back({m.name, dtype, m.shape, storage.back().data()});
  }
  ASSERT_TRUE(write_safetensors((dir / "adapter_model.safetensors").string(), out).ok());
}

struct AdapterModule {
  int64_t layer;
  std::string path;  // under the layer: "self_attn.q_proj", "mlp.down_proj"
  int64_t rank;
};

// Each module's A then B drawn with seeds `seed`, `seed` + 1, ... in `modules`' order.
inline std::vector<SavedMatrix> module_matrices(const models::LlamaConfig& c, const std::vector<AdapterModule>& modules,
                                                uint32_t seed) {
  const int64_t h = c.hidden_size, i = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  const std::map<std::string, std::pair<int64_t, int64_t>> in_out = {
      {"q_proj", {h, q}},    {"k_proj", {h, kv}}, {"v_proj", {h, kv}},  {"o_proj", {q, h}},
      {"gate_proj", {h, i}}, {"up_proj", {h, i}}, {"down_proj", {i, h}}};
  std::vector<SavedMatrix> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, uint32_t s) {
    out.push_back({name, shape, random_values(static_cast<size_t>(shape[0] * shape[1]), s, 0.3f), ""});
  };
  for (const AdapterModule& m : modules) {
    const auto [in, o] = in_out.at(m.path.substr(m.path.find('.') + 1));
    const std::string base = "base_model.model.model.layers." + std::to_string(m.layer) + "." + m.path;
    add(base + ".lora_A.weight", {m.rank, in}, seed++);
    add(base + ".lora_B.weight", {o, m.rank}, seed++);
  }
  return out;
}

// module_matrices stored in `dtype`.
inline void write_adapter_modules(const std::filesystem::path& dir, const models::LlamaConfig& c,
                                  const std::string& config_json, const std::vector<AdapterModule>& modules,
                                  uint32_t seed, DType dtype = DType::kF32) {
  write_adapter_files(dir, config_json, module_matrices(c, modules, seed), dtype);
}

// Mixtral's experts as PEFT's ParamWrapper saves them (target_parameters over transformers 5's fused
// mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I]): per layer, for each of `params` in order, lora_A
// [E rank, in] and lora_B [out, E rank] (expert e's rank j in column j E + e), named ".mlp.experts.base_layer." for
// the first of two parameters (the inner wrapper) and ".mlp.experts." for the last. Random values, A then B of each
// pair drawn with seeds `seed`, `seed` + 1, ... layer by layer (std `stddev`).
inline std::vector<SavedMatrix> experts_matrices(const models::LlamaConfig& c, const std::vector<std::string>& params,
                                                 int64_t rank, uint32_t seed, float stddev = 0.3f) {
  const int64_t width = c.num_experts * rank, h = c.hidden_size, i = c.intermediate_size;
  std::vector<SavedMatrix> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (size_t p = 0; p < params.size(); ++p) {
      const bool gate_up = params[p] == "experts.gate_up_proj";
      const int64_t in = gate_up ? h : i, o = gate_up ? 2 * i : h;
      const std::string base = "base_model.model.model.layers." + std::to_string(l) + ".mlp.experts." +
                               (p + 1 < params.size() ? "base_layer." : "");
      out.push_back({base + "lora_A.weight",
                     {width, in},
                     random_values(static_cast<size_t>(width * in), seed++, stddev),
                     params[p]});
      out.push_back({base + "lora_B.weight",
                     {o, width},
                     random_values(static_cast<size_t>(o * width), seed++, stddev),
                     params[p]});
    }
  }
  return out;
}

// `targets` (path and rank) on every layer.
inline void write_adapter(const std::filesystem::path& dir, const models::LlamaConfig& c,
                          const std::string& config_json, const std::vector<std::pair<std::string, int64_t>>& targets,
                          uint32_t seed, DType dtype = DType::kF32) {
  std::vector<AdapterModule> modules;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const auto& [path, rank] : targets) modules.push_back({l, path, rank});
  }
  write_adapter_modules(dir, c, config_json, modules, seed, dtype);
}

// root_: a fresh directory per test (the pid and the test's name), removed after it.
class AdapterDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("mmserve_lora_" + std::to_string(::getpid()) + "_" +
                                                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::filesystem::path root_;
};

}  // namespace mmserve::testing
