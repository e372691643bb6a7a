// LoRA adapters on CLIP's towers (issue 16; models/clip/clip_lora.h, engine/clip_adapters.cpp).
//   - ClipLoraRead: what a PEFT directory over a CLIPModel may hold, and every refusal naming the module or field.
//   - ClipAdapters: an adapter's merged copy equals a checkpoint this test merges itself (W + scale B A in double);
//     one batch mixing the base and two adapters gives each request its model's embeddings; the registry; unload.
//   - ClipLoraPeft: the adapters PEFT wrote over the tiny CLIP (tests/fixtures/lora/clip-*,
//     tools/reference/make_clip_lora_fixtures.py) give PEFT's unmerged image and text embeddings and logits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <unistd.h>

#include "../../conformance/golden.h"
#include "core/safetensors.h"
#include "engine/clip_executor.h"
#if MMSERVE_HAS_CUDA
#include "kernels/testing/cuda_test_util.h"
#endif
#include "models/clip/clip_lora.h"

namespace mmserve::engine {
namespace {

namespace fs = std::filesystem;

struct Module {
  std::string name;  // "vision_model.encoder.layers.0.self_attn.q_proj"
  int64_t in, out, rank;
};

// A PEFT-style adapter directory: `config` as adapter_config.json and each module's lora_A [rank, in] and lora_B
// [out, rank] (normal, std 0.3, seeds from `seed`) under base_model.model.<module>.
void write_clip_adapter(const fs::path& dir, const std::string& config, const std::vector<Module>& modules,
                        uint32_t seed) {
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << config;
  std::vector<std::vector<float>> storage;
  storage.reserve(2 * modules.size());
  std::vector<TensorToWrite> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    std::mt19937 rng(seed++);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    std::vector<float>& v = storage.emplace_back(static_cast<size_t>(shape[0] * shape[1]));
    for (float& x : v) x = dist(rng);
    out.push_back({name, DType::kF32, std::move(shape), v.data()});
  };
  for (const Module& m : modules) {
    add("base_model.model." + m.name + ".lora_A.weight", {m.rank, m.in});
    add("base_model.model." + m.name + ".lora_B.weight", {m.out, m.rank});
  }
  ASSERT_TRUE(write_safetensors((dir / "adapter_model.safetensors").string(), out).ok());
}

class ClipLoraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("mmserve_clip_lora_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  const std::string base_ = testing::fixture("clip-tiny-quickgelu-f32");
};

// The tiny fixture: vision hidden 24 (intermediate 53), text hidden 12 (37), projection 10, 2 layers each.
const std::vector<Module> kVisionModules = {{"vision_model.encoder.layers.0.self_attn.q_proj", 24, 24, 4},
                                            {"vision_model.encoder.layers.1.self_attn.v_proj", 24, 24, 4},
                                            {"vision_model.encoder.layers.1.mlp.fc2", 53, 24, 4},
                                            {"visual_projection", 24, 10, 2}};
const char* kVisionConfig =
    R"json({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ".*(vision_model.*|visual_projection)",
        "rank_pattern": {"visual_projection": 2}})json";

models::ClipConfig tiny_config(const std::string& base) {
  auto model = models::ClipModel::load(base);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return (*model)->config();
}

TEST_F(ClipLoraTest, ReadsTheTowersLinearsWithTheirScales) {
  write_clip_adapter(root_ / "vision", kVisionConfig, kVisionModules, 1);
  auto lora = models::load_clip_lora((root_ / "vision").string(), "lora-vision-test", tiny_config(base_));
  ASSERT_TRUE(lora.ok()) << lora.status().to_string();
  EXPECT_EQ((*lora)->modality(), "image");
  EXPECT_EQ((*lora)->file.max_rank, 4);
  EXPECT_EQ((*lora)->target_names(), (std::vector<std::string>{"fc2", "q_proj", "v_proj", "visual_projection"}));
  EXPECT_FLOAT_EQ((*lora)->file.modules.at("visual_projection").scale, 4.0f);  // alpha 8 / rank 2
  EXPECT_FLOAT_EQ((*lora)->file.modules.at("vision_model.encoder.layers.1.mlp.fc2").scale, 2.0f);
}

