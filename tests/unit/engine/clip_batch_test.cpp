// ClipExecutor::run (engine/clip_batch.cpp): text-only requests are finished after the text tower, before the
// image tower runs; both towers run in chunks sized by the hooks' time budget with the preemption hook between
// them and between the towers; every output (early or not) equals HF's golden embeddings for its inputs; requests of several
// images are read in place (chunk boundaries inside a request change nothing); bad pieces are errors.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <span>

#include "../../conformance/golden.h"
#include "engine/clip_executor.h"
#include "engine/clip_inputs.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"

namespace mmserve::engine {
namespace {

struct BatchRun {
  std::vector<size_t> order;  // finish order
  std::vector<StatusOr<std::shared_ptr<const ModelOutput>>> outputs;
  BatchStats stats;
};

BatchRun run_batch(ClipExecutor& executor, const std::vector<std::unique_ptr<ClipInput>>& inputs, BatchHooks hooks) {
  BatchRun run;
  run.outputs.resize(inputs.size(), Status(StatusCode::kInternal, "not finished"));
  hooks.finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out, double) {
    run.order.push_back(i);
    run.outputs[i] = std::move(out);
  };
  std::vector<BatchItem> batch(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) batch[i].input = inputs[i].get();
  run.stats = executor.run(batch, hooks);
  return run;
}

const std::vector<float>& embedding(const StatusOr<std::shared_ptr<const ModelOutput>>& out) {
  const auto* clip = output_as<ClipOutput>(*out);
  EXPECT_NE(clip, nullptr);
  return clip->embeddings.at(0);
}

// A request of the golden's image `i` (the tiny fixture's [3, 32, 32] pixel values).
std::unique_ptr<ClipInput> one_image_request(const std::vector<float>& pixels, int i) {
  constexpr int64_t kPerImage = 3 * 32 * 32;
  auto r = std::make_unique<ClipInput>();
  r->input_is_image = {true};
  r->images = 1;
  r->pixels.assign(pixels.begin() + i * kPerImage, pixels.begin() + (i + 1) * kPerImage);
  return r;
}

TEST(ClipBatch, TextOnlyRequestsFinishBeforeTheImageTower) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  testing::Golden golden(dir + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");  // [8, 3, 32, 32], HF's own preprocessing
  const int64_t per_image = 3 * 32 * 32, dim = 10;

  auto text_request = [](std::vector<int32_t> ids) {
    auto r = std::make_unique<ClipInput>();
    r->input_is_image = {false};
    r->tokens = static_cast<int64_t>(ids.size());
    r->text_ids = {std::move(ids)};
    return r;
  };
  auto image_request = std::make_unique<ClipInput>();
  image_request->input_is_image = {true};
  image_request->images = 1;
  image_request->pixels.assign(pixels.begin(), pixels.begin() + per_image);
  // golden.json's first text is "a photo of a cat", its second "".
  std::vector<std::unique_ptr<ClipInput>> batch;
  batch.push_back(text_request({49406, 320, 1125, 539, 320, 2368, 49407}));
  batch.push_back(std::move(image_request));
  batch.push_back(text_request({49406, 49407}));

  BatchRun run = run_batch(**executor, batch, {});
  EXPECT_EQ(run.order, (std::vector<size_t>{0, 2, 1})) << "the texts finish before the image tower";
  EXPECT_EQ(run.stats.slot_items[kClipTextSlot], 2);
  EXPECT_EQ(run.stats.slot_items[kClipImageSlot], 1);
  const std::vector<float> text_ref = golden.f32("text_embeds"), image_ref = golden.f32("image_embeds");
  for (size_t k : {0, 2}) {
    ASSERT_TRUE(run.outputs[k].ok()) << run.outputs[k].status().to_string();
    EXPECT_LE(testing::relative_error(embedding(run.outputs[k]).data(), text_ref.data() + (k / 2) * dim, dim), 1e-4)
        << "text " << k;
  }
  ASSERT_TRUE(run.outputs[1].ok()) << run.outputs[1].status().to_string();
  EXPECT_LE(testing::relative_error(embedding(run.outputs[1]).data(), image_ref.data(), dim), 1e-4);
}

// Chunked image tower (preemption points): with a tiny time budget every chunk is one image, the hook runs
// between chunks only, and chunking changes no result.
TEST(ClipBatch, ImageChunksCallTheHookBetweenChunksAndMatchHf) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  ASSERT_TRUE((*executor)->warm().ok());  // measures one image: the first chunk time (engine/chunk_cost.h)
  testing::Golden golden(dir + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");  // 8 images
  const std::vector<float> image_ref = golden.f32("image_embeds");
  const int64_t dim = 10;
  std::vector<std::unique_ptr<ClipInput>> batch;
  for (int i = 0; i < 7; ++i) batch.push_back(one_image_request(pixels, i));
  int hooks = 0;
  BatchHooks chunked;
  chunked.chunk_budget_ms = 1e-6;  // below one image's time: chunks of one, but one size seen so far
  chunked.between_chunks = [&] { ++hooks; };
  BatchRun run = run_batch(**executor, batch, chunked);
  EXPECT_EQ(hooks, 3) << "7 images in chunks of 2 (the probe that tells a chunk's fixed cost from its per-image "
                         "cost after the warm-up's one image), the hook between them";
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(run.outputs[i].ok());
    EXPECT_LE(testing::relative_error(embedding(run.outputs[i]).data(), image_ref.data() + i * dim, dim), 1e-4)
        << "image " << i;
  }
  // A budget of many images' time runs the whole batch as one chunk: no hook.
  hooks = 0;
  chunked.chunk_budget_ms = 1e9;
  run = run_batch(**executor, batch, chunked);
  EXPECT_EQ(hooks, 0) << "7 images under a huge budget: one chunk";
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(run.outputs[i].ok());
    EXPECT_LE(testing::relative_error(embedding(run.outputs[i]).data(), image_ref.data() + i * dim, dim), 1e-4)
        << "image " << i;
  }
}

