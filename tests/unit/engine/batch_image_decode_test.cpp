// engine/batch_image_decode.h: PNGs kept compressed by the preparer and decoded batch by batch give the preparer's
// own levels (decode_rgb + resize_and_crop + to_pixel_levels) bit for bit, for every colour type the GPU decoder
// takes, sizes above and below the crop, mixed with host levels; what it refuses it says per image, and the host
// fallback then gives the very errors of the CPU path. The executor with `image_decode: batch` (cpu: the kernels'
// CPU twins) gives the same embeddings as the preprocessing path, keeps errors per request, and recomputes the
// rows of images only the host decodes. On a GPU the CUDA decoder equals the CPU one (skipped without a GPU).
#include "engine/batch_image_decode.h"

#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../conformance/golden.h"
#include "../frontends/image/reference_codecs.h"
#include "engine/clip_executor.h"
#include "engine/clip_inputs.h"
#include "engine/png_decode_stage.h"
#include "engine/request_image.h"
#include "frontends/image/image.h"
#include "frontends/image/preprocess.h"
#include "kernels/png_inflate/png_inflate.h"
#if MMSERVE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mmserve::engine {
namespace {

// An 8-bit PNG of `channels` (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) of noisy but compressible content, written
// here with zlib's compress2 (a 32 KiB window, which the GPU decoder requires: libpng's writer shrinks the window
// of small images, and such files are decoded on the host), rows alternating filters None and Sub.
std::string make_png(int width, int height, int channels, uint32_t seed) {
  static const uint8_t kColorType[5] = {0, 0, 4, 2, 6};
  std::mt19937 rng(seed);
  const size_t row = static_cast<size_t>(width) * channels;
  std::vector<uint8_t> raw(row * height), filtered;
  for (size_t i = 0; i < raw.size(); ++i) {
    raw[i] = static_cast<uint8_t>((i / channels) % 7 == 0 ? rng() : (i * 3 + seed) & 0xff);
  }
  for (int y = 0; y < height; ++y) {
    const uint8_t* r = raw.data() + y * row;
    filtered.push_back(static_cast<uint8_t>(y % 2));
    for (size_t x = 0; x < row; ++x) {
      filtered.push_back(y % 2 == 0 ? r[x] : static_cast<uint8_t>(r[x] - (x >= size_t(channels) ? r[x - channels] : 0)));
    }
  }
  uLongf zlen = compressBound(filtered.size());
  std::vector<uint8_t> z(zlen);
  EXPECT_EQ(compress2(z.data(), &zlen, filtered.data(), filtered.size(), 6), Z_OK);
  z.resize(zlen);
  std::string out("\x89PNG\r\n\x1a\n", 8);
  auto chunk = [&out](const char* type, const std::vector<uint8_t>& data) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>(data.size() >> (24 - 8 * b)));
    std::string body(type, 4);
    body.append(data.begin(), data.end());
    out += body;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>(crc >> (24 - 8 * b)));
  };
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {static_cast<uint32_t>(width), static_cast<uint32_t>(height)}) {
    for (int b = 0; b < 4; ++b) ihdr.push_back(static_cast<uint8_t>(v >> (24 - 8 * b)));
  }
  ihdr.insert(ihdr.end(), {8, kColorType[channels], 0, 0, 0});
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", {});
  return out;
}

// The preparer's CPU levels of one file under `config`.
std::vector<uint8_t> cpu_levels(const std::string& file, const image::ClipPreprocessConfig& config) {
  StatusOr<image::RgbImage> decoded = decode_request_image(file, 1 << 26, "input 0 (image)");
  EXPECT_TRUE(decoded.ok()) << decoded.status().to_string();
  const image::RgbImage cropped = image::resize_and_crop(*decoded, config);
  std::vector<uint8_t> levels(static_cast<size_t>(3) * cropped.width * cropped.height);
  image::to_pixel_levels(cropped, levels.data());
  return levels;
}

// Kept whatever its size (the decoder's arithmetic is under test here; the size rule has its own test).
std::shared_ptr<CompressedPng> keep(std::string file) {
  auto kept = keep_png_compressed(file, 1 << 26, "input 0 (image)", SIZE_MAX);
  EXPECT_TRUE(kept.has_value());
  EXPECT_TRUE(kept->ok()) << kept->status().to_string();
  return std::move(**kept);
}

// Every colour type, shapes around the crop (identity, up, down, strips), a real photograph.
std::vector<std::string> test_files() {
  std::vector<std::string> files;
  const int sizes[][2] = {{224, 224}, {640, 480}, {480, 640}, {100, 57}, {1, 300}, {301, 1}, {223, 225}, {13, 7}};
  uint32_t seed = 1;
  for (const auto& wh : sizes) {
    for (int channels = 1; channels <= 4; ++channels) files.push_back(make_png(wh[0], wh[1], channels, seed++));
  }
  const std::vector<uint8_t> chelsea = image::testing::read_file_bytes(image::testing::fixture("chelsea.png"));
  files.emplace_back(chelsea.begin(), chelsea.end());
  return files;
}

