// BatchImageDecoder (see batch_image_decode.h).
//
// A run is planned on the host (inflate descriptors, the resize plan with the frontend's coefficient tables, one
// staging layout), then executed: on cpu by the kernels' twins into host buffers, on cuda as one pinned staging
// copy (streams, descriptors, tables), the inflate kernel, the resize kernel, and the statuses copied back.
// Images go in groups that fit kWorkBytesMax of scratch: a group's pinned pages are rewritten only after the
// previous group's copy has run (an event), and a single image larger than the budget is left to the host
// (status kBadImage; the caller's fallback decodes it).
#include "engine/batch_image_decode.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/request_image.h"
#include "frontends/image/resample.h"
#include "kernels/png_inflate/png_inflate.h"
#include "kernels/pil_resize/pil_resize.h"
#if MMSERVE_HAS_CUDA
#include "core/cuda/device_memory.h"
#include "kernels/pil_resize/pil_resize_cuda.h"
#include "kernels/png_inflate/png_inflate_cuda.h"
#endif

namespace mmserve::engine {
namespace {

using kernels::PngInflateImage;
using kernels::PngInflateStatus;

// Scratch a group may use (compressed streams + filtered rows + RGB + the resize's temporaries).
constexpr uint64_t kWorkBytesMax = 512ull << 20;

uint64_t align16(uint64_t n) { return (n + 15) / 16 * 16; }
uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }

kernels::PilTableFn frontend_tables(int resample) {
  return [resample](int in, int out, int start, int count) {
    image::detail::ResampleCoeffs c = image::detail::pil_resample_coeffs(in, out, resample, {start, count});
    return kernels::PilAxisTable{c.ksize, std::move(c.xmin), std::move(c.count), std::move(c.k)};
  };
}

// The bytes one PNG image needs in a group (what kWorkBytesMax bounds).
uint64_t work_bytes(const image::PngStream& png) {
  const uint64_t scratch = kernels::png_inflate_scratch_bytes(png.width, png.height, png.channels);
  const uint64_t rgb = align16(uint64_t{png.width} * png.height * 3);
  // The resize's temporary: at most the resized width times the source height, 3 bytes a pixel (an upper bound).
  return align16(png.zlib().size()) + scratch + rgb + rgb;
}

}  // namespace

std::optional<StatusOr<std::unique_ptr<CompressedPng>>> keep_png_compressed(std::string& bytes, int64_t max_pixels,
                                                                           const std::string& what,
                                                                           size_t max_stream_bytes) {
  auto png = std::make_unique<CompressedPng>();
  png->file = std::move(bytes);  // first, so that the split borrows the bytes where they stay
  image::DecodeOptions decode;
  decode.max_pixels = max_pixels;
  std::optional<StatusOr<image::PngStream>> split = image::split_png_for_device(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(png->file.data()), png->file.size()), decode);
  if (!split || (split->ok() && (*split)->zlib().size() > max_stream_bytes)) {
    bytes = std::move(png->file);
    return std::nullopt;
  }
  if (!split->ok()) {
    const Status& st = split->status();
    if (st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kTooLarge) {
      return StatusOr<std::unique_ptr<CompressedPng>>(too_large(what + ": " + st.message()));
    }
    return StatusOr<std::unique_ptr<CompressedPng>>(invalid_argument(what + ": " + st.message()));
  }
  png->stream = std::move(**split);
  png->max_pixels = max_pixels;
  png->what = what;
  return StatusOr<std::unique_ptr<CompressedPng>>(std::move(png));
}