// Each broken adapter is refused at load with its code, naming what is wrong.
TEST_F(ClipLoraTest, RefusesWhatItCannotApplyNamingIt) {
  const models::ClipConfig config = tiny_config(base_);
  struct Case {
    const char* what;
    std::string config;
    std::vector<Module> modules;
    StatusCode code;
    const char* message;
  };
  const std::string all = R"json({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ".*"})json";
  const std::vector<Case> cases = {
      {"the patch convolution", all, {{"vision_model.embeddings.patch_embedding", 3, 24, 4}},
       StatusCode::kUnimplemented, "vision_model.embeddings.patch_embedding"},
      {"a layer past the tower's", all, {{"text_model.encoder.layers.2.self_attn.q_proj", 12, 12, 4}},
       StatusCode::kUnimplemented, "text_model.encoder.layers.2"},
      {"a module target_modules leaves out", R"json({"peft_type": "LORA", "r": 4, "target_modules": ["v_proj"]})json",
       {{"vision_model.encoder.layers.0.self_attn.q_proj", 24, 24, 4}}, StatusCode::kInvalidArgument,
       "not among the config's target_modules"},
      {"a rank other than r", all, {{"vision_model.encoder.layers.0.self_attn.q_proj", 24, 24, 3}},
       StatusCode::kInvalidArgument, "expected [4, 24]"},
      {"another tower's width", all, {{"text_model.encoder.layers.0.mlp.fc1", 24, 37, 4}},
       StatusCode::kInvalidArgument, "shape"},
      {"DoRA", R"json({"peft_type": "LORA", "r": 4, "target_modules": ".*", "use_dora": true})json",
       {{"visual_projection", 24, 10, 4}}, StatusCode::kUnimplemented, "use_dora"},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path dir = root_ / ("case" + std::to_string(n++));
    write_clip_adapter(dir, c.config, c.modules, 7);
    auto lora = models::load_clip_lora(dir.string(), "x", config);
    ASSERT_FALSE(lora.ok());
    EXPECT_EQ(lora.status().code(), c.code) << lora.status().to_string();
    EXPECT_NE(lora.status().message().find(c.message), std::string::npos) << lora.status().to_string();
  }
  // Half a module: lora_A without lora_B.
  write_clip_adapter(root_ / "half", all, {{"visual_projection", 24, 10, 4}}, 3);
  {
    auto file = SafetensorsFile::open((root_ / "half/adapter_model.safetensors").string());
    ASSERT_TRUE(file.ok());
    const TensorInfo* a = (*file)->find("base_model.model.visual_projection.lora_A.weight");
    std::vector<float> values(reinterpret_cast<const float*>(a->data),
                              reinterpret_cast<const float*>(a->data) + a->numel());
    ASSERT_TRUE(write_safetensors((root_ / "half/adapter_model.safetensors").string(),
                                  {{a->name, DType::kF32, a->shape, values.data()}})
                    .ok());
  }
  auto half = models::load_clip_lora((root_ / "half").string(), "x", config);
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("only one of lora_A / lora_B"), std::string::npos) << half.status().to_string();
  EXPECT_EQ(models::load_clip_lora((root_ / "missing").string(), "x", config).status().code(), StatusCode::kNotFound);
}

// The base checkpoint with W += scale * B @ A for each of `lora`'s modules, merged here in double.
void write_merged(const std::string& base, const models::ClipLora& lora, const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy_file(fs::path(base) / "config.json", dir / "config.json");
  auto store = WeightStore::open_model_dir(base);
  ASSERT_TRUE(store.ok());
  std::map<std::string, std::vector<float>> values;
  for (const std::string& name : (*store)->names()) {
    const TensorInfo* t = (*store)->find(name);
    ASSERT_EQ(t->dtype, DType::kF32) << name;
    values[name].assign(reinterpret_cast<const float*>(t->data), reinterpret_cast<const float*>(t->data) + t->numel());
  }
  for (const auto& [module, m] : lora.file.modules) {
    std::vector<float>& w = values.at(module + ".weight");
    ASSERT_EQ(w.size(), static_cast<size_t>(m.out * m.in));
    for (int64_t o = 0; o < m.out; ++o) {
      for (int64_t i = 0; i < m.in; ++i) {
        double d = 0;
        for (int64_t j = 0; j < m.rank; ++j) d += double{m.b[o * m.rank + j]} * m.a[j * m.in + i];
        w[o * m.in + i] += static_cast<float>(d * m.scale);
      }
    }
  }
  std::vector<TensorToWrite> out;
  for (const std::string& name : (*store)->names()) {
    out.push_back({name, DType::kF32, (*store)->find(name)->shape, values[name].data()});
  }
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), out).ok());
}