// The text tower is chunked by the same rule (a flood's batch of 64 texts on a CPU core would otherwise hold an
// urgent text for its whole run), with a preemption point between the towers: 5 texts and 3 images in chunks of
// (after the warm-up, the probing chunks of 2) call the hook 2 + 1 + 1 times, and every row still equals HF's.
TEST(ClipBatch, TextChunksAndTheTowerBoundaryArePreemptionPoints) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  ASSERT_TRUE((*executor)->warm().ok());  // measures one text and one image: the towers' first chunk times
  testing::Golden golden(dir + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");
  const std::vector<float> text_ref = golden.f32("text_embeds"), image_ref = golden.f32("image_embeds");
  const int64_t dim = 10;
  const std::vector<std::vector<int32_t>> golden_ids = {{49406, 320, 1125, 539, 320, 2368, 49407}, {49406, 49407}};
  std::vector<std::unique_ptr<ClipInput>> batch;
  for (int i = 0; i < 5; ++i) {
    auto r = std::make_unique<ClipInput>();
    r->input_is_image = {false};
    r->text_ids = {golden_ids[static_cast<size_t>(i % 2)]};
    batch.push_back(std::move(r));
  }
  for (int i = 0; i < 3; ++i) batch.push_back(one_image_request(pixels, i));
  int hooks = 0;
  BatchHooks chunked;
  chunked.chunk_budget_ms = 1e-6;  // below one row's time; after the warm-up's single rows, chunks of 2 (the probe)
  chunked.between_chunks = [&] { ++hooks; };
  BatchRun run = run_batch(**executor, batch, chunked);
  EXPECT_EQ(hooks, 2 + 1 + 1) << "between the 3 text chunks (2, 2, 1), between the towers, between the 2 image "
                                 "chunks (2, 1)";
  EXPECT_EQ(run.order, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(run.outputs[i].ok()) << run.outputs[i].status().to_string();
    EXPECT_LE(testing::relative_error(embedding(run.outputs[i]).data(), text_ref.data() + (i % 2) * dim, dim), 1e-4)
        << "text " << i;
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(run.outputs[5 + i].ok());
    EXPECT_LE(testing::relative_error(embedding(run.outputs[5 + i]).data(), image_ref.data() + i * dim, dim), 1e-4)
        << "image " << i;
  }
  // Without a preemption point (a class-1 batch) both towers run whole.
  hooks = 0;
  run = run_batch(**executor, batch, {});
  EXPECT_EQ(hooks, 0);
}