StatusOr<std::vector<uint8_t>> decode_png_levels_on_host(const CompressedPng& png,
                                                         const image::ClipPreprocessConfig& config) {
  ASSIGN_OR_RETURN(image::RgbImage decoded, decode_request_image(png.file, png.max_pixels, png.what));
  const image::RgbImage cropped = image::resize_and_crop(decoded, config);
  if (cropped.width != config.crop_width || cropped.height != config.crop_height) {
    return invalid_argument(png.what + ": preprocessed to " + std::to_string(cropped.width) + "x" +
                            std::to_string(cropped.height) + " but the model takes " +
                            std::to_string(config.crop_width) + "x" + std::to_string(config.crop_height));
  }
  std::vector<uint8_t> levels(static_cast<size_t>(3) * cropped.width * cropped.height);
  image::to_pixel_levels(cropped, levels.data());
  return levels;
}

std::optional<ImageDecodeGeometry> clip_decode_geometry(const image::ClipPreprocessConfig& config) {
  if (!config.do_center_crop) return std::nullopt;
  ImageDecodeGeometry g;
  g.out_width = config.crop_width;
  g.out_height = config.crop_height;
  g.resample = config.resample;
  g.place = [config](int width, int height) {
    std::array<int, 2> resized{width, height};
    if (config.do_resize) resized = image::shortest_edge_size(width, height, config.shortest_edge);
    return kernels::center_crop_placement(resized[0], resized[1], config.crop_width, config.crop_height);
  };
  return g;
}

#if MMSERVE_HAS_CUDA
// The device side: grow-only device and pinned buffers, an event that says the last group's staging was read.
struct BatchImageDecoder::Cuda {
  uint8_t* device = nullptr;
  uint64_t device_capacity = 0;
  PinnedBuffer staging;  // streams | descriptors | tables | host levels
  PinnedBuffer status;   // int32 per PNG image of the whole run
  CudaEvent staged;    // recorded after a group's copy out of `staging`
  CudaEvent finished;  // recorded after a run's last work (its status copy into `status`)
  bool staged_pending = false, finished_pending = false;  // recorded and not yet waited for

  ~Cuda() {
    if (device != nullptr) cudaFree(device);
  }
  Status wait_staged() {
    if (staged_pending) CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged.get()));
    staged_pending = false;
    return ok_status();
  }
  Status wait_finished() {
    if (finished_pending) CUDA_RETURN_IF_ERROR(cudaEventSynchronize(finished.get()));
    finished_pending = false;
    return ok_status();
  }
  Status reserve_device(uint64_t bytes) {
    if (bytes <= device_capacity) return ok_status();
    RETURN_IF_ERROR(wait_staged());
    if (device != nullptr) {
      // An earlier group's kernels may still read it (wait_staged covers only its staging copy).
      CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
      CUDA_RETURN_IF_ERROR(cudaFree(device));
      device = nullptr;
      device_capacity = 0;
    }
    const uint64_t grown = align256(bytes + bytes / 4);
    if (cudaMalloc(reinterpret_cast<void**>(&device), grown) != cudaSuccess) {
      cudaGetLastError();
      device = nullptr;
      return resource_exhausted("the image decoder's " + std::to_string(grown >> 20) + " MiB of GPU memory");
    }
    device_capacity = grown;
    return ok_status();
  }
  Status reserve_pinned(PinnedBuffer& buffer, uint64_t bytes) {
    if (bytes <= buffer.size()) return ok_status();
    RETURN_IF_ERROR(wait_staged());
    return buffer.init(align256(std::max<uint64_t>(bytes + bytes / 4, 4096)));
  }
};
#else
struct BatchImageDecoder::Cuda {};
#endif

BatchImageDecoder::~BatchImageDecoder() = default;