class BatchImageDecode : public ::testing::TestWithParam<int> {};  // resample 2 or 3

TEST_P(BatchImageDecode, CpuTwinsEqualThePreparersLevelsWithHostLevelsMixedIn) {
  image::ClipPreprocessConfig config;
  config.resample = GetParam();
  std::optional<ImageDecodeGeometry> geometry = clip_decode_geometry(config);
  ASSERT_TRUE(geometry.has_value());
  auto decoder = BatchImageDecoder::create(Device::cpu(), *geometry);
  ASSERT_TRUE(decoder.ok()) << decoder.status().to_string();
  const std::vector<std::string> files = test_files();
  std::vector<std::shared_ptr<CompressedPng>> kept;
  std::vector<std::vector<uint8_t>> want;
  std::vector<BatchImage> images;
  for (size_t i = 0; i < files.size(); ++i) {
    want.push_back(cpu_levels(files[i], config));
    kept.push_back(keep(files[i]));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    BatchImage im;
    if (i % 5 == 2) {
      im.levels = want[i];  // every fifth image as host levels: placed between decoded ones
    } else {
      im.png = &kept[i]->stream;
    }
    images.push_back(im);
  }
  const size_t per_image = 3 * 224 * 224;
  std::vector<uint8_t> out(images.size() * per_image, 0xab);
  ASSERT_TRUE((*decoder)->run(images, out.data()).ok());
  ASSERT_EQ((*decoder)->statuses().size(), images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    EXPECT_EQ((*decoder)->statuses()[i], 0) << "image " << i;
    EXPECT_TRUE(std::equal(want[i].begin(), want[i].end(), out.begin() + i * per_image)) << "image " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Resample, BatchImageDecode, ::testing::Values(2, 3));

TEST(BatchImageDecodeKeep, FilesTheDecoderDoesNotTakeStayWithTheCaller) {
  for (const char* name : {"rocket.jpg", "palette_color.png", "camera16.png", "chelsea_lossy.webp"}) {
    const std::vector<uint8_t> bytes = image::testing::read_file_bytes(image::testing::fixture(name));
    std::string file(bytes.begin(), bytes.end());
    const std::string copy = file;
    EXPECT_FALSE(keep_png_compressed(file, 1 << 26, "input 0 (image)").has_value()) << name;
    EXPECT_EQ(file, copy) << name << ": the bytes are left as they were";
  }
  // libpng's writer declares a small window for a small image: the host decodes it (exact errors need a 32 KiB one).
  image::testing::PngToWrite spec;
  spec.width = spec.height = 10;
  spec.color_type = PNG_COLOR_TYPE_RGB;
  spec.rows.assign(300, 7);
  const std::vector<uint8_t> small = image::testing::write_png(spec);
  std::string small_file(small.begin(), small.end());
  EXPECT_FALSE(keep_png_compressed(small_file, 1 << 26, "input 0 (image)").has_value());
  // A stream above the size limit stays with the host too.
  std::string large = make_png(64, 64, 3, 8);
  const std::string large_copy = large;
  EXPECT_FALSE(keep_png_compressed(large, 1 << 26, "input 0 (image)", 100).has_value());
  EXPECT_EQ(large, large_copy);
  // Above the pixel limit: the same error as the preparer's decode.
  std::string big = make_png(300, 200, 3, 7);
  const StatusOr<image::RgbImage> cpu = decode_request_image(big, 100 * 100, "input 3 (image)");
  auto kept = keep_png_compressed(big, 100 * 100, "input 3 (image)");
  ASSERT_TRUE(kept.has_value());
  ASSERT_FALSE(kept->ok());
  EXPECT_EQ(kept->status().code(), StatusCode::kTooLarge);
  EXPECT_EQ(kept->status().code(), cpu.status().code());
  EXPECT_EQ(kept->status().message(), cpu.status().message());
}

// A PNG whose chunks are sound (right CRCs) but whose zlib stream is not: the split takes it, the decoder refuses it
// (a status), and the host fallback gives libpng's error, as the preparer would.
std::string corrupt_idat(const std::string& png) {
  std::string bad = png;
  const size_t idat = bad.find("IDAT");
  const uint32_t length = (static_cast<uint8_t>(bad[idat - 4]) << 24) | (static_cast<uint8_t>(bad[idat - 3]) << 16) |
                          (static_cast<uint8_t>(bad[idat - 2]) << 8) | static_cast<uint8_t>(bad[idat - 1]);
  for (size_t i = idat + 4 + 2; i < idat + 4 + length; i += 3) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bad.data() + idat), static_cast<uInt>(4 + length)));
  for (int b = 0; b < 4; ++b) bad[idat + 4 + length + b] = static_cast<char>(crc >> (24 - 8 * b));
  return bad;
}