// Requests of 3, 2 and 3 images (and a text between them): the executor reads every request's pixels where they
// are, also when a chunk starts or ends inside a request, and each row equals one contiguous call's.
TEST(ClipBatch, MultiImageRequestsReadInPlaceEqualOneContiguousCall) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  ASSERT_TRUE((*executor)->warm().ok());
  testing::Golden golden(dir + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");  // 8 images
  const int64_t per_image = 3 * 32 * 32, dim = 10;
  auto reference = (*executor)->embed_images(pixels, 8);
  ASSERT_TRUE(reference.ok());
  std::vector<std::unique_ptr<ClipInput>> batch;
  int64_t first = 0;
  for (int64_t images : {3, 0, 2, 3}) {
    auto r = std::make_unique<ClipInput>();
    if (images == 0) {
      r->input_is_image = {false};
      r->text_ids = {{49406, 49407}};
    } else {
      r->input_is_image.assign(static_cast<size_t>(images), true);
      r->images = images;
      r->pixels.assign(pixels.begin() + first * per_image, pixels.begin() + (first + images) * per_image);
      first += images;
    }
    batch.push_back(std::move(r));
  }
  for (double budget_ms : {0.0, 1e-6, 1e9}) {  // one call; chunks of one or two images; one chunk
    BatchHooks hooks;
    hooks.chunk_budget_ms = budget_ms;
    if (budget_ms > 0) hooks.between_chunks = [] {};
    BatchRun run = run_batch(**executor, batch, hooks);
    int64_t row = 0;
    for (size_t i : {0, 2, 3}) {
      ASSERT_TRUE(run.outputs[i].ok()) << run.outputs[i].status().to_string();
      const auto* clip = output_as<ClipOutput>(*run.outputs[i]);
      ASSERT_NE(clip, nullptr);
      for (const std::vector<float>& e : clip->embeddings) {
        EXPECT_LE(testing::relative_error(e.data(), reference->data() + row * dim, dim), 1e-6)
            << "budget " << budget_ms << " ms, request " << i << ", row " << row;
        ++row;
      }
    }
    EXPECT_EQ(row, 8);
  }
}

TEST(ClipBatch, ImagePiecesMustBeWholeImagesAndTheRangeInside) {
  auto executor = ClipExecutor::create(testing::fixture("clip-tiny-quickgelu-f32"), {});
  ASSERT_TRUE(executor.ok());
  const std::vector<float> ragged(3 * 32 * 32 + 1, 0.0f), two(2 * 3 * 32 * 32, 0.0f);
  const std::vector<std::span<const float>> bad = {std::span<const float>(ragged)};
  EXPECT_EQ((*executor)->embed_images(bad, 0, 1).status().code(), StatusCode::kInvalidArgument);
  const std::vector<std::span<const float>> pieces = {std::span<const float>(two), std::span<const float>(two)};
  EXPECT_EQ((*executor)->embed_images(pieces, 3, 2).status().code(), StatusCode::kInvalidArgument);
  auto last = (*executor)->embed_images(pieces, 3, 1);
  ASSERT_TRUE(last.ok()) << last.status().to_string();
  EXPECT_EQ(last->size(), 10u);
}

TEST(ClipBatch, AnotherFamilysInputIsAnErrorNotACrash) {
  auto executor = ClipExecutor::create(testing::fixture("clip-tiny-quickgelu-f32"), {});
  ASSERT_TRUE(executor.ok());
  struct Other : ModelInput {};
  std::vector<std::unique_ptr<ClipInput>> none;
  Other other;
  std::vector<BatchItem> batch(1);
  batch[0].input = &other;
  std::optional<Status> got;
  BatchHooks hooks;
  hooks.finish = [&](size_t, StatusOr<std::shared_ptr<const ModelOutput>> out, double) { got = out.status(); };
  (*executor)->run(batch, hooks);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->ok());
}

