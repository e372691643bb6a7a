// What the Whisper GPU tests share (whisper_cuda_test.cpp, whisper_cuda_tp_test.cpp): a fixture of
// tests/fixtures/whisper loaded with its HF goldens (tools/reference/make_whisper_fixtures.py), the small model
// options both build with, the relative error, and the decoding loops: one row over one encoder window, teacher
// forced along HF's golden ids or free running (argmax), on any WhisperBackend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/whisper/whisper.h"
#include "models/whisper/whisper_cuda.h"
#include "models/whisper/whisper_decoding.h"
#include "test_paths.h"

namespace mmserve::models::testing {

// One fixture: the CPU model (its f32 weights are what a GPU model uploads), golden.safetensors, the shared log-mel
// goldens, the log-mel input (the 80-bin model reads jfk's from logmel_golden, the 128-bin one its own
// input_features) and the greedy golden of golden.json.
struct WhisperGpuFixture {
  std::string dir;
  std::unique_ptr<WhisperModel> host;
  std::unique_ptr<SafetensorsFile> golden, logmel;
  const TensorInfo* features = nullptr;
  std::vector<float> mel;
  std::vector<int32_t> prompt, tokens;  // greedy_raw: the SOT prompt and HF's greedy ids after it
  std::vector<double> margins;          // HF's top-1 minus top-2 logit at each of those steps
  Tensor mel_tensor() { return Tensor(mel.data(), DType::kF32, {1, host->config().num_mel_bins, 3000}); }
};

// Loads tests/fixtures/whisper/`name` into `f` (fails the test if anything is missing: call it under
// ASSERT_NO_FATAL_FAILURE).
inline void load_whisper_gpu_fixture(const std::string& name, WhisperGpuFixture& f) {
  const std::filesystem::path root = std::filesystem::path(MMSERVE_FIXTURES_DIR) / "whisper";
  f.dir = (root / name).string();
  auto host = WhisperModel::load(f.dir);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  f.host = std::move(*host);
  auto golden = SafetensorsFile::open(f.dir + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  f.golden = std::move(*golden);
  auto logmel = SafetensorsFile::open((root / "logmel_golden.safetensors").string());
  ASSERT_TRUE(logmel.ok()) << logmel.status().to_string();
  f.logmel = std::move(*logmel);
  f.features = f.host->config().num_mel_bins == 80 ? f.logmel->find("logmel_jfk") : f.golden->find("input_features");
  ASSERT_TRUE(f.features);
  const auto* data = reinterpret_cast<const float*>(f.features->data);
  f.mel.assign(data, data + f.features->numel());
  std::ifstream json_file(f.dir + "/golden.json");
  const nlohmann::json info = nlohmann::json::parse(json_file);
  f.prompt = info["greedy_raw"]["prompt"].get<std::vector<int32_t>>();
  f.tokens = info["greedy_raw"]["tokens"].get<std::vector<int32_t>>();
  f.margins = info["greedy_raw"]["top1_top2_margin"].get<std::vector<double>>();
}

// The small models both tests build: 4 rows in step-graph buckets 1, 2, 4, 64 tokens each.
inline WhisperCudaOptions small_gpu_options(DType dtype, bool graphs) {
  WhisperCudaOptions o;
  o.dtype = dtype;
  o.max_batch = 4;
  o.buckets = {1, 2, 4};
  o.capacity = 64;
  o.cuda_graphs = graphs;
  return o;
}

// Relative L2 error of `ours` against `ref` (n values each).
inline double relative_error(const float* ours, const float* ref, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(ours[i]) - ref[i]) * (static_cast<double>(ours[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

inline int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);  // first index on ties, as torch
}

// The logits of every step when `tokens` are fed after `prompt` (steps = tokens.size()).
inline std::vector<std::vector<float>> forced_logits(WhisperBackend& m, const Tensor& mel,
                                                     const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& tokens) {
  auto encoded = m.encode(mel);
  EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
  auto rows = m.new_rows(static_cast<int64_t>(prompt.size() + tokens.size()));
  EXPECT_TRUE(rows.ok()) << rows.status().to_string();
  if (!encoded.ok() || !rows.ok()) return {};
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  Status s = (*rows)->prefill(*encoded, {0}, {prompt}, logits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  out.push_back(logits);
  for (size_t i = 0; i + 1 < tokens.size() && s.ok(); ++i) {
    s = (*rows)->step({tokens[i]}, logits);
    EXPECT_TRUE(s.ok()) << s.to_string();
    out.push_back(logits);
  }
  return out;
}

// Free-running greedy decoding of `steps` tokens after `prompt` (no eos stop).
inline std::vector<int32_t> greedy(WhisperBackend& m, const Tensor& mel, const std::vector<int32_t>& prompt,
                                   int64_t steps) {
  auto encoded = m.encode(mel);
  EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
  auto rows = m.new_rows(static_cast<int64_t>(prompt.size()) + steps);
  EXPECT_TRUE(rows.ok());
  if (!encoded.ok() || !rows.ok()) return {};
  const int64_t vocab = m.config().vocab_size;
  std::vector<float> logits;
  std::vector<int32_t> out;
  Status s = (*rows)->prefill(*encoded, {0}, {prompt}, logits);
  while (s.ok()) {
    out.push_back(argmax(logits.data(), vocab));
    if (static_cast<int64_t>(out.size()) == steps) break;
    s = (*rows)->step({out.back()}, logits);
  }
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

}  // namespace mmserve::models::testing