StatusOr<std::unique_ptr<BatchImageDecoder>> BatchImageDecoder::create(Device device, ImageDecodeGeometry geometry) {
  if (geometry.out_width < 1 || geometry.out_width > 65535 || geometry.out_height < 1 ||
      geometry.out_height > 65535 || !geometry.place) {
    return invalid_argument("the image decoder needs an output size in [1, 65535] and a placement rule");
  }
  if (geometry.resample != 2 && geometry.resample != 3) {
    return unimplemented("the batch image decoder resizes bilinear (2) or bicubic (3), not resample " +
                         std::to_string(geometry.resample));
  }
  auto decoder = std::unique_ptr<BatchImageDecoder>(new BatchImageDecoder());
  decoder->device_ = device;
  decoder->geometry_ = std::move(geometry);
  if (!device.is_cpu()) {
#if MMSERVE_HAS_CUDA
    decoder->cuda_ = std::make_unique<Cuda>();
    RETURN_IF_ERROR(set_cuda_device(device.index));
    RETURN_IF_ERROR(decoder->cuda_->staged.init());
    RETURN_IF_ERROR(decoder->cuda_->finished.init());
#else
    return unimplemented("this build has no CUDA backend (the batch image decoder runs on cpu only)");
#endif
  }
  return decoder;
}

std::span<const int32_t> BatchImageDecoder::statuses() const {
#if MMSERVE_HAS_CUDA
  if (statuses_pending_) {  // the run's statuses from their pinned copy (the caller has synchronised)
    const int32_t* pinned = cuda_->status.data_as<int32_t>();
    for (size_t k = 0; k < run_png_.size(); ++k) statuses_[run_png_[k]] = pinned[k];
    statuses_pending_ = false;
  }
#endif
  return statuses_;
}

int64_t BatchImageDecoder::device_bytes() const {
#if MMSERVE_HAS_CUDA
  if (cuda_) return static_cast<int64_t>(cuda_->device_capacity);
#endif
  return 0;
}

Status BatchImageDecoder::plan(std::span<const BatchImage> images) {
  const size_t image_bytes = static_cast<size_t>(3) * geometry_.out_width * geometry_.out_height;
  png_index_.clear();
  inflate_.clear();
  resize_.clear();
  stream_bytes_ = rgb_bytes_ = 0;
  const kernels::PilTableFn tables = frontend_tables(geometry_.resample);
  for (size_t i = 0; i < images.size(); ++i) {
    const BatchImage& im = images[i];
    if (im.staged != nullptr) return invalid_argument("image " + std::to_string(i) + ": staged images are gathered");
    if (im.png == nullptr) {
      if (im.levels.size() != image_bytes) {
        return invalid_argument("image " + std::to_string(i) + ": " + std::to_string(im.levels.size()) +
                                " bytes of levels (the decoder places [3, " + std::to_string(geometry_.out_height) +
                                ", " + std::to_string(geometry_.out_width) + "])");
      }
      continue;
    }
    const image::PngStream& png = *im.png;
    PngInflateImage d;
    d.stream_offset = stream_bytes_;
    d.stream_bytes = png.zlib().size();
    d.out_offset = rgb_bytes_;
    d.width = png.width;
    d.height = png.height;
    d.channels = static_cast<uint32_t>(png.channels);
    stream_bytes_ += align16(d.stream_bytes);
    rgb_bytes_ += align16(uint64_t{png.width} * png.height * 3);
    png_index_.push_back(i);
    inflate_.push_back(d);
    resize_.add(static_cast<int64_t>(d.out_offset), static_cast<int>(png.width), static_cast<int>(png.height),
                geometry_.place(static_cast<int>(png.width), static_cast<int>(png.height)), tables);
  }
  inflate_scratch_bytes_ = kernels::png_inflate_assign_scratch(inflate_);
  return ok_status();
}

Status BatchImageDecoder::run(std::span<const BatchImage> images, uint8_t* out, void* cuda_stream) {
  statuses_.assign(images.size(), 0);
  if (images.empty()) return ok_status();
  if (out == nullptr) return invalid_argument("the image decoder needs an output buffer");
  if (device_.is_cpu()) return run_cpu(images, out);
  return run_cuda(images, out, cuda_stream);
}

