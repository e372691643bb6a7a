// Test helpers for a decoder under LoRA adapters (issue 16): one prefill step of several sequences (sequence s in
// block s of the pool) with an adapter each, the base checkpoint with deltas merged into a copy of its weights (what
// PEFT's merge_and_unload computes, in double), and the largest difference between two runs' logits. Used by
// lora_adapter_test (dense linears) and lora_experts_test (Mixtral's experts).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/common/decoder_step.h"
#include "models/common/weight_table.h"
#include "models/llama/llama.h"
#include "models/lora/lora_adapter.h"

namespace mmserve::testing {

inline constexpr int64_t kStepBlock = 32;  // a block of the pool per sequence: prompts up to 32 tokens

inline models::DecoderStep prefill_step(const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<const models::LoraAdapter*>& loras) {
  models::DecoderStep step;
  step.table_ld = 1;
  step.query_start.push_back(0);
  for (size_t s = 0; s < prompts.size(); ++s) {
    for (size_t p = 0; p < prompts[s].size(); ++p) {
      step.logit_rows.push_back(static_cast<int32_t>(step.tokens.size()));
      step.tokens.push_back(prompts[s][p]);
      step.positions.push_back(static_cast<int32_t>(p));
      step.slots.push_back(static_cast<int32_t>(s * kStepBlock + p));
    }
    step.query_start.push_back(static_cast<int32_t>(step.tokens.size()));
    step.seq_lens.push_back(static_cast<int32_t>(prompts[s].size()));
    step.block_tables.push_back(static_cast<int32_t>(s));
    step.max_seq_len = std::max<int64_t>(step.max_seq_len, static_cast<int64_t>(prompts[s].size()));
  }
  step.max_query_len = step.max_seq_len;
  step.loras = loras;
  return step;
}

// Every row's logits of `step` (made by prefill_step).
inline std::vector<std::vector<float>> run_step(const models::LlamaModel& model, const models::DecoderStep& step) {
  const int64_t vocab = model.config().vocab_size;
  auto pool = model.new_pool(step.num_seqs(), kStepBlock);
  EXPECT_TRUE(pool.ok());
  std::vector<float> logits(step.logit_rows.size() * static_cast<size_t>(vocab));
  const Status st = model.forward_step(step, *pool, logits.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < step.logit_rows.size(); ++r) {
    rows.emplace_back(logits.begin() + static_cast<int64_t>(r) * vocab,
                      logits.begin() + static_cast<int64_t>(r + 1) * vocab);
  }
  return rows;
}

inline std::vector<std::vector<float>> run_step(const models::LlamaModel& model,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                const std::vector<const models::LoraAdapter*>& loras) {
  return run_step(model, prefill_step(prompts, loras));
}

inline float max_abs_diff(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  EXPECT_EQ(got.size(), want.size());
  float worst = 0;
  for (size_t r = 0; r < std::min(got.size(), want.size()); ++r) {
    for (size_t v = 0; v < got[r].size(); ++v) worst = std::max(worst, std::fabs(got[r][v] - want[r][v]));
  }
  return worst;
}

inline void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                         float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_LE(max_abs_diff(got, want), tol) << what;
}

using WeightValues = std::map<std::string, std::vector<float>>;  // a checkpoint's f32 tensors by name

// `base`'s checkpoint (f32) with `edit` applied to its values, written to `dir` with base's config.
inline void write_edited_checkpoint(const std::filesystem::path& base, const std::filesystem::path& dir,
                                    const std::function<void(WeightValues&)>& edit) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(base / "config.json", dir / "config.json");
  auto store = WeightStore::open_model_dir(base.string());
  ASSERT_TRUE(store.ok());
  WeightValues values;
  for (const std::string& name : (*store)->names()) {
    const TensorInfo* t = (*store)->find(name);
    ASSERT_EQ(t->dtype, DType::kF32);
    const float* p = reinterpret_cast<const float*>(t->data);
    values[name].assign(p, p + t->numel());
  }
  edit(values);
  std::vector<TensorToWrite> out;
  for (const std::string& name : (*store)->names()) {
    out.push_back({name, DType::kF32, (*store)->find(name)->shape, values[name].data()});
  }
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), out).ok());
}

// W += weight * scale * B @ A (summed in double) for every decoder linear `adapter` adapts.
inline void merge_dense(WeightValues& values, const models::LoraAdapter& adapter, double weight = 1) {
  for (size_t l = 0; l < adapter.layers.size(); ++l) {
    for (int t = 0; t < models::kLoraTargets; ++t) {
      const models::LoraModule& m = adapter.layers[l][t];
      if (!m.present()) continue;
      const std::string path = t <= 3 ? std::string("self_attn.") : std::string("mlp.");
      std::vector<float>& w = values["model.layers." + std::to_string(l) + "." + path +
                                     models::lora_target_name(static_cast<models::LoraTarget>(t)) + ".weight"];
      ASSERT_EQ(w.size(), static_cast<size_t>(m.out * m.in));
      for (int64_t o = 0; o < m.out; ++o) {
        for (int64_t i = 0; i < m.in; ++i) {
          double d = 0;
          for (int64_t j = 0; j < m.rank; ++j) d += double{m.b[o * m.rank + j]} * m.a[j * m.in + i];
          w[o * m.in + i] += static_cast<float>(d * m.scale * weight);
        }
      }
    }
  }
}

}  // namespace mmserve::testing