// A request of one text (token ids) or one image (pixels) under `adapter`.
std::unique_ptr<ClipInput> request(const std::string& adapter, std::vector<int32_t> ids, std::vector<float> pixels) {
  auto r = std::make_unique<ClipInput>();
  r->adapter = adapter;
  if (!ids.empty()) {
    r->input_is_image.push_back(false);
    r->text_ids.push_back(std::move(ids));
  }
  if (!pixels.empty()) {
    r->input_is_image.push_back(true);
    r->images = 1;
    r->pixels = std::move(pixels);
  }
  return r;
}

std::vector<StatusOr<std::shared_ptr<const ModelOutput>>> run(ClipExecutor& e,
                                                              const std::vector<std::unique_ptr<ClipInput>>& inputs) {
  std::vector<StatusOr<std::shared_ptr<const ModelOutput>>> out(inputs.size(), internal_error("not finished"));
  std::vector<int> finished(inputs.size(), 0);
  BatchHooks hooks;
  hooks.finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> o, double) {
    ++finished[i];
    out[i] = std::move(o);
  };
  std::vector<BatchItem> batch(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) batch[i].input = inputs[i].get();
  e.run(batch, hooks);
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(finished[i], 1) << "request " << i << " finished once";
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(double{a[i]} - b[i]));
  return d;
}

