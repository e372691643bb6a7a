// LlamaCudaModel's LoRA slot images (src/models/llama/llama_cuda_lora_image.cpp), host code run without a GPU
// (pageable memory then; pinned where cudaHostAlloc works): the image packed from the file's bytes at load (a GPU
// model's load: no f32 copy) is the f32 packer's byte for byte, for adapters saved in f32, f16 and bf16 into models in
// f32, bf16 and f16, with ranks below the slot's, a module's rank differing per layer and layers a target skips; the
// f32 packer refuses an adapter that kept no f32 copy; an unloaded adapter's buffer is reused by the next image of
// its size, at most two are kept, from any thread. The layout itself is pinned by llama_cuda_test's
// TheSlotImageHoldsEachModuleWhereTheSlotReadsIt.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "models/llama/llama_cuda.h"
#include "models/lora/lora_adapter.h"
#include "peft_adapter_writer.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

LlamaConfig tiny_config() {
  LlamaConfig c;
  c.vocab_size = 64, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 3;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 8;
  return c;
}

// q at rank 5 in layer 0 and 3 in layer 2 (none in layer 1), v at 2 everywhere, down at 4 in layer 1 only: the
// slot's rank is 8 (max_lora_rank 5).
const char* kConfig = R"({"peft_type": "LORA", "r": 2, "lora_alpha": 6, "target_modules": ["q_proj", "v_proj",
    "down_proj"], "rank_pattern": {"layers.0.self_attn.q_proj": 5, "layers.2.self_attn.q_proj": 3, "down_proj": 4}})";
const std::vector<testing::AdapterModule> kModules = {{0, "self_attn.q_proj", 5}, {0, "self_attn.v_proj", 2},
                                                      {1, "self_attn.v_proj", 2}, {1, "mlp.down_proj", 4},
                                                      {2, "self_attn.q_proj", 3}, {2, "self_attn.v_proj", 2}};
constexpr int64_t kMaxRank = 5;

class LoraSlotImageTest : public testing::AdapterDirTest {  // each test starts and ends with the pool empty
 protected:
  void SetUp() override {
    AdapterDirTest::SetUp();
    LlamaCudaModel::lora_image_pool_clear();
  }
  void TearDown() override {
    AdapterDirTest::TearDown();
    LlamaCudaModel::lora_image_pool_clear();
  }
};

LoraImagePacker file_packer(const LlamaConfig& c, DType d) {
  return [c, d](const LoraAdapter& a, const LoraFileModules& stored) {
    return LlamaCudaModel::pack_lora_slot_image_from_file(a, stored, c, d, kMaxRank);
  };
}

TEST_F(LoraSlotImageTest, PackedFromTheFileItIsTheF32PackersImageByteForByte) {
  const LlamaConfig c = tiny_config();
  uint32_t seed = 1;
  for (DType file : {DType::kF32, DType::kF16, DType::kBF16}) {
    const fs::path dir = root_ / dtype_name(file);
    seed += 1000;  // other values per file: a reused buffer holding the last image would not pass for this one
    testing::write_adapter_modules(dir, c, kConfig, kModules, seed, file);
    auto f32 = load_lora_adapter(dir.string(), "f32", c);
    ASSERT_TRUE(f32.ok()) << f32.status().to_string();
    for (DType model : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(dtype_name(file)) + " file, " + dtype_name(model) + " model");
      auto want = LlamaCudaModel::pack_lora_slot_image(**f32, c, model, kMaxRank);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      auto gpu = load_lora_adapter(dir.string(), "gpu", c, {"model."}, file_packer(c, model));
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      ASSERT_NE((*gpu)->slot_image, nullptr);
      const LoraSlotImage &w = **want, &got = *(*gpu)->slot_image;
      EXPECT_FALSE((*gpu)->holds_f32());
      EXPECT_EQ((*gpu)->bytes(), static_cast<int64_t>(got.bytes));
      EXPECT_EQ(got.dtype, model);
      EXPECT_EQ(got.r_max, 8);
      ASSERT_EQ(got.bytes, w.bytes);
      EXPECT_EQ(got.a_offset, w.a_offset);
      EXPECT_EQ(got.a_bytes, w.a_bytes);
      EXPECT_EQ(got.b_offset, w.b_offset);
      EXPECT_EQ(got.b_bytes, w.b_bytes);
      EXPECT_EQ(got.ranks_offset, w.ranks_offset);
      EXPECT_EQ(got.scales_offset, w.scales_offset);
      EXPECT_EQ(std::memcmp(got.memory.get(), w.memory.get(), w.bytes), 0);
      // The f32 packer has nothing to read in an adapter packed from its file.
      EXPECT_EQ(LlamaCudaModel::pack_lora_slot_image(**gpu, c, model, kMaxRank).status().code(),
                StatusCode::kFailedPrecondition);
    }
  }
  // The packer's refusals come out of the load.
  testing::write_adapter_modules(root_ / "r5", c, kConfig, kModules, 7, DType::kBF16);
  auto small = load_lora_adapter((root_ / "r5").string(), "r5", c, {"model."},
                                 [c](const LoraAdapter& a, const LoraFileModules& stored) {
                                   return LlamaCudaModel::pack_lora_slot_image_from_file(a, stored, c, DType::kBF16, 4);
                                 });
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("max_lora_rank"), std::string::npos) << small.status().to_string();
}

TEST_F(LoraSlotImageTest, AnUnloadedImagesBufferIsReusedAndAtMostTwoAreKept) {
  const LlamaConfig c = tiny_config();
  testing::write_adapter_modules(root_ / "a", c, kConfig, kModules, 1, DType::kBF16);
  auto load = [&] {
    auto a = load_lora_adapter((root_ / "a").string(), "a", c, {"model."}, file_packer(c, DType::kBF16));
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    return std::shared_ptr<const LoraAdapter>(std::move(*a));
  };
  std::shared_ptr<const LoraAdapter> first = load();
  const uint8_t* memory = first->slot_image->memory.get();
  const size_t bytes = first->slot_image->bytes;
  std::printf("[ lora image ] %zu bytes, %s\n", bytes, first->slot_image->pinned ? "pinned" : "pageable");
  EXPECT_EQ(LlamaCudaModel::lora_image_pool_bytes(), 0u);
  first.reset();  // the unload
  EXPECT_EQ(LlamaCudaModel::lora_image_pool_bytes(), bytes);
  std::shared_ptr<const LoraAdapter> second = load();
  EXPECT_EQ(second->slot_image->memory.get(), memory);
  EXPECT_EQ(LlamaCudaModel::lora_image_pool_bytes(), 0u);
  std::vector<std::shared_ptr<const LoraAdapter>> three = {load(), load(), load()};
  three.clear();
  EXPECT_EQ(LlamaCudaModel::lora_image_pool_bytes(), 2 * bytes);  // the third freed, not kept
  // Loads and unloads from several threads at once (the registry's callers): the pool stays within its bound.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) EXPECT_EQ(load()->slot_image->bytes, bytes);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(LlamaCudaModel::lora_image_pool_bytes(), 2 * bytes);
  LlamaCudaModel::lora_image_pool_clear();
  EXPECT_EQ(LlamaCudaModel::lora_image_pool_bytes(), 0u);
}

}  // namespace
}  // namespace mmserve::models