Status BatchImageDecoder::run_cpu(std::span<const BatchImage> images, uint8_t* out) {
  RETURN_IF_ERROR(plan(images));
  const size_t image_bytes = static_cast<size_t>(3) * geometry_.out_width * geometry_.out_height;
  const size_t m = inflate_.size();
  if (m > 0) {
    host_streams_.assign(stream_bytes_ + 64, 0);
    for (size_t j = 0; j < m; ++j) {
      const std::span<const uint8_t> z = images[png_index_[j]].png->zlib();
      std::memcpy(host_streams_.data() + inflate_[j].stream_offset, z.data(), z.size());
    }
    host_scratch_.resize(std::max<uint64_t>(inflate_scratch_bytes_, 1));
    host_rgb_.resize(std::max<uint64_t>(rgb_bytes_, 1));
    png_status_.assign(m, 0);
    kernels::inflate_png_rows(host_streams_.data(), host_streams_.size(), inflate_.data(), static_cast<int64_t>(m),
                              host_scratch_.data(), host_scratch_.size(), host_rgb_.data(), host_rgb_.size(),
                              png_status_.data());
    host_resize_scratch_.resize(static_cast<size_t>(std::max<int64_t>(resize_.scratch_bytes, 1)));
    const bool all_png = m == images.size();
    std::vector<uint8_t> placed(all_png ? 0 : m * image_bytes);
    RETURN_IF_ERROR(kernels::pil_resize_cpu(resize_.batch(
        host_rgb_.data(), static_cast<int64_t>(host_rgb_.size()), resize_.tables.data(), host_resize_scratch_.data(),
        all_png ? out : placed.data(), geometry_.out_width, geometry_.out_height)));
    for (size_t j = 0; j < m; ++j) {
      statuses_[png_index_[j]] = png_status_[j];
      if (!all_png) std::memcpy(out + png_index_[j] * image_bytes, placed.data() + j * image_bytes, image_bytes);
    }
  }
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i].png == nullptr) std::memcpy(out + i * image_bytes, images[i].levels.data(), image_bytes);
  }
  return ok_status();
}