// Two adapters (one per tower, one on both) loaded on the base; one batch mixes them with the base and an unknown
// adapter: every request gets the embeddings of its own model (the test's merged checkpoint, or the base).
TEST_F(ClipLoraTest, AMixedBatchGivesEachRequestItsAdaptersModel) {
  const models::ClipConfig config = tiny_config(base_);
  write_clip_adapter(root_ / "vision", kVisionConfig, kVisionModules, 1);
  write_clip_adapter(root_ / "both",
                     R"json({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_rslora": true,
                         "target_modules": ["q_proj", "k_proj", "out_proj", "fc1", "text_projection"]})json",
                     {{"text_model.encoder.layers.0.self_attn.k_proj", 12, 12, 8},
                      {"text_model.encoder.layers.1.mlp.fc1", 12, 37, 8},
                      {"text_projection", 12, 10, 8},
                      {"vision_model.encoder.layers.0.self_attn.out_proj", 24, 24, 8}},
                     11);
  std::map<std::string, std::unique_ptr<ClipExecutor>> reference;  // the merged checkpoints, as plain models
  for (const char* name : {"vision", "both"}) {
    auto lora = models::load_clip_lora((root_ / name).string(), name, config);
    ASSERT_TRUE(lora.ok()) << lora.status().to_string();
    write_merged(base_, **lora, root_ / (std::string("merged_") + name));
    auto e = ClipExecutor::create((root_ / (std::string("merged_") + name)).string(), {});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    reference[name] = std::move(*e);
  }
  auto base = ClipExecutor::create(base_, {});
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  reference[""] = std::move(*base);

  auto executor = ClipExecutor::create(base_, {});
  ASSERT_TRUE(executor.ok());
  ClipExecutor& e = **executor;
  ASSERT_TRUE(e.load_adapter("lora-vision-a", (root_ / "vision").string()).ok());
  ASSERT_TRUE(e.load_adapter("both", (root_ / "both").string()).ok());
  EXPECT_EQ(e.load_adapter("both", (root_ / "both").string()).code(), StatusCode::kAlreadyExists);

  testing::Golden golden(base_ + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");
  constexpr int64_t kPerImage = 3 * 32 * 32;
  auto image = [&](int i) {
    return std::vector<float>(pixels.begin() + i * kPerImage, pixels.begin() + (i + 1) * kPerImage);
  };
  const std::vector<int32_t> cat = {49406, 320, 1125, 539, 320, 2368, 49407}, empty = {49406, 49407};
  const std::vector<std::string> adapters = {"", "lora-vision-a", "both", "both", "", "lora-vision-a", "nope"};
  const std::map<std::string, std::string> model_of = {{"", ""}, {"lora-vision-a", "vision"}, {"both", "both"}};
  std::vector<std::unique_ptr<ClipInput>> batch;
  for (size_t i = 0; i < adapters.size(); ++i) {
    batch.push_back(request(adapters[i], i % 2 ? cat : empty, image(static_cast<int>(i))));
  }
  const auto outputs = run(e, batch);
  for (size_t i = 0; i < adapters.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + " under '" + adapters[i] + "'");
    if (adapters[i] == "nope") {
      EXPECT_EQ(outputs[i].status().code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(outputs[i].ok()) << outputs[i].status().to_string();
    ClipExecutor& ref = *reference.at(model_of.at(adapters[i]));
    auto text = ref.embed_texts({i % 2 ? cat : empty});
    auto pixels_i = image(static_cast<int>(i));
    auto img = ref.embed_images(pixels_i, 1);
    ASSERT_TRUE(text.ok() && img.ok());
    const auto* clip = output_as<ClipOutput>(*outputs[i]);
    ASSERT_NE(clip, nullptr);
    EXPECT_LE(max_abs_diff(clip->embeddings[0], *text), 2e-6) << "text";
    EXPECT_LE(max_abs_diff(clip->embeddings[1], *img), 2e-6) << "image";
  }
  // The adapters change what they adapt, and only that (else the comparisons above prove little).
  auto base_text = reference.at("")->embed_texts({cat}), vision_text = reference.at("vision")->embed_texts({cat});
  auto base_image = reference.at("")->embed_images(image(0), 1);
  auto vision_image = reference.at("vision")->embed_images(image(0), 1);
  EXPECT_EQ(*base_text, *vision_text) << "an image adapter leaves the text tower alone";
  EXPECT_GT(max_abs_diff(*base_image, *vision_image), 0.02);
  EXPECT_GT(max_abs_diff(*base_text, *reference.at("both")->embed_texts({cat})), 0.02);

  // The registry, then an unload: later requests under the name fail, the others run on.
  const std::vector<AdapterInfo> list = e.adapter_list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "both");
  EXPECT_EQ(list[0].modality, "image+text");
  EXPECT_EQ(list[0].rank, 8);
  EXPECT_EQ(list[1].name, "lora-vision-a");
  EXPECT_EQ(list[1].modality, "image");
  EXPECT_EQ(list[1].requests, 2);
  EXPECT_FALSE(list[1].hot_swappable);
  ASSERT_TRUE(e.unload_adapter("lora-vision-a").ok());
  EXPECT_EQ(e.unload_adapter("lora-vision-a").code(), StatusCode::kNotFound);
  std::vector<std::unique_ptr<ClipInput>> after;
  after.push_back(request("lora-vision-a", cat, {}));
  after.push_back(request("both", cat, {}));
  const auto later = run(e, after);
  EXPECT_EQ(later[0].status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(later[1].ok());
}

// PEFT's own adapters over the tiny CLIP (make_clip_lora_fixtures.py): the image and text embeddings of the base
// fixture's 8 images and 8 texts, and the logits, as PEFT's unmerged forward gives them, in one batch with the base,
// within `tolerance` (relative, per embedding). Returns how many fixtures were checked.
int expect_peft_embeddings(const ExecutorOptions& options, double tolerance) {
  const std::string base = testing::fixture("clip-tiny-quickgelu-f32");
  int checked = 0;
  for (const char* variant : {"clip-vision-r4", "clip-both-r8-rslora"}) {
    SCOPED_TRACE(variant);
    const fs::path dir = fs::path(testing::fixture("lora")) / variant;
    if (!fs::exists(dir / "golden.safetensors")) continue;  // reported below
    testing::Golden golden((dir / "golden.safetensors").string());
    auto executor = ClipExecutor::create(base, options);
    EXPECT_TRUE(executor.ok()) << executor.status().to_string();
    if (!executor.ok()) return checked;
    const Status loaded = (*executor)->load_adapter(variant, dir.string());
    EXPECT_TRUE(loaded.ok()) << loaded.to_string();
    if (!loaded.ok()) return checked;
    const std::vector<int64_t> ids = golden.i64("input_ids"), mask = golden.i64("attention_mask");
    const std::vector<float> pixels = golden.f32("pixel_values");
    const int64_t n = golden.shape("input_ids")[0], len = golden.shape("input_ids")[1], dim = 10;
    constexpr int64_t kPerImage = 3 * 32 * 32;
    // One request under the adapter holding every image and text (their logits are PEFT's logits_per_image), and the
    // base model's request beside it in the same batch.
    auto adapted = std::make_unique<ClipInput>();
    adapted->adapter = variant;
    adapted->images = n;
    adapted->pixels = pixels;
    for (int64_t i = 0; i < n; ++i) adapted->input_is_image.push_back(true);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> row;
      for (int64_t k = 0; k < len && mask[t * len + k] != 0; ++k) row.push_back(static_cast<int32_t>(ids[t * len + k]));
      adapted->text_ids.push_back(row);
      adapted->input_is_image.push_back(false);
    }
    auto plain = std::make_unique<ClipInput>(*adapted);
    plain->adapter.clear();
    std::vector<std::unique_ptr<ClipInput>> batch;
    batch.push_back(std::move(plain));
    batch.push_back(std::move(adapted));
    const auto out = run(**executor, batch);
    EXPECT_TRUE(out[0].ok() && out[1].ok());
    if (!out[0].ok() || !out[1].ok()) return checked;
    const auto* clip = output_as<ClipOutput>(*out[1]);
    const std::vector<float> image_ref = golden.f32("image_embeds"), text_ref = golden.f32("text_embeds");
    for (int64_t i = 0; i < 2 * n; ++i) {
      const std::vector<float>& ref = i < n ? image_ref : text_ref;
      const int64_t row = i < n ? i : i - n;
      EXPECT_LE(testing::relative_error(clip->embeddings[i].data(), ref.data() + row * dim, dim), tolerance)
          << (i < n ? "image " : "text ") << row;
    }
    EXPECT_LE(testing::relative_error(clip->logits_per_image.data(), golden.f32("logits_per_image").data(), n * n),
              2 * tolerance);
    // The base request of the same batch is the base fixture's (HF's) embeddings.
    testing::Golden base_golden(base + "/golden.safetensors");
    const auto* plain_out = output_as<ClipOutput>(*out[0]);
    EXPECT_LE(testing::relative_error(plain_out->embeddings[0].data(), base_golden.f32("image_embeds").data(), dim),
              tolerance);
    ++checked;
  }
  return checked;
}

