// LlamaCudaOptions::embeddings_on_host (llama_cuda_embed.cpp): the token table in host memory gives the same logits
// as the table on the GPU, bit for bit (the same conversion at load and the same device gather, only its source
// rows staged from the host), for a 16-bit checkpoint, a W4A16 (AWQ) one and an FP8 one, with the decode CUDA
// graphs and eagerly; the GPU's weight bytes drop by the table's and the host holds exactly the table; a model with
// tied embeddings keeps its table on the GPU (its lm_head is that table) and says so by host_weight_bytes() == 0.
// Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../conformance/llama_cuda_util.h"
#include "core/json_config.h"
#include "kernels/testing/cuda_test_util.h"
#include "models/llama/llama.h"
#include "models/llama/llama_cuda.h"
#include "../conformance/golden.h"

namespace mmserve::models {
namespace {

using testing::fixture;

const std::vector<int32_t> kPrompt = {1, 68, 71, 12, 144, 6, 13, 107, 234};
constexpr int kSteps = 6;

LlamaCudaOptions options(bool on_host, bool graphs) {
  LlamaCudaOptions o;
  o.dtype = DType::kBF16;
  o.embeddings_on_host = on_host;
  o.graphs = graphs;
  o.max_model_len = 64, o.max_num_tokens = 64;
  o.max_num_seqs = 16;  // a step's logit rows are at most max_num_seqs: the prompt asks for all of its 9
  o.kv_cache_bytes = 8 << 20;  // two models live at once
  return o;
}

// Every prompt row, then kSteps greedy decode steps (each fed the argmax of the row before).
std::vector<float> run(LlamaCudaModel& m) {
  const int64_t vocab = m.config().vocab_size;
  OneSequence seq{m};
  auto rows = seq.step(kPrompt, /*all_rows=*/true);
  EXPECT_TRUE(rows.ok()) << rows.status().to_string();
  if (!rows.ok()) return {};
  std::vector<float> all = *rows;
  for (int s = 0; s < kSteps; ++s) {
    const int32_t next = argmax(all.data() + all.size() - vocab, vocab);
    auto row = seq.step({next}, /*all_rows=*/false);
    EXPECT_TRUE(row.ok()) << row.status().to_string();
    if (!row.ok()) return {};
    all.insert(all.end(), row->begin(), row->end());
  }
  return all;
}

void check_same_logits(const std::string& dir) {
  SCOPED_TRACE(dir);
  for (bool graphs : {true, false}) {
    auto on_gpu = LlamaCudaModel::load(dir, options(false, graphs));
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
    auto on_host = LlamaCudaModel::load(dir, options(true, graphs));
    ASSERT_TRUE(on_host.ok()) << on_host.status().to_string();
    const LlamaConfig& c = (*on_host)->config();
    const int64_t table = c.vocab_size * c.hidden_size * 2;  // bf16
    EXPECT_EQ((*on_host)->host_weight_bytes(), table);
    EXPECT_EQ((*on_gpu)->host_weight_bytes(), 0);
    EXPECT_GE((*on_gpu)->weight_bytes() - (*on_host)->weight_bytes(), table);
    if (graphs) {
      EXPECT_TRUE((*on_host)->graphs());
    }
    const std::vector<float> want = run(**on_gpu), got = run(**on_host);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(want.size(), (kPrompt.size() + kSteps) * static_cast<size_t>(c.vocab_size));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "logit " << i << (graphs ? " (graphs)" : " (eager)");
    }
  }
}

TEST(LlamaCudaEmbeddingsOnHost, SixteenBitCheckpointGivesTheSameLogits) {
  MMSERVE_REQUIRE_GPU();
  check_same_logits(fixture("llama/llama-gqa-f32"));
}

TEST(LlamaCudaEmbeddingsOnHost, W4A16AndFp8CheckpointsGiveTheSameLogits) {
  MMSERVE_REQUIRE_GPU();
  check_same_logits(fixture("quant/awq-g32"));
  check_same_logits(fixture("quant/fp8-static"));
}

TEST(LlamaCudaEmbeddingsOnHost, TiedEmbeddingsStayOnTheGpu) {
  MMSERVE_REQUIRE_GPU();
  const std::string dir = fixture("llama/llama3-rope-bf16");  // tie_word_embeddings: true
  auto on_gpu = LlamaCudaModel::load(dir, options(false, true));
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
  auto asked = LlamaCudaModel::load(dir, options(true, true));
  ASSERT_TRUE(asked.ok()) << asked.status().to_string();
  EXPECT_EQ((*asked)->host_weight_bytes(), 0);
  EXPECT_EQ((*asked)->weight_bytes(), (*on_gpu)->weight_bytes());
  const std::vector<float> want = run(**on_gpu), got = run(**asked);
  ASSERT_EQ(want.size(), (kPrompt.size() + kSteps) * static_cast<size_t>((*on_gpu)->config().vocab_size));
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace mmserve::models