TEST(BatchImageDecodeFallback, ABrokenStreamIsAStatusAndTheHostGivesTheCpuPathsError) {
  image::ClipPreprocessConfig config;
  auto decoder = BatchImageDecoder::create(Device::cpu(), *clip_decode_geometry(config));
  ASSERT_TRUE(decoder.ok());
  const std::string good = make_png(64, 48, 3, 5), bad = corrupt_idat(make_png(64, 48, 3, 6));
  std::shared_ptr<CompressedPng> kept_good = keep(good), kept_bad = keep(bad);
  const BatchImage images[] = {{&kept_good->stream, {}}, {&kept_bad->stream, {}}};
  std::vector<uint8_t> out(2 * 3 * 224 * 224);
  ASSERT_TRUE((*decoder)->run(images, out.data()).ok());
  EXPECT_EQ((*decoder)->statuses()[0], 0);
  EXPECT_NE((*decoder)->statuses()[1], 0);
  const StatusOr<std::vector<uint8_t>> host = decode_png_levels_on_host(*kept_bad, config);
  const StatusOr<image::RgbImage> cpu = decode_request_image(bad, 1 << 26, "input 0 (image)");
  ASSERT_FALSE(cpu.ok());
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(host.status().message(), cpu.status().message());
  // And the good one's host fallback is its levels.
  const StatusOr<std::vector<uint8_t>> good_host = decode_png_levels_on_host(*kept_good, config);
  ASSERT_TRUE(good_host.ok());
  EXPECT_EQ(*good_host, cpu_levels(good, config));
}

TEST(BatchImageDecodeErrors, LevelsOfTheWrongSizeAreRefused) {
  auto decoder = BatchImageDecoder::create(Device::cpu(), *clip_decode_geometry({}));
  ASSERT_TRUE(decoder.ok());
  const std::vector<uint8_t> small(10);
  const BatchImage images[] = {{nullptr, small}};
  std::vector<uint8_t> out(3 * 224 * 224);
  EXPECT_EQ((*decoder)->run(images, out.data()).code(), StatusCode::kInvalidArgument);
  image::ClipPreprocessConfig no_crop;
  no_crop.do_center_crop = false;
  EXPECT_FALSE(clip_decode_geometry(no_crop).has_value());
  ImageDecodeGeometry nearest = *clip_decode_geometry({});
  nearest.resample = 0;
  EXPECT_EQ(BatchImageDecoder::create(Device::cpu(), nearest).status().code(), StatusCode::kUnimplemented);
}

// --- The executor with image_decode: batch (the tiny CLIP fixture, 32x32 input, on cpu).

struct Prepared1 {
  std::unique_ptr<ClipInput> input;
  Status status;
};

Prepared1 prepare(const ClipInputs& inputs, const std::vector<std::string>& files) {
  std::vector<InputItem> items;
  for (const std::string& f : files) {
    InputItem item;
    item.kind = InputKind::kImageBytes;
    item.image_bytes = f;
    items.push_back(std::move(item));
  }
  StatusOr<Prepared> p = inputs.prepare(items, nullptr);
  if (!p.ok()) return {nullptr, p.status()};
  return {std::unique_ptr<ClipInput>(static_cast<ClipInput*>(p->input.release())), ok_status()};
}

std::vector<StatusOr<std::shared_ptr<const ModelOutput>>> run(ClipExecutor& executor,
                                                              const std::vector<std::unique_ptr<ClipInput>>& inputs) {
  std::vector<StatusOr<std::shared_ptr<const ModelOutput>>> out(inputs.size(), internal_error("not finished"));
  BatchHooks hooks;
  hooks.finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> o, double) { out[i] = std::move(o); };
  std::vector<BatchItem> batch(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) batch[i].input = inputs[i].get();
  executor.run(batch, hooks);
  return out;
}

// Both modes that keep PNGs compressed: the decoder in the executor's batch (kBatch) and the stage ahead of the
// batcher (kStage, png_decode_stage.h), on cpu with the kernels' CPU twins.
std::string mode_name(const ::testing::TestParamInfo<ClipOptions::ImageDecode>& info) {
  return info.param == ClipOptions::ImageDecode::kBatch ? "batch" : "stage";
}
const auto kKeptPngModes = ::testing::Values(ClipOptions::ImageDecode::kBatch, ClipOptions::ImageDecode::kStage);