TEST(ClipLoraPeft, AdaptersGivePeftsEmbeddings) {
  if (expect_peft_embeddings({}, 1e-5) == 0) {
    GTEST_SKIP() << "tests/fixtures/lora/clip-* not generated yet (tools/reference/make_clip_lora_fixtures.py on "
                    "the GPU host)";
  }
}

// The same on the GPU (each adapter's merged copy is a ClipCudaModel): f32 within CLIP's GPU f32 tolerance, bf16
// within the bf16 one (clip_cuda_test.cpp: 1e-4 and 1e-2 relative).
TEST(ClipLoraPeft, AdaptersGivePeftsEmbeddingsOnTheGpu) {
#if MMSERVE_HAS_CUDA
  MMSERVE_REQUIRE_GPU();
#else
  GTEST_SKIP() << "GPU test skipped: this build has no CUDA backend";
#endif
  for (const auto& [dtype, tolerance] : {std::pair<DType, double>{DType::kF32, 1e-4}, {DType::kBF16, 1e-2}}) {
    SCOPED_TRACE(dtype_name(dtype));
    ExecutorOptions options;
    options.device = Device::cuda(0);
    options.dtype = dtype;
    EXPECT_EQ(expect_peft_embeddings(options, tolerance), 2) << "both PEFT fixtures";
  }
}

}  // namespace
}  // namespace mmserve::engine