// Decoded images travel as 8-bit levels (engine/clip_inputs.cpp) and are expanded by the executor: the
// embeddings equal those of the same images as float pixels from the frontend's to_pixel_values (the path the
// conformance tests hold to HF), bit for bit, in a batch of levels only and in a batch mixing both forms (one
// request carries pixel_values beside a decoded image: all its images become floats).
TEST(ClipBatch, ImageLevelsEqualFloatPixels) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  auto executor = ClipExecutor::create(dir, {});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  auto inputs = ClipInputs::create(dir, **executor, {});
  ASSERT_TRUE(inputs.ok()) << inputs.status().to_string();
  auto config = image::load_clip_preprocess_config(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const std::vector<std::string> files = {"chelsea.png", "rocket.jpg", "camera.png", "logo.png"};
  auto bytes_of = [](const std::string& name) {
    std::ifstream f(testing::fixture("images/" + name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  auto image_item = [&](const std::string& name) {
    InputItem item;
    item.kind = InputKind::kImageBytes;
    item.image_bytes = bytes_of(name);
    return item;
  };
  auto float_pixels = [&](const std::string& name) {  // the frontend's float path
    const std::string b = bytes_of(name);
    auto rgb = image::decode_rgb(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
    EXPECT_TRUE(rgb.ok());
    const image::RgbImage cropped = image::resize_and_crop(*rgb, *config);
    std::vector<float> values(static_cast<size_t>(3 * cropped.width * cropped.height));
    image::to_pixel_values(cropped, *config, values.data());
    return values;
  };
  // Reference: every image as float pixels, one request each.
  std::vector<std::unique_ptr<ClipInput>> floats;
  for (const std::string& name : files) {
    auto r = std::make_unique<ClipInput>();
    r->input_is_image = {true};
    r->images = 1;
    r->pixels = float_pixels(name);
    floats.push_back(std::move(r));
  }
  const BatchRun want = run_batch(**executor, floats, {});
  // Levels: the same images prepared as the server prepares them.
  std::vector<std::unique_ptr<ClipInput>> levels;
  for (const std::string& name : files) {
    std::vector<InputItem> items;
    items.push_back(image_item(name));
    auto prepared = (*inputs)->prepare(items, nullptr);
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    auto* clip = dynamic_cast<ClipInput*>(prepared->input.get());
    ASSERT_NE(clip, nullptr);
    EXPECT_TRUE(clip->pixels.empty());
    EXPECT_EQ(clip->levels.size(), 3u * 32 * 32);
    prepared->input.release();
    levels.emplace_back(clip);
  }
  const BatchRun got = run_batch(**executor, levels, {});
  for (size_t i = 0; i < files.size(); ++i) {
    ASSERT_TRUE(want.outputs[i].ok() && got.outputs[i].ok()) << files[i];
    EXPECT_EQ(embedding(got.outputs[i]), embedding(want.outputs[i])) << files[i];
  }
  // Mixed: request 1 holds a decoded image and then pixel_values (the float form of camera.png).
  std::vector<InputItem> items;
  items.push_back(image_item(files[1]));
  InputItem tensor;
  tensor.kind = InputKind::kPixelValues;
  tensor.pixel_values = float_pixels(files[2]);
  items.push_back(std::move(tensor));
  auto two = (*inputs)->prepare(items, nullptr);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  auto* two_clip = dynamic_cast<ClipInput*>(two->input.get());
  ASSERT_NE(two_clip, nullptr);
  EXPECT_TRUE(two_clip->levels.empty());
  EXPECT_EQ(two_clip->pixels.size(), 2u * 3 * 32 * 32);
  two->input.release();
  std::vector<std::unique_ptr<ClipInput>> mixed;
  mixed.push_back(std::move(levels[0]));
  mixed.emplace_back(two_clip);
  mixed.push_back(std::move(levels[3]));
  const BatchRun mix = run_batch(**executor, mixed, {});
  ASSERT_TRUE(mix.outputs[0].ok() && mix.outputs[1].ok() && mix.outputs[2].ok());
  const auto* pair = output_as<ClipOutput>(*mix.outputs[1]);
  ASSERT_NE(pair, nullptr);
  ASSERT_EQ(pair->embeddings.size(), 2u);
  // The image tower sees the same four images in the same order as the reference batch: equal bit for bit.
  EXPECT_EQ(embedding(mix.outputs[0]), embedding(want.outputs[0]));
  EXPECT_EQ(pair->embeddings[0], embedding(want.outputs[1]));
  EXPECT_EQ(pair->embeddings[1], embedding(want.outputs[2]));
  EXPECT_EQ(embedding(mix.outputs[2]), embedding(want.outputs[3]));
}

}  // namespace
}  // namespace mmserve::engine