class BatchImageDecodeExecutor : public ::testing::TestWithParam<ClipOptions::ImageDecode> {};
INSTANTIATE_TEST_SUITE_P(Modes, BatchImageDecodeExecutor, kKeptPngModes, mode_name);

TEST_P(BatchImageDecodeExecutor, SameEmbeddingsAsThePreprocessingPathAndErrorsPerRequest) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  ClipOptions batch_decode;
  batch_decode.image_decode = GetParam();
  auto plain = ClipExecutor::create(dir, {});
  auto deferred = ClipExecutor::create(dir, {}, batch_decode);
  ASSERT_TRUE(plain.ok() && deferred.ok()) << deferred.status().to_string();
  EXPECT_FALSE((*plain)->decodes_images_in_batch());
  EXPECT_TRUE((*deferred)->decodes_images_in_batch());
  auto plain_inputs = ClipInputs::create(dir, **plain, {});
  auto deferred_inputs = ClipInputs::create(dir, **deferred, {});
  ASSERT_TRUE(plain_inputs.ok()) << plain_inputs.status().to_string();
  ASSERT_TRUE(deferred_inputs.ok()) << deferred_inputs.status().to_string();

  const std::vector<uint8_t> jpeg = image::testing::read_file_bytes(image::testing::fixture("rocket.jpg"));
  const std::string rocket(jpeg.begin(), jpeg.end());
  // Where preparation runs: PNGs the batch decoder takes cost only the split (the submitting thread); anything
  // the preparer decodes goes to the preprocessing pool.
  auto items = [](std::vector<std::pair<InputKind, std::string>> list) {
    std::vector<InputItem> out;
    for (auto& [kind, bytes] : list) {
      InputItem item;
      item.kind = kind;
      item.image_bytes = bytes;
      if (kind == InputKind::kPixelValues) item.pixel_values.assign(3 * 32 * 32, 0.0f);
      out.push_back(std::move(item));
    }
    return out;
  };
  const std::vector<uint8_t> palette = image::testing::read_file_bytes(image::testing::fixture("palette_color.png"));
  const std::string png = make_png(40, 40, 3, 11);
  EXPECT_FALSE((*deferred_inputs)->decodes_media(items({{InputKind::kImageBytes, png}, {InputKind::kText, ""}})));
  EXPECT_TRUE((*plain_inputs)->decodes_media(items({{InputKind::kImageBytes, png}})));
  EXPECT_TRUE((*deferred_inputs)->decodes_media(items({{InputKind::kImageBytes, rocket}})));
  EXPECT_TRUE((*deferred_inputs)->decodes_media(
      items({{InputKind::kImageBytes, std::string(palette.begin(), palette.end())}})));
  EXPECT_TRUE((*deferred_inputs)->decodes_media(items({{InputKind::kImageBytes, png}, {InputKind::kPixelValues, ""}})));
  EXPECT_FALSE((*deferred_inputs)->decodes_media(items({{InputKind::kPixelValues, ""}})));
  const std::string bad = corrupt_idat(make_png(40, 30, 4, 9));
  // Requests: two PNGs; a JPEG (decoded by the preparer) between PNGs; a broken PNG beside a good one; one PNG.
  const std::vector<std::vector<std::string>> requests = {{make_png(50, 40, 3, 1), make_png(32, 32, 1, 2)},
                                                          {make_png(31, 77, 2, 3), rocket, make_png(200, 90, 4, 4)},
                                                          {make_png(33, 33, 3, 5), bad},
                                                          {make_png(320, 240, 3, 6)}};
  std::vector<std::unique_ptr<ClipInput>> a, b;
  for (const auto& files : requests) {
    Prepared1 pa = prepare(**plain_inputs, files), pb = prepare(**deferred_inputs, files);
    if (&files == &requests[2]) {  // the preparer's decode refuses the broken PNG: a 400 before any batch
      ASSERT_FALSE(pa.status.ok());
      ASSERT_TRUE(pb.status.ok()) << "the batch path only splits it: " << pb.status.to_string();
      EXPECT_EQ(pb.input->kept_pngs.size(), 2u);
      a.push_back(nullptr);
    } else {
      ASSERT_TRUE(pa.status.ok() && pb.status.ok()) << pa.status.to_string() << " " << pb.status.to_string();
      EXPECT_TRUE(pa.input->kept_pngs.empty());
      a.push_back(std::move(pa.input));
    }
    b.push_back(std::move(pb.input));
  }
  EXPECT_EQ(b[1]->kept_pngs.size(), 2u);  // the JPEG went to levels
  EXPECT_EQ(b[1]->levels.size(), 3u * 32 * 32);
  const Status preparer_error = prepare(**plain_inputs, requests[2]).status;

  std::vector<std::unique_ptr<ClipInput>> a_ok;  // the preprocessing path without the refused request
  for (auto& r : a) {
    if (r) a_ok.push_back(std::move(r));
  }
  const auto want = run(**plain, a_ok);
  const auto got = run(**deferred, b);
  const size_t map[] = {0, 1, 99, 2};
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 2) {
      ASSERT_FALSE(got[i].ok());
      EXPECT_EQ(got[i].status().code(), preparer_error.code());
      EXPECT_EQ(got[i].status().message(), preparer_error.message());
      continue;
    }
    ASSERT_TRUE(got[i].ok()) << got[i].status().to_string();
    ASSERT_TRUE(want[map[i]].ok());
    const auto* g = output_as<ClipOutput>(*got[i]);
    const auto* w = output_as<ClipOutput>(*want[map[i]]);
    ASSERT_EQ(g->embeddings.size(), w->embeddings.size());
    for (size_t k = 0; k < g->embeddings.size(); ++k) {
      for (size_t d = 0; d < g->embeddings[k].size(); ++d) {
        EXPECT_NEAR(g->embeddings[k][d], w->embeddings[k][d], 1e-6f) << "request " << i << " image " << k;
      }
    }
  }
}

