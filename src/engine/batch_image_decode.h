// BatchImageDecoder: a batch's PNG files decoded, resized and placed as 8-bit levels where the model runs (issue 13
// item 6: the server's image path at GPU speed). On cuda:N it is kernels/png_inflate (inflate, unfilter, RGB) and
// kernels/pil_resize (PIL's fixed-point resize into the crop or the padding), queued on the model's stream; on
// cpu the same kernels' CPU twins (for tests and for symmetry: no faster than the preprocessing pool).
//
// Why here and not in the preprocessing pool: on the GPU host the pool's PNG decode (~0.85 ms of a core per
// 224x224 picture) was what held the server at 39% of the engine's images/s. The preparer now only splits a PNG
// (frontends/image/png_device.h: the fast path's own chunk walk and CRCs) and the executor hands the compressed
// streams to this decoder, batch by batch.
//
// Exactness: the levels equal the preparer's CPU levels (decode_png_fast + resize_and_crop + to_pixel_levels) bit
// for bit for every image whose status is 0 (the kernels' contracts; the tables are the frontend's own
// pil_resample_coeffs). An image with a nonzero status has unspecified levels: the caller decodes it on the host,
// which gives libpng's answer (pixels or the error a client would have got from the CPU path).
// Tests: tests/unit/engine/batch_image_decode_test.cpp (CPU twins vs the frontend; cuda vs cpu, skipped without a
// GPU), tests/unit/engine/clip_batch_test.cpp (the executor's use).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "frontends/image/png_device.h"
#include "frontends/image/preprocess.h"
#include "kernels/pil_resize/pil_resize_plan.h"
#include "kernels/png_inflate/png_inflate.h"

namespace mmserve::engine {

class StagedImage;

// Where a decoded image goes: the model's input size and, per source size, the resized size and the window kept.
struct ImageDecodeGeometry {
  int out_width = 0, out_height = 0;
  int resample = 3;  // PIL's filter: 2 bilinear, 3 bicubic
  std::function<kernels::PilPlacement(int width, int height)> place;
};

// CLIP's (HF CLIPImageProcessor, PIL backend): shortest edge to config.shortest_edge (when do_resize), centre crop
// to crop_width x crop_height with zero padding. nullopt without do_center_crop (the preparer's CPU path then
// checks the resized size itself).
std::optional<ImageDecodeGeometry> clip_decode_geometry(const image::ClipPreprocessConfig& config);

// A request's PNG file kept compressed for the batch decoder: the bytes and the split stream that borrows them
// (always held by pointer, never moved, so the borrow stays valid), and what the host fallback needs to decode it as
// the preparer would have: the pixel limit and the input's name for its errors.
struct CompressedPng {
  std::string file;
  image::PngStream stream;
  int64_t max_pixels = 0;
  std::string what;  // "input 2 (image)"
};

// The largest zlib stream kept for the batch decoder. The GPU inflates one image per warp, fast only in numbers:
// a 98 KiB stream takes ~4.5 ms there (against ~0.4 ms on a host core), so one large file would hold its whole
// batch; larger files are decoded by the preprocessing pool, whose cores are faster per file.
inline constexpr size_t kKeptPngStreamBytesMax = 256 << 10;

// Takes `bytes` (moved out) when the batch decoder can decode them: nullopt, bytes untouched, for a file it does
// not take (not a PNG, palette, 16-bit, interlaced, odd chunks, a bad CRC, a zlib stream above max_stream_bytes:
// the preparer decodes those on the host, with libpng's errors); the pixel guard's error as decode_request_image
// gives it (kTooLarge above max_pixels).
std::optional<StatusOr<std::unique_ptr<CompressedPng>>> keep_png_compressed(
    std::string& bytes, int64_t max_pixels, const std::string& what,
    size_t max_stream_bytes = kKeptPngStreamBytesMax);

// The host decode of a kept PNG, as the preparer's CPU path: decode_request_image, resize_and_crop and
// to_pixel_levels into [3, crop_height, crop_width] levels; its errors are the ones a client gets from that path.
StatusOr<std::vector<uint8_t>> decode_png_levels_on_host(const CompressedPng& png,
                                                         const image::ClipPreprocessConfig& config);

// One image of a batch: a PNG stream to decode, or levels already made on the host (an image the preparer
// decoded itself, e.g. a JPEG beside PNGs, or a fallback), placed as they are.
struct BatchImage {
  const image::PngStream* png = nullptr;
  std::span<const uint8_t> levels;  // when png is null: [3, out_height, out_width]
  const StagedImage* staged = nullptr;  // decoded by the PngDecodeStage (png_decode_stage.h; its gather only)
};

class BatchImageDecoder {
 public:
  static StatusOr<std::unique_ptr<BatchImageDecoder>> create(Device device, ImageDecodeGeometry geometry);
  ~BatchImageDecoder();
  BatchImageDecoder(const BatchImageDecoder&) = delete;
  BatchImageDecoder& operator=(const BatchImageDecoder&) = delete;

  // Writes image i's levels at out + i * 3 * out_height * out_width: `out` is device memory on cuda (queued on
  // `cuda_stream`, a cudaStream_t, in order with what the caller queues next; host pages the PNG streams and host
  // levels are staged in are reused by the next call, which waits for this one first), host memory on cpu (done on
  // return). Errors are the device's (kInternal) or the inputs' shape (kInvalidArgument: levels of the wrong
  // size); a bad PNG is not an error here but its status.
  Status run(std::span<const BatchImage> images, uint8_t* out, void* cuda_stream = nullptr);
  // Per image of the last run: kernels::PngInflateStatus (0 for host levels). On cuda, valid once the stream has
  // passed that run's work (the caller synchronises for its results anyway).
  std::span<const int32_t> statuses() const;
  // Device memory held (grown to the largest batch seen; 0 on cpu).
  int64_t device_bytes() const;
  Device device() const { return device_; }
  const ImageDecodeGeometry& geometry() const { return geometry_; }

 private:
  struct Cuda;
  BatchImageDecoder() = default;
  // Both devices: the PNG images' inflate descriptors, resize plan and staging layout for `images`.
  Status plan(std::span<const BatchImage> images);
  Status run_cpu(std::span<const BatchImage> images, uint8_t* out);
  Status run_cuda(std::span<const BatchImage> images, uint8_t* out, void* cuda_stream);

  Device device_;
  ImageDecodeGeometry geometry_;
  // The plan of the last run (reused vectors): the PNG images in batch order.
  std::vector<size_t> png_index_;                    // batch index of each PNG image
  std::vector<kernels::PngInflateImage> inflate_;    // offsets into streams / decoded RGB / scratch
  kernels::PilResizePlan resize_;                    // src offsets into the decoded RGB
  uint64_t stream_bytes_ = 0, rgb_bytes_ = 0, inflate_scratch_bytes_ = 0;
  std::vector<int32_t> png_status_;  // per PNG image (cpu; cuda reads its pinned copy)
  mutable std::vector<int32_t> statuses_;  // per batch image
  // cuda: the batch index of each PNG image of the run, in the order of their statuses' pinned copy, which
  // statuses() reads on first use after a run.
  std::vector<size_t> run_png_;
  mutable bool statuses_pending_ = false;
  // cpu: the host buffers.
  std::vector<uint8_t> host_streams_, host_scratch_, host_rgb_, host_resize_scratch_;
  std::unique_ptr<Cuda> cuda_;
};

}  // namespace mmserve::engine
