// Host pixels on the GPU path without a joined copy (engine/clip_batch.cpp, models/clip/clip_cuda_host_copy.cpp):
// a batch whose requests each hold their own pixels, copied through the pinned ring (with slots that end inside
// images and inside floats) or pageable piece by piece, gives bit for bit the embeddings of the same images copied
// to the GPU first (encode_images_on_device: same bucket, same graph), in every compute dtype; the load-time
// choice names itself; ClipExecutor::run over such requests gives each request the rows of one contiguous call.
// Bad pieces are errors. Skipped, with the reason, where no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <string>

#include "../../conformance/golden.h"
#include "engine/clip_executor.h"
#include "kernels/pixel_levels/pixel_levels.h"
#include "kernels/testing/cuda_test_util.h"
#include "models/clip/clip_cuda.h"

namespace mmserve::engine {
namespace {

constexpr const char* kFixture = "clip-tiny-quickgelu-f32";

std::unique_ptr<models::ClipCudaModel> load_model(DType dtype, size_t slot_bytes,
                                                  models::HostCopy copy = models::HostCopy::kStaged) {
  models::ClipCudaOptions options;
  options.dtype = dtype;
  options.buckets = {1, 2, 4, 8};
  options.staging_slot_bytes = slot_bytes;
  options.host_copy = copy;
  auto model = models::ClipCudaModel::load(testing::fixture(kFixture), options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(*model) : nullptr;
}

class ClipStagingCuda : public ::testing::TestWithParam<DType> {};

TEST_P(ClipStagingCuda, PiecesThroughTheRingEqualDevicePixelsBitForBit) {
  MMSERVE_REQUIRE_GPU();
  testing::Golden golden(testing::fixture(kFixture) + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");  // [8, 3, 32, 32]
  const int64_t n = golden.shape("pixel_values")[0], per_image = 3 * 32 * 32;
  ASSERT_EQ(n, 8);
  float* device = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&device), pixels.size() * sizeof(float)));
  ASSERT_CUDA_OK(cudaMemcpy(device, pixels.data(), pixels.size() * sizeof(float), cudaMemcpyHostToDevice));
  // Requests of 3, 1 and 4 images, as a batch passes them.
  const std::span<const float> all(pixels);
  const std::vector<std::span<const float>> pieces = {
      all.subspan(0, 3 * per_image), all.subspan(3 * per_image, per_image), all.subspan(4 * per_image, 4 * per_image)};
  // Ring slots of 1000 bytes end inside images and floats; 3 images' worth divides the batch; 4 MiB holds it
  // whole. Then pageable, piece by piece, and whichever the load-time measurement picks.
  struct Way {
    models::HostCopy copy;
    size_t slot_bytes;
  };
  for (const Way& way : {Way{models::HostCopy::kStaged, 1000}, Way{models::HostCopy::kStaged, 3 * per_image * 4},
                         Way{models::HostCopy::kStaged, size_t{4} << 20}, Way{models::HostCopy::kPageable, 1000},
                         Way{models::HostCopy::kAuto, size_t{4} << 20}}) {
    const size_t slot_bytes = way.slot_bytes;
    auto model = load_model(GetParam(), slot_bytes, way.copy);
    ASSERT_TRUE(model);
    const std::string how = model->host_copy_description();
    std::printf("  host pixels: %s\n", how.c_str());
    const std::string expected = way.copy == models::HostCopy::kStaged     ? "pinned ring"
                                 : way.copy == models::HostCopy::kPageable ? "pageable per piece"
                                                                           : "";
    EXPECT_EQ(how.rfind(expected, 0), 0u) << how;
    EXPECT_EQ(how.find("GB/s") != std::string::npos, way.copy == models::HostCopy::kAuto) << how;
    const int64_t dim = model->config().projection_dim;
    std::vector<float> reference(n * dim), staged(n * dim), twice(n * dim);
    ASSERT_TRUE(model->encode_images_on_device(device, n, reference.data()).ok());
    ASSERT_TRUE(model->encode_images(pieces, staged.data()).ok());
    EXPECT_EQ(staged, reference) << how << ", slots of " << slot_bytes << " bytes";
    // Again: the ring's slots are reused across calls.
    ASSERT_TRUE(model->encode_images(pieces, twice.data()).ok());
    EXPECT_EQ(twice, reference) << how << ", second call, slots of " << slot_bytes << " bytes";
    // The one-pointer entry point goes through the same ring.
    std::vector<float> contiguous(n * dim);
    ASSERT_TRUE(model->encode_images(pixels.data(), n, contiguous.data()).ok());
    EXPECT_EQ(contiguous, reference);
  }
  cudaFree(device);
}

// 8-bit levels (what decoded images become, engine/clip_inputs.cpp) through the ring or pageable, expanded on the
// GPU by kernels/pixel_levels: bit for bit the embeddings of their float values (expanded by the CPU twin) copied
// to the GPU first; a second call reuses the uploaded table; a wrong table size and broken pieces are errors.
TEST_P(ClipStagingCuda, LevelsThroughTheRingEqualTheirFloatValues) {
  MMSERVE_REQUIRE_GPU();
  const int64_t n = 8, plane = 32 * 32, per_image = 3 * plane;
  std::vector<uint8_t> levels(static_cast<size_t>(n * per_image));
  for (size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<uint8_t>((i * 37 + i / 7) % 256);
  std::vector<float> table(3 * 256);
  for (size_t i = 0; i < table.size(); ++i) table[i] = (static_cast<float>(i % 256) / 255.0f - 0.45f) / 0.27f;
  std::vector<float> values(levels.size());
  kernels::expand_pixel_levels(levels.data(), n, 3, plane, table.data(), values.data());
  float* device = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&device), values.size() * sizeof(float)));
  ASSERT_CUDA_OK(cudaMemcpy(device, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
  const std::span<const uint8_t> all(levels);
  const std::vector<std::span<const uint8_t>> pieces = {
      all.subspan(0, 3 * per_image), all.subspan(3 * per_image, per_image), all.subspan(4 * per_image, 4 * per_image)};
  for (models::HostCopy copy : {models::HostCopy::kStaged, models::HostCopy::kPageable}) {
    auto model = load_model(GetParam(), 1000, copy);
    ASSERT_TRUE(model);
    const int64_t dim = model->config().projection_dim;
    std::vector<float> reference(n * dim), got(n * dim), twice(n * dim);
    ASSERT_TRUE(model->encode_images_on_device(device, n, reference.data()).ok());
    ASSERT_TRUE(model->encode_image_levels(pieces, table, got.data()).ok());
    EXPECT_EQ(got, reference) << model->host_copy_description();
    ASSERT_TRUE(model->encode_image_levels(pieces, table, twice.data()).ok());
    EXPECT_EQ(twice, reference) << "second call";
    EXPECT_EQ(model->encode_image_levels(pieces, std::span<const float>(table).first(255), got.data()).code(),
              StatusCode::kInvalidArgument);
    const std::vector<std::span<const uint8_t>> broken = {all.subspan(0, per_image + 3)};
    EXPECT_EQ(model->encode_image_levels(broken, table, got.data()).code(), StatusCode::kInvalidArgument);
  }
  cudaFree(device);
}

TEST_P(ClipStagingCuda, PiecesThatAreNotWholeImagesAreErrors) {
  MMSERVE_REQUIRE_GPU();
  auto model = load_model(GetParam(), 1000);
  ASSERT_TRUE(model);
  const std::vector<float> pixels(3 * 32 * 32 + 5, 0.0f);
  const std::vector<std::span<const float>> pieces = {std::span<const float>(pixels)};
  std::vector<float> out(2 * model->config().projection_dim);
  EXPECT_EQ(model->encode_images(pieces, out.data()).code(), StatusCode::kInvalidArgument);
  const std::vector<float> nine(9 * 3 * 32 * 32, 0.0f);  // more than the largest bucket
  const std::vector<std::span<const float>> too_many = {std::span<const float>(nine)};
  std::vector<float> out9(9 * model->config().projection_dim);
  EXPECT_EQ(model->encode_images(too_many, out9.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(model->encode_images(std::span<const std::span<const float>>(), out.data()).ok()) << "no images";
}

TEST_P(ClipStagingCuda, BatchOfRequestsEqualsOneContiguousCall) {
  MMSERVE_REQUIRE_GPU();
  ExecutorOptions options;
  options.device = Device::cuda(0);
  options.dtype = GetParam();
  options.batch_size_max = 8;
  auto executor = ClipExecutor::create(testing::fixture(kFixture), options);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  testing::Golden golden(testing::fixture(kFixture) + "/golden.safetensors");
  const std::vector<float> pixels = golden.f32("pixel_values");
  const int64_t per_image = 3 * 32 * 32;
  auto reference = (*executor)->embed_images(pixels, 8);
  ASSERT_TRUE(reference.ok());
  std::vector<std::unique_ptr<ClipInput>> requests;
  int64_t first = 0;
  for (int64_t images : {2, 1, 5}) {
    auto r = std::make_unique<ClipInput>();
    r->input_is_image.assign(static_cast<size_t>(images), true);
    r->images = images;
    r->pixels.assign(pixels.begin() + first * per_image, pixels.begin() + (first + images) * per_image);
    first += images;
    requests.push_back(std::move(r));
  }
  std::vector<BatchItem> batch(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) batch[i].input = requests[i].get();
  std::vector<std::shared_ptr<const ModelOutput>> outputs(requests.size());
  BatchHooks hooks;
  hooks.finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out, double) {
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    outputs[i] = *out;
  };
  (*executor)->run(batch, hooks);
  const int64_t dim = (*executor)->embedding_dim();
  int64_t row = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto* clip = output_as<ClipOutput>(outputs[i]);
    ASSERT_NE(clip, nullptr);
    for (const std::vector<float>& embedding : clip->embeddings) {
      const std::vector<float> expected(reference->begin() + row * dim, reference->begin() + (row + 1) * dim);
      EXPECT_EQ(embedding, expected) << "request " << i << ", image row " << row;
      ++row;
    }
  }
  EXPECT_EQ(row, 8);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ClipStagingCuda, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace mmserve::engine