TEST(BatchImageDecodeConfig, KeyAndRefusals) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  EXPECT_TRUE(ClipExecutor::create_for_server(dir, {}, {{"image_decode", "batch"}}).ok());
  EXPECT_TRUE(ClipExecutor::create_for_server(dir, {}, {{"image_decode", "stage"}}).ok());
  EXPECT_TRUE(ClipExecutor::create_for_server(dir, {}, {{"image_decode", "preprocess"}}).ok());
  const auto wrong = ClipExecutor::create_for_server(dir, {}, {{"image_decode", "gpu-please"}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("image_decode"), std::string::npos);
  // decode_stage: the stage's own knobs, for image_decode: stage only, each checked.
  const nlohmann::json stage = {{"image_decode", "stage"},
                                {"decode_stage", {{"lanes", 2}, {"lane_images", 16}, {"slots", 64}, {"queue_images", 32}}}};
  EXPECT_TRUE(ClipExecutor::create_for_server(dir, {}, stage).ok());
  for (const nlohmann::json& bad : {nlohmann::json{{"image_decode", "stage"}, {"decode_stage", {{"lanes", 0}}}},
                                    nlohmann::json{{"image_decode", "stage"}, {"decode_stage", {{"queue_images", -1}}}},
                                    nlohmann::json{{"image_decode", "stage"}, {"decode_stage", {{"slots", "many"}}}},
                                    nlohmann::json{{"image_decode", "stage"}, {"decode_stage", {{"lane", 2}}}},
                                    nlohmann::json{{"image_decode", "stage"}, {"decode_stage", 4}},
                                    nlohmann::json{{"image_decode", "batch"}, {"decode_stage", {{"lanes", 2}}}}}) {
    const auto refused = ClipExecutor::create_for_server(dir, {}, bad);
    ASSERT_FALSE(refused.ok()) << bad.dump();
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad.dump();
    EXPECT_NE(refused.status().message().find("decode_stage"), std::string::npos) << refused.status().message();
  }
}

