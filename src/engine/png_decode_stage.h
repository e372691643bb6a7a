// PngDecodeStage: PNGs decoded on the model's device as they arrive, ahead of the batcher (CLIP's
// `image_decode: stage`), so that the executor finds each image's levels already there.
//
// Why a stage and not the batch decoder (batch_image_decode.h) alone: on the GPU one warp inflates one image, so
// a batch's decode takes its slowest image's ~4.5 ms whatever the count; inside the executor that latency sits in
// series with the encoder on the engine thread and held the server at 7.8k images/s against the host decode's
// 13.4k (docs/perf/server_image_path.md, 2026-12-07). Here the decode runs on its own streams while the executor
// encodes earlier batches: the preparer submits a request's PNG (microseconds on the HTTP thread), a stage thread
// launches what has gathered on the first free lane (a BatchImageDecoder and a stream; up to `lane_images` per
// launch, `lanes` launches in flight), the decoded levels are copied into the image's own slot of a device pool,
// and the executor copies slot -> model input when it batches the request.
//
// Degrades, never blocks: with every slot taken (a long queue), submit() says no and the preparer decodes on the
// host as without the stage, so the host pool takes the overflow. `queue_images` makes that a share: with that many
// images already waiting for a lane (the GPU behind), busy() is true, the preparer sends the next images to the
// preprocessing pool and decodes them there, so that the host's idle cores take part of the decode off a GPU that
// the encoder also needs. An image the kernels refuse (status != 0) is
// decoded on the host by the executor, with libpng's answer, as the batch decoder's fallback does.
// On cpu the stage runs the kernels' CPU twins on its thread (tests; no faster than the preprocessing pool).
// Tests: tests/unit/engine/png_decode_stage_test.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/batch_image_decode.h"

namespace mmserve::engine {

class PngDecodeStage;

// One submitted PNG: its slot in the stage's pool and, once decoded, its status. Held by the request
// (ClipInput::KeptPng); the slot goes back to the pool when the last holder lets go.
class StagedImage {
 public:
  ~StagedImage();
  StagedImage(const StagedImage&) = delete;
  StagedImage& operator=(const StagedImage&) = delete;

  // Blocks until the image is decoded; its kernels::PngInflateStatus (0: the levels are in the slot, equal to the
  // preparer's CPU levels; nonzero: decode it on the host).
  int32_t wait() const;
  // [3, out_height, out_width] levels in the stage's device memory (host memory on cpu); valid after wait() == 0.
  const uint8_t* levels() const { return levels_; }
  const CompressedPng& png() const { return *png_; }

 private:
  friend class PngDecodeStage;
  struct Pool;
  StagedImage(std::shared_ptr<Pool> pool, std::shared_ptr<const CompressedPng> png, int slot, uint8_t* levels);
  std::shared_ptr<Pool> pool_;  // outlives the stage while requests hold images
  std::shared_ptr<const CompressedPng> png_;
  int slot_;
  uint8_t* levels_;
  // Guarded by pool_->mutex.
  bool done_ = false;
  int32_t status_ = 0;
};

class PngDecodeStage {
 public:
  struct Options {
    int lanes = 4;          // launches in flight
    int lane_images = 64;   // PNGs per launch at most
    int slots = 1024;       // decoded images held for the executor (1024 x 224 x 224 x 3 = 147 MiB)
    int queue_images = 0;   // images waiting for a lane beyond which busy() says so (0: never)
  };
  static StatusOr<std::unique_ptr<PngDecodeStage>> create(Device device, ImageDecodeGeometry geometry,
                                                          Options options);
  // Stops the thread: pending images are marked refused (their holders decode them on the host), launches in
  // flight finish first.
  ~PngDecodeStage();
  PngDecodeStage(const PngDecodeStage&) = delete;
  PngDecodeStage& operator=(const PngDecodeStage&) = delete;

  // Queues `png` for the next launch; nullptr when every slot is taken or busy() (the caller decodes it on the host).
  std::shared_ptr<StagedImage> submit(std::shared_ptr<const CompressedPng> png);
  // Options::queue_images images or more wait for a lane (a lock-free read: the runtime asks it per request).
  bool busy() const {
    return options_.queue_images > 0 && pending_count_.load(std::memory_order_relaxed) >= options_.queue_images;
  }
  // Images submit() turned away (slots or busy) since the start.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

  // Writes image i's levels at out + i * image_bytes: a staged image's from its slot (wait() must have returned 0),
  // host levels as they are. `out` is device memory queued on `cuda_stream` for a stage on cuda (any GPU: the
  // copy crosses devices where it must), host memory on cpu (done on return).
  static Status gather(std::span<const BatchImage> images, size_t image_bytes, uint8_t* out, Device out_device,
                       void* cuda_stream);

  Device device() const { return device_; }
  const Options& options() const { return options_; }
  int64_t device_bytes() const;  // slots + lanes' buffers (0 on cpu)

 private:
  struct Lane;
  PngDecodeStage() = default;
  void loop();
  void launch(Lane& lane, std::vector<std::shared_ptr<StagedImage>> items);
  static void lane_done(void* lane);  // cuda: a host function queued after the lane's copies

  Device device_;
  Options options_;
  size_t image_bytes_ = 0;
  std::shared_ptr<StagedImage::Pool> pool_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Guarded by pool_->mutex.
  std::deque<std::shared_ptr<StagedImage>> pending_;
  std::atomic<int> pending_count_{0};  // pending_.size(), written under the lock
  std::atomic<int64_t> refused_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mmserve::engine