Status BatchImageDecoder::run_cuda(std::span<const BatchImage> images, uint8_t* out, void* cuda_stream) {
#if MMSERVE_HAS_CUDA
  Cuda& c = *cuda_;
  auto s = static_cast<cudaStream_t>(cuda_stream);
  const size_t image_bytes = static_cast<size_t>(3) * geometry_.out_width * geometry_.out_height;
  RETURN_IF_ERROR(c.wait_finished());  // the last run's status copy has landed; its pages may be reused
  RETURN_IF_ERROR(c.reserve_pinned(c.status, images.size() * sizeof(int32_t)));
  run_png_.clear();
  // Groups of consecutive images within the budget; an image above it alone is left to the caller's host decode.
  for (size_t begin = 0; begin < images.size();) {
    if (images[begin].png != nullptr && work_bytes(*images[begin].png) > kWorkBytesMax) {
      statuses_[begin++] = static_cast<int32_t>(PngInflateStatus::kBadImage);
      continue;
    }
    size_t end = begin;
    for (uint64_t work = 0; end < images.size(); ++end) {
      const uint64_t need = images[end].png != nullptr ? work_bytes(*images[end].png) : 0;
      if (need > kWorkBytesMax || work + need > kWorkBytesMax) break;
      work += need;
    }
    const std::span<const BatchImage> group = images.subspan(begin, end - begin);
    RETURN_IF_ERROR(plan(group));
    const size_t m = inflate_.size();
    // Staging: streams | descriptors | tables | host levels (each 256-aligned), mirrored on the device, followed
    // there by the status, the inflate scratch, the RGB, the resize scratch and (mixed groups) the placed levels.
    const uint64_t desc_at = align256(stream_bytes_ + 64);
    const uint64_t tables_at = desc_at + align256(m * sizeof(PngInflateImage));
    const uint64_t levels_at = tables_at + align256(resize_.tables.size() * sizeof(int32_t));
    const uint64_t staging_bytes = levels_at + (group.size() - m) * image_bytes;
    const bool all_png = m == group.size();
    const uint64_t status_at = align256(staging_bytes), scratch_at = status_at + align256(m * sizeof(int32_t));
    const uint64_t rgb_at = scratch_at + align256(inflate_scratch_bytes_);
    const uint64_t rscratch_at = rgb_at + align256(rgb_bytes_);
    const uint64_t placed_at = rscratch_at + align256(static_cast<uint64_t>(resize_.scratch_bytes));
    const uint64_t device_bytes = placed_at + (all_png ? 0 : align256(m * image_bytes));
    RETURN_IF_ERROR(c.reserve_device(device_bytes));
    RETURN_IF_ERROR(c.reserve_pinned(c.staging, staging_bytes));
    RETURN_IF_ERROR(c.wait_staged());  // the previous group's copy has read the staging pages
    uint8_t* host = c.staging.data_as<uint8_t>();
    for (size_t j = 0; j < m; ++j) {
      const std::span<const uint8_t> z = group[png_index_[j]].png->zlib();
      std::memcpy(host + inflate_[j].stream_offset, z.data(), z.size());
    }
    std::memcpy(host + desc_at, inflate_.data(), m * sizeof(PngInflateImage));
    std::memcpy(host + tables_at, resize_.tables.data(), resize_.tables.size() * sizeof(int32_t));
    uint64_t level_offset = levels_at;
    for (const BatchImage& im : group) {
      if (im.png != nullptr) continue;
      std::memcpy(host + level_offset, im.levels.data(), image_bytes);
      level_offset += image_bytes;
    }
    uint8_t* dev = c.device;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, staging_bytes, cudaMemcpyHostToDevice, s));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(c.staged.get(), s));
    c.staged_pending = true;
    uint8_t* group_out = out + begin * image_bytes;
    if (m > 0) {
      auto* status = reinterpret_cast<int32_t*>(dev + status_at);
      RETURN_IF_ERROR(kernels::inflate_png_rows_cuda(
          dev, stream_bytes_ + 64, reinterpret_cast<const PngInflateImage*>(dev + desc_at), static_cast<int64_t>(m),
          dev + scratch_at, inflate_scratch_bytes_, dev + rgb_at, rgb_bytes_, status, s));
      uint8_t* placed = all_png ? group_out : dev + placed_at;
      RETURN_IF_ERROR(kernels::pil_resize_cuda(
          resize_.batch(dev + rgb_at, static_cast<int64_t>(rgb_bytes_),
                        reinterpret_cast<const int32_t*>(dev + tables_at), dev + rscratch_at, placed,
                        geometry_.out_width, geometry_.out_height),
          s));
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.status.data_as<int32_t>() + run_png_.size(), status,
                                           m * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
      if (!all_png) {  // each PNG image's levels to its slot, runs of neighbours in one copy
        for (size_t j = 0; j < m;) {
          size_t k = j + 1;
          while (k < m && png_index_[k] == png_index_[k - 1] + 1) ++k;
          CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(group_out + png_index_[j] * image_bytes, placed + j * image_bytes,
                                               (k - j) * image_bytes, cudaMemcpyDeviceToDevice, s));
          j = k;
        }
      }
      for (size_t j = 0; j < m; ++j) run_png_.push_back(begin + png_index_[j]);
    }
    level_offset = levels_at;  // the host levels, from the staged copy on the device, to their slots
    for (size_t i = 0; i < group.size(); ++i) {
      if (group[i].png != nullptr) continue;
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(group_out + i * image_bytes, dev + level_offset, image_bytes,
                                           cudaMemcpyDeviceToDevice, s));
      level_offset += image_bytes;
    }
    begin = end;
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(c.finished.get(), s));
  c.finished_pending = true;
  statuses_pending_ = !run_png_.empty();
  return ok_status();
#else
  (void)images, (void)out, (void)cuda_stream;
  return unimplemented("this build has no CUDA backend");
#endif
}

}  // namespace mmserve::engine
