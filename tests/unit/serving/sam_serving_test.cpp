// A SAM model served by the real InferenceServer (the family interface's proof: nothing in serving/ knows SAM):
// HF's IoU scores and masks for a click through submit(), a second click by image_id that skips the encoder (the
// cache's hit and miss counters, its bytes gauge), concurrent prompts batched together and still equal to HF,
// bad prompts as kInvalidArgument, and a SAM model refusing another family's mmserve.yaml keys.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/sam_executor.h"
#include "frontends/image/mask_rle.h"
#include "server_test_util.h"

namespace mmserve::serving {
namespace {

namespace fs = std::filesystem;
using testing::fixture;
using testing::image_input;
using testing::read_bytes;
using testing::request;

const std::string kSam = fixture("sam/sam-tiny-win-f32");

InputItem tensor(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
  InputItem t;
  t.kind = InputKind::kTensor;
  t.name = name;
  t.shape = std::move(shape);
  t.values = std::move(values);
  return t;
}

class SamServing : public testing::RepositoryTest {
 protected:
  void add_sam(const std::string& name, const std::string& yaml = "") {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors", "preprocessor_config.json"}) {
      fs::copy_file(fs::path(kSam) / f, dir / f, fs::copy_options::overwrite_existing);
    }
    if (!yaml.empty()) std::ofstream(dir / "mmserve.yaml") << yaml;
  }
  // golden.json's first case: rocket.jpg, one foreground click at (400, 180), three masks.
  RequestSpec click(const std::string& image_id = "") {
    std::vector<InputItem> inputs;
    if (image_id.empty()) inputs.push_back(image_input(read_bytes(fixture("images/rocket.jpg"))));
    inputs.push_back(tensor("point_coords", {1, 2}, {400, 180}));
    inputs.push_back(tensor("point_labels", {1}, {1}));
    RequestSpec spec = request("sam", std::move(inputs));
    auto params = std::make_shared<engine::SamParams>();
    params->image_id = image_id;
    spec.params = params;
    return spec;
  }
  void expect_golden(const StatusOr<ResponseData>& r) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const auto* sam = engine::output_as<engine::SamOutput>(r->output);
    ASSERT_NE(sam, nullptr);
    std::ifstream json_file(kSam + "/golden.json");
    const nlohmann::json g = nlohmann::json::parse(json_file)["cases"][0];
    ASSERT_EQ(g["name"], "rocket_point");
    ASSERT_EQ(sam->count, 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(sam->iou_scores[k], g["iou_scores"][k].get<float>(), 1e-5);
      auto hf = image::decode_coco_rle(g["coco_rle"][k]["counts"].get<std::string>(), 427, 640);
      ASSERT_TRUE(hf.ok());
      int64_t differ = 0;
      for (size_t i = 0; i < hf->size(); ++i) differ += ((*hf)[i] != 0) != (sam->masks[k * hf->size() + i] != 0);
      EXPECT_LE(differ, static_cast<int64_t>(hf->size() / 1000)) << "mask " << k;
    }
  }
};

TEST_F(SamServing, AClickAndASecondClickByImageIdMatchHf) {
  add_sam("sam");
  InferenceServer& server = start();
  auto meta = server.model_metadata("sam");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->platform, "mmserve_sam");
  auto first = server.infer(click());
  expect_golden(first);
  const std::string id = engine::output_as<engine::SamOutput>(first->output)->image_id;
  EXPECT_FALSE(engine::output_as<engine::SamOutput>(first->output)->embedding_cached);
  auto second = server.infer(click(id));
  expect_golden(second);
  EXPECT_TRUE(engine::output_as<engine::SamOutput>(second->output)->embedding_cached);
  // The engine thread publishes an executor's cache counters when its batch returns, which may be just after the
  // response was handed over: wait (at most 2 s) for the second batch's figures.
  for (int i = 0; i < 200 && histogram("mmserve_batch_size", {"model", "tower"}, {"sam", "prompt"}).count() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 0; i < 200 && counter("mmserve_cache_hits_total", {"model", "cache"}, {"sam", "image_embedding"}) < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(counter("mmserve_cache_hits_total", {"model", "cache"}, {"sam", "image_embedding"}), 1);
  EXPECT_EQ(counter("mmserve_cache_misses_total", {"model", "cache"}, {"sam", "image_embedding"}), 1);
  EXPECT_EQ(
      server.metrics().gauge("mmserve_cache_bytes", "", {"model", "cache"}).with({"sam", "image_embedding"}).value(),
      16 * 16 * 16 * 4);
  EXPECT_GE(histogram("mmserve_batch_size", {"model", "tower"}, {"sam", "prompt"}).count(), 2u);
}

TEST_F(SamServing, ConcurrentPromptsAreBatchedAndEqualHf) {
  add_sam("sam", "max_batch_size: 8\nmax_queue_delay_ms: 200\n");
  start();
  std::vector<std::future<StatusOr<ResponseData>>> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(submit_async(click()));
  int largest = 0;
  for (auto& f : futures) {
    auto r = f.get();
    expect_golden(r);
    if (r.ok()) largest = std::max(largest, r->batch_size);
  }
  EXPECT_GT(largest, 1) << "no two prompts shared a batch";
}

TEST_F(SamServing, BadPromptsAndForeignKeysAreErrors) {
  add_sam("sam");
  add_sam("sam-whisper-key", "decoder_rows: 8\n");
  InferenceServer& server = start(config(), /*expect_ok=*/false);
  auto status = server.model_status("sam-whisper-key");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ModelState::kFailed);
  EXPECT_NE(status->reason.find("'decoder_rows' does not apply to SAM models"), std::string::npos) << status->reason;
  RequestSpec outside = click();
  outside.inputs[1] = tensor("point_coords", {1, 2}, {900, 10});
  auto r = server.infer(std::move(outside));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("outside the 640x427 image"), std::string::npos) << r.status().message();
  r = server.infer(click("ffffffffffffffffffffffffffffffff"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("unknown image_id"), std::string::npos) << r.status().message();
  r = server.infer(request("sam", {testing::text_input("a cat")}));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::serving
