// Test helper: a PEFT LoRA adapter directory written as PEFT saves one (adapter_config.json as given, and
// adapter_model.safetensors with base_model.model.model.layers.L.<path>.lora_A.weight [rank, in] and .lora_B.weight
// [out, rank]), random values (normal, std 0.3, fixed seeds) stored in f32, f16 or bf16, and a test fixture with a
// scratch directory to write them in. Used by lora_adapter_test and llama_cuda_lora_image_test.
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

struct AdapterModule {
  int64_t layer;
  std::string path;  // under the layer: "self_attn.q_proj", "mlp.down_proj"
  int64_t rank;
};

// Each module's A then B drawn with seeds `seed`, `seed` + 1, ... in `modules`' order, stored in `dtype`.
inline void write_adapter_modules(const std::filesystem::path& dir, const models::LlamaConfig& c,
                                  const std::string& config_json, const std::vector<AdapterModule>& modules,
                                  uint32_t seed, DType dtype = DType::kF32) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << config_json;
  const int64_t h = c.hidden_size, i = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  const std::map<std::string, std::pair<int64_t, int64_t>> in_out = {
      {"q_proj", {h, q}},    {"k_proj", {h, kv}}, {"v_proj", {h, kv}},  {"o_proj", {q, h}},
      {"gate_proj", {h, i}}, {"up_proj", {h, i}}, {"down_proj", {i, h}}};
  std::vector<std::vector<uint8_t>> storage;  // each matrix's bytes in `dtype`
  std::vector<TensorToWrite> out;
  storage.reserve(2 * modules.size());
  auto add = [&](const std::string& name, std::vector<int64_t> shape, uint32_t s) {
    const std::vector<float> v = random_values(static_cast<size_t>(shape[0] * shape[1]), s, 0.3f);
    std::vector<uint8_t> bytes(v.size() * dtype_size(dtype));
    convert_from_f32(v.data(), dtype, bytes.data(), static_cast<int64_t>(v.size()));
    storage.push_back(std::move(bytes));
    out.push_back({name, dtype, std::move(shape), storage.back().data()});
  };
  for (const AdapterModule& m : modules) {
    const auto [in, o] = in_out.at(m.path.substr(m.path.find('.') + 1));
    const std::string base = "base_model.model.model.layers." + std::to_string(m.layer) + "." + m.path;
    add(base + ".lora_A.weight", {m.rank, in}, seed++);
    add(base + ".lora_B.weight", {o, m.rank}, seed++);
  }
  ASSERT_TRUE(write_safetensors((dir / "adapter_model.safetensors").string(), out).ok());
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