// A busy stage (decode_stage.queue_images) sends the next requests' PNGs to the preprocessing pool: decodes_media()
// says so, and prepare() then decodes them on the host (levels, no kept PNG); once the queue drains they go to the
// stage again.
TEST(BatchImageDecodeConfig, ABusyStageSendsImagesToThePool) {
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  ClipOptions clip;
  clip.image_decode = ClipOptions::ImageDecode::kStage;
  clip.stage.lanes = 1;
  clip.stage.lane_images = 1;
  clip.stage.queue_images = 1;
  auto executor = ClipExecutor::create(dir, {}, clip);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  auto inputs = ClipInputs::create(dir, **executor, {});
  ASSERT_TRUE(inputs.ok()) << inputs.status().to_string();
  const std::string big = make_png(400, 300, 3, 21);  // ms a decode on a core, under the kept-stream limit
  InputItem item;
  item.kind = InputKind::kImageBytes;
  item.image_bytes = big;
  const std::vector<InputItem> one = {item};
  EXPECT_FALSE((*inputs)->decodes_media(one)) << "an idle stage takes the PNG";
  Prepared1 first = prepare(**inputs, {big});
  ASSERT_TRUE(first.status.ok());
  ASSERT_EQ(first.input->kept_pngs.size(), 1u);
  // The queue holds it until the stage thread hands it to the lane (busy meanwhile): wait for that.
  for (int tries = 0; tries < 1000 && (*inputs)->decodes_media(one); ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Requests in a row while the lane decodes: the one that waits for the lane makes the stage busy, and the
  // next go to the host until the queue moves.
  std::vector<Prepared1> later;
  int busy_seen = 0, on_host = 0, staged = 0;
  for (int i = 0; i < 20; ++i) {
    busy_seen += (*inputs)->decodes_media(one) ? 1 : 0;
    later.push_back(prepare(**inputs, {big}));
    ASSERT_TRUE(later.back().status.ok());
    (later.back().input->kept_pngs.empty() ? on_host : staged) += 1;
  }
  EXPECT_GT(busy_seen, 0);
  EXPECT_GT(on_host, 0) << "decoded on the host while the stage was busy";
  EXPECT_GT(staged, 0);
  const int64_t side = (*executor)->image_size();
  const Prepared1* host = nullptr;
  const StagedImage* gpu = nullptr;
  for (const Prepared1& p : later) {
    if (p.input->kept_pngs.empty()) {
      EXPECT_EQ(p.input->levels.size(), static_cast<size_t>(3 * side * side));
      host = &p;
    } else {
      ASSERT_EQ(p.input->kept_pngs[0].staged->wait(), 0);
      gpu = p.input->kept_pngs[0].staged.get();
    }
  }
  ASSERT_EQ(first.input->kept_pngs[0].staged->wait(), 0);
  EXPECT_FALSE((*inputs)->decodes_media(one)) << "the queue drained: the stage takes PNGs again";
  // The host's levels equal the stage's, so where an image went never shows in its embedding.
  ASSERT_TRUE(host != nullptr && gpu != nullptr);
  EXPECT_TRUE(std::equal(host->input->levels.begin(), host->input->levels.end(), gpu->levels()));
}

// --- The stage ahead of the batcher (png_decode_stage.h), on cpu: the same levels, refusals per image, slots that
// run out without blocking, a stop that leaves no waiter hanging.

// The stage's levels of each file after wait(), or its status when nonzero.
TEST(PngDecodeStage, DecodesAsThePreparerAndRefusesWhatTheKernelsRefuse) {
  image::ClipPreprocessConfig config;
  PngDecodeStage::Options small;
  small.lanes = 2;
  small.lane_images = 5;  // several launches, some partial
  small.slots = 64;
  auto stage = PngDecodeStage::create(Device::cpu(), *clip_decode_geometry(config), small);
  ASSERT_TRUE(stage.ok()) << stage.status().to_string();
  std::vector<std::string> files = test_files();
  files.push_back(corrupt_idat(make_png(90, 60, 3, 77)));
  std::vector<std::shared_ptr<StagedImage>> staged;
  for (const std::string& f : files) {
    staged.push_back((*stage)->submit(keep(f)));
    ASSERT_NE(staged.back(), nullptr);
  }
  const size_t per_image = 3 * 224 * 224;
  for (size_t i = 0; i + 1 < files.size(); ++i) {
    ASSERT_EQ(staged[i]->wait(), 0) << "file " << i;
    const std::vector<uint8_t> want = cpu_levels(files[i], config);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), staged[i]->levels())) << "file " << i;
  }
  EXPECT_NE(staged.back()->wait(), 0) << "the corrupt stream is refused: the executor decodes it on the host";
  // gather: staged levels and host levels into one buffer, in order.
  const std::vector<uint8_t> host = cpu_levels(files[0], config);
  std::vector<BatchImage> images(3);
  images[0].staged = staged[2].get();
  images[1].levels = host;
  images[2].staged = staged[5].get();
  std::vector<uint8_t> out(3 * per_image);
  ASSERT_TRUE(PngDecodeStage::gather(images, per_image, out.data(), Device::cpu(), nullptr).ok());
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + per_image, staged[2]->levels()));
  EXPECT_TRUE(std::equal(host.begin(), host.end(), out.begin() + per_image));
  EXPECT_TRUE(std::equal(out.begin() + 2 * per_image, out.end(), staged[5]->levels()));
  images[1].levels = std::span<const uint8_t>(host).first(10);
  EXPECT_EQ(PngDecodeStage::gather(images, per_image, out.data(), Device::cpu(), nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(PngDecodeStage, SlotsRunOutWithoutBlockingAndComeBack) {
  PngDecodeStage::Options two;
  two.lanes = 1;
  two.lane_images = 4;
  two.slots = 2;
  auto stage = PngDecodeStage::create(Device::cpu(), *clip_decode_geometry({}), two);
  ASSERT_TRUE(stage.ok());
  const std::string png = make_png(40, 40, 3, 1);
  std::shared_ptr<StagedImage> a = (*stage)->submit(keep(png)), b = (*stage)->submit(keep(png));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ((*stage)->submit(keep(png)), nullptr) << "no slot: the preparer decodes it on the host";
  EXPECT_EQ(a->wait(), 0);
  a.reset();  // the request is done: its slot is free again (once the lane has let go of it too, a moment later)
  std::shared_ptr<StagedImage> c;
  for (int tries = 0; tries < 1000 && c == nullptr; ++tries) {
    c = (*stage)->submit(keep(png));
    if (c == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->wait(), 0);
  EXPECT_TRUE(std::equal(c->levels(), c->levels() + 3 * 224 * 224, b->levels()));
  EXPECT_EQ(PngDecodeStage::create(Device::cpu(), *clip_decode_geometry({}), {0, 1, 1}).status().code(),
            StatusCode::kInvalidArgument);
}

// queue_images: with that many images waiting for a lane the stage is busy() and turns new ones away (the preparer
// decodes them on the host); it takes them again once the queue has drained.
TEST(PngDecodeStage, AFullQueueSendsImagesToTheHost) {
  const image::ClipPreprocessConfig config;
  const std::string png = make_png(300, 200, 3, 5);  // ~1 ms a decode on a core: the queue outgrows the lane
  const std::vector<uint8_t> want = cpu_levels(png, config);
  PngDecodeStage::Options share;
  share.lanes = 1;
  share.lane_images = 1;
  share.slots = 200;
  share.queue_images = 3;
  auto stage = PngDecodeStage::create(Device::cpu(), *clip_decode_geometry(config), share);
  ASSERT_TRUE(stage.ok());
  std::vector<std::shared_ptr<StagedImage>> staged;
  int refused = 0;
  for (int i = 0; i < 60; ++i) {
    std::shared_ptr<StagedImage> image = (*stage)->submit(keep(png));
    if (image == nullptr) ++refused;
    if (image != nullptr) staged.push_back(std::move(image));
  }
  EXPECT_GT(refused, 0) << "60 submits in far less than 3 decodes' time: the queue filled";
  EXPECT_EQ((*stage)->refused(), refused);
  EXPECT_GE(staged.size(), 3u);
  for (const auto& image : staged) {
    ASSERT_EQ(image->wait(), 0);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), image->levels()));
  }
  EXPECT_FALSE((*stage)->busy()) << "every accepted image is decoded: nothing waits";
  EXPECT_NE((*stage)->submit(keep(png)), nullptr);
}

