// run_clip_batch: text-only requests are answered after the text tower, before the image tower runs, and
// every response (early or not) equals HF's golden embeddings for its inputs.
#include "serving/clip_batch.h"

#include <gtest/gtest.h>

#include "../../conformance/golden.h"

namespace mmserve::serving {
namespace {

TEST(ClipBatch, TextOnlyRequestsFinishBeforeTheImageTower) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = engine::ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  testing::Golden golden(dir + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");  // [8, 3, 32, 32], HF's own preprocessing
  const int64_t per_image = 3 * 32 * 32, dim = 10;

  auto text_request = [](std::vector<int32_t> ids) {
    auto r = std::make_shared<PendingRequest>();
    r->input_is_image = {false};
    r->tokens = static_cast<int64_t>(ids.size());
    r->text_ids = {std::move(ids)};
    return r;
  };
  auto image_request = std::make_shared<PendingRequest>();
  image_request->input_is_image = {true};
  image_request->images = 1;
  image_request->pixels.assign(pixels.begin(), pixels.begin() + per_image);
  // golden.json's first text is "a photo of a cat", its second "".
  std::vector<PendingRequestPtr> batch = {text_request({49406, 320, 1125, 539, 320, 2368, 49407}), image_request,
                                          text_request({49406, 49407})};

  std::vector<size_t> early;
  std::vector<StatusOr<ResponseData>> early_responses;
  BatchRun run = run_clip_batch(**executor, batch, [&](size_t i, StatusOr<ResponseData> r, double) {
    early.push_back(i);
    early_responses.push_back(std::move(r));
  });
  EXPECT_EQ(early, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(run.finished_early, (std::vector<bool>{true, false, true}));
  const std::vector<float> text_ref = golden.f32("text_embeds"), image_ref = golden.f32("image_embeds");
  for (size_t k = 0; k < early.size(); ++k) {
    ASSERT_TRUE(early_responses[k].ok());
    const std::vector<float>& e = early_responses[k]->embeddings.at(0);
    EXPECT_LE(testing::relative_error(e.data(), text_ref.data() + k * dim, dim), 1e-4) << "text " << k;
  }
  ASSERT_TRUE(run.responses[1].ok()) << run.responses[1].status().to_string();
  EXPECT_LE(testing::relative_error(run.responses[1]->embeddings.at(0).data(), image_ref.data(), dim), 1e-4);
}

// Chunked image tower (preemption points): the hook runs between chunks only, and chunking changes no result.
TEST(ClipBatch, ImageChunksCallTheHookBetweenChunksAndMatchHf) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = engine::ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  testing::Golden golden(dir + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");  // 8 images
  const std::vector<float> image_ref = golden.f32("image_embeds");
  const int64_t per_image = 3 * 32 * 32, dim = 10;
  std::vector<PendingRequestPtr> batch;
  for (int i = 0; i < 7; ++i) {  // 7 images in chunks of 3: 3 + 3 + 1, so the hook runs twice
    auto r = std::make_shared<PendingRequest>();
    r->input_is_image = {true};
    r->images = 1;
    r->pixels.assign(pixels.begin() + i * per_image, pixels.begin() + (i + 1) * per_image);
    batch.push_back(r);
  }
  int hooks = 0;
  ImageChunking chunking;
  chunking.images = 3;
  chunking.between_chunks = [&] { ++hooks; };
  BatchRun run = run_clip_batch(**executor, batch, nullptr, chunking);
  EXPECT_EQ(hooks, 2);
  ASSERT_EQ(run.responses.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(run.responses[i].ok());
    EXPECT_LE(testing::relative_error(run.responses[i]->embeddings.at(0).data(), image_ref.data() + i * dim, dim), 1e-4)
        << "image " << i;
  }
}

}  // namespace
}  // namespace mmserve::serving