TEST(PngDecodeStage, StoppingLeavesNoWaiterHangingAndImagesOutliveIt) {
  const image::ClipPreprocessConfig config;
  const std::string png = make_png(300, 200, 4, 3);
  const std::vector<uint8_t> want = cpu_levels(png, config);
  std::vector<std::shared_ptr<StagedImage>> staged;
  {
    PngDecodeStage::Options one;
    one.lanes = 1;
    one.lane_images = 1;  // a long queue
    one.slots = 200;
    auto stage = PngDecodeStage::create(Device::cpu(), *clip_decode_geometry(config), one);
    ASSERT_TRUE(stage.ok());
    for (int i = 0; i < 200; ++i) staged.push_back((*stage)->submit(keep(png)));
    ASSERT_NE(staged[0], nullptr);
    EXPECT_EQ(staged[0]->wait(), 0);  // one decoded for sure; ~200 ms of queue behind it
  }  // destroyed with images still queued
  int decoded = 0;
  for (const auto& image : staged) {
    ASSERT_NE(image, nullptr);
    if (image->wait() != 0) continue;  // refused at the stop: the executor decodes it on the host
    ++decoded;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), image->levels()));
  }
  EXPECT_LT(decoded, 200) << "the stop came before the queue was drained (else this test tests nothing)";
  staged.clear();  // the slots go back to a pool the stage no longer owns
}

// --- CUDA == CPU.

TEST(BatchImageDecodeCuda, EqualsTheCpuTwinsStatusForStatus) {
#if MMSERVE_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA device visible";
  image::ClipPreprocessConfig config;
  auto cpu = BatchImageDecoder::create(Device::cpu(), *clip_decode_geometry(config));
  auto gpu = BatchImageDecoder::create(Device::cuda(0), *clip_decode_geometry(config));
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().to_string();
  std::vector<std::string> files = test_files();
  files.push_back(corrupt_idat(make_png(90, 60, 3, 77)));
  std::vector<std::shared_ptr<CompressedPng>> kept;
  std::vector<std::vector<uint8_t>> host_levels;
  std::vector<BatchImage> images;
  for (size_t i = 0; i < files.size(); ++i) kept.push_back(keep(files[i]));
  host_levels.push_back(cpu_levels(files[0], config));
  for (size_t i = 0; i < files.size(); ++i) {
    images.push_back({&kept[i]->stream, {}});
    if (i == 3) images.push_back({nullptr, host_levels[0]});  // one host block in the middle: the mixed path
  }
  const size_t per_image = 3 * 224 * 224, bytes = images.size() * per_image;
  std::vector<uint8_t> want(bytes), got(bytes);
  ASSERT_TRUE((*cpu)->run(images, want.data()).ok());
  uint8_t* device = nullptr;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), bytes), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int round = 0; round < 2; ++round) {  // the second run reuses the grown buffers
    ASSERT_TRUE((*gpu)->run(images, device, stream).ok());
    ASSERT_EQ(cudaMemcpyAsync(got.data(), device, bytes, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::span<const int32_t> want_status = (*cpu)->statuses(), got_status = (*gpu)->statuses();
    ASSERT_EQ(got_status.size(), want_status.size());
    for (size_t i = 0; i < images.size(); ++i) {
      EXPECT_EQ(got_status[i], want_status[i]) << "image " << i;
      if (want_status[i] != 0) continue;
      EXPECT_TRUE(std::equal(want.begin() + i * per_image, want.begin() + (i + 1) * per_image,
                             got.begin() + i * per_image))
          << "image " << i;
    }
    EXPECT_NE(want_status.back(), 0) << "the corrupt stream is refused";
  }
  EXPECT_GT((*gpu)->device_bytes(), 0);
  cudaStreamDestroy(stream);
  cudaFree(device);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The executor on the GPU: the same levels reach the same graph, so the embeddings equal the preprocessing path's
// bit for bit; a broken PNG fails its own request only, with the preparer's error.
class BatchImageDecodeCudaExecutor : public ::testing::TestWithParam<ClipOptions::ImageDecode> {};
INSTANTIATE_TEST_SUITE_P(Modes, BatchImageDecodeCudaExecutor, kKeptPngModes, mode_name);

TEST_P(BatchImageDecodeCudaExecutor, EqualsThePreprocessingPathOnTheGpu) {
#if MMSERVE_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA device visible";
  const std::string dir = testing::fixture("clip-tiny-quickgelu-f32");
  ExecutorOptions options;
  options.device = Device::cuda(0);
  ClipOptions batch_decode;
  batch_decode.image_decode = GetParam();
  auto plain = ClipExecutor::create(dir, options);
  auto deferred = ClipExecutor::create(dir, options, batch_decode);
  ASSERT_TRUE(plain.ok() && deferred.ok()) << plain.status().to_string() << " " << deferred.status().to_string();
  auto plain_inputs = ClipInputs::create(dir, **plain, {});
  auto deferred_inputs = ClipInputs::create(dir, **deferred, {});
  ASSERT_TRUE(plain_inputs.ok()) << plain_inputs.status().to_string();
  ASSERT_TRUE(deferred_inputs.ok()) << deferred_inputs.status().to_string();
  std::vector<std::vector<std::string>> requests;
  for (int i = 0; i < 40; ++i) requests.push_back({make_png(30 + 7 * i, 90 - i, 1 + i % 4, 100 + i)});
  requests[5].push_back(make_png(64, 64, 3, 5));  // a request of two images
  std::vector<std::unique_ptr<ClipInput>> a, b;
  for (const auto& files : requests) {
    Prepared1 pa = prepare(**plain_inputs, files), pb = prepare(**deferred_inputs, files);
    ASSERT_TRUE(pa.status.ok() && pb.status.ok());
    ASSERT_EQ(pb.input->kept_pngs.size(), files.size());
    a.push_back(std::move(pa.input));
    b.push_back(std::move(pb.input));
  }
  const auto want = run(**plain, a);
  const auto got = run(**deferred, b);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_TRUE(got[i].ok() && want[i].ok()) << got[i].status().to_string();
    EXPECT_EQ(output_as<ClipOutput>(*got[i])->embeddings, output_as<ClipOutput>(*want[i])->embeddings) << i;
  }
  // A broken PNG among good ones: its request fails as the preparer would have failed it, the others are served.
  const std::string bad = corrupt_idat(make_png(40, 30, 3, 9));
  const Status preparer_error = prepare(**plain_inputs, {bad}).status;
  ASSERT_FALSE(preparer_error.ok());
  std::vector<std::unique_ptr<ClipInput>> mixed;
  mixed.push_back(prepare(**deferred_inputs, {make_png(50, 50, 3, 1)}).input);
  mixed.push_back(prepare(**deferred_inputs, {bad}).input);
  mixed.push_back(prepare(**deferred_inputs, {make_png(70, 20, 4, 2)}).input);
  const auto out = run(**deferred, mixed);
  EXPECT_TRUE(out[0].ok());
  ASSERT_FALSE(out[1].ok());
  EXPECT_EQ(out[1].status().message(), preparer_error.message());
  EXPECT_TRUE(out[2].ok());
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace mmserve::engine
