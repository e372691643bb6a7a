// PngDecodeStage (see png_decode_stage.h): one thread, a few lanes, a pool of slots.
//
// Locking: one mutex (Pool::mutex) guards the free slots, the pending queue, every StagedImage's done/status and
// the lanes' busy flags; two condition variables: `work` wakes the stage thread (a submit, a lane freed, stop),
// `decoded` wakes the executors waiting in StagedImage::wait(). A lane's completion runs on CUDA's callback thread
// (cudaLaunchHostFunc: no CUDA calls there), which only reads the lane's pinned statuses and flips flags.
#include "engine/png_decode_stage.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/png_inflate/png_inflate.h"
#if MMSERVE_HAS_CUDA
#include <cuda_runtime.h>

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_memory.h"
#endif

namespace mmserve::engine {

// The slots' memory and everything the lock guards; shared by the stage and the images it handed out.
struct StagedImage::Pool {
  std::mutex mutex;
  std::condition_variable work, decoded;
  std::vector<int> free_slots;
  Device device;
  uint8_t* memory = nullptr;  // slots * image_bytes
  std::vector<uint8_t> host_memory;  // cpu

  ~Pool() {
#if MMSERVE_HAS_CUDA
    if (memory != nullptr && !device.is_cpu()) cudaFree(memory);
#endif
  }
};

struct PngDecodeStage::Lane {
  PngDecodeStage* stage = nullptr;
  std::unique_ptr<BatchImageDecoder> decoder;
  uint8_t* out = nullptr;  // lane_images * image_bytes: the decoder's output, copied to the slots
  std::vector<uint8_t> host_out;  // cpu
  std::vector<std::shared_ptr<StagedImage>> items;  // the launch in flight
  bool busy = false;  // guarded by the pool's mutex
#if MMSERVE_HAS_CUDA
  CudaStream stream;
#endif
  ~Lane() {
#if MMSERVE_HAS_CUDA
    if (out != nullptr && host_out.empty()) cudaFree(out);
#endif
  }
};

StagedImage::StagedImage(std::shared_ptr<Pool> pool, std::shared_ptr<const CompressedPng> png, int slot,
                         uint8_t* levels)
    : pool_(std::move(pool)), png_(std::move(png)), slot_(slot), levels_(levels) {}

StagedImage::~StagedImage() {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  pool_->free_slots.push_back(slot_);
}

int32_t StagedImage::wait() const {
  std::unique_lock<std::mutex> lock(pool_->mutex);
  pool_->decoded.wait(lock, [this] { return done_; });
  return status_;
}

StatusOr<std::unique_ptr<PngDecodeStage>> PngDecodeStage::create(Device device, ImageDecodeGeometry geometry,
                                                                  Options options) {
  if (options.lanes < 1 || options.lane_images < 1 || options.slots < 1 || options.queue_images < 0) {
    return invalid_argument("the PNG decode stage needs at least one lane, one image per launch and one slot (and "
                            "queue_images >= 0)");
  }
  auto stage = std::unique_ptr<PngDecodeStage>(new PngDecodeStage());
  stage->device_ = device;
  stage->options_ = options;
  stage->image_bytes_ = static_cast<size_t>(3) * geometry.out_width * geometry.out_height;
  auto pool = std::make_shared<StagedImage::Pool>();
  pool->device = device;
  const size_t slot_bytes = stage->image_bytes_ * static_cast<size_t>(options.slots);
  const size_t lane_bytes = stage->image_bytes_ * static_cast<size_t>(options.lane_images);
  if (device.is_cpu()) {
    pool->host_memory.resize(slot_bytes);
    pool->memory = pool->host_memory.data();
  } else {
#if MMSERVE_HAS_CUDA
    RETURN_IF_ERROR(set_cuda_device(device.index));
    if (cudaMalloc(reinterpret_cast<void**>(&pool->memory), slot_bytes) != cudaSuccess) {
      cudaGetLastError();
      pool->memory = nullptr;
      return resource_exhausted("the PNG decode stage's " + std::to_string(slot_bytes >> 20) +
                                " MiB of slots on " + device.to_string());
    }
#else
    return unimplemented("this build has no CUDA backend (the PNG decode stage runs on cpu only)");
#endif
  }
  for (int s = options.slots - 1; s >= 0; --s) pool->free_slots.push_back(s);
  stage->pool_ = std::move(pool);
  for (int l = 0; l < options.lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->stage = stage.get();
    ASSIGN_OR_RETURN(lane->decoder, BatchImageDecoder::create(device, geometry));
    if (device.is_cpu()) {
      lane->host_out.resize(lane_bytes);
      lane->out = lane->host_out.data();
    } else {
#if MMSERVE_HAS_CUDA
      RETURN_IF_ERROR(lane->stream.init());
      if (cudaMalloc(reinterpret_cast<void**>(&lane->out), lane_bytes) != cudaSuccess) {
        cudaGetLastError();
        lane->out = nullptr;
        return resource_exhausted("the PNG decode stage's lane buffers on " + device.to_string());
      }
#endif
    }
    stage->lanes_.push_back(std::move(lane));
  }
  stage->thread_ = std::thread([s = stage.get()] { s->loop(); });
  return stage;
}

PngDecodeStage::~PngDecodeStage() {
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    stop_ = true;
  }
  pool_->work.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t PngDecodeStage::device_bytes() const {
  if (device_.is_cpu()) return 0;
  return static_cast<int64_t>(image_bytes_) *
         (options_.slots + static_cast<int64_t>(options_.lanes) * options_.lane_images);
}

std::shared_ptr<StagedImage> PngDecodeStage::submit(std::shared_ptr<const CompressedPng> png) {
  std::shared_ptr<StagedImage> image;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    if (stop_ || pool_->free_slots.empty() || busy()) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    const int slot = pool_->free_slots.back();
    pool_->free_slots.pop_back();
    image = std::shared_ptr<StagedImage>(
        new StagedImage(pool_, std::move(png), slot, pool_->memory + static_cast<size_t>(slot) * image_bytes_));
    pending_.push_back(image);
    pending_count_.store(static_cast<int>(pending_.size()), std::memory_order_relaxed);
  }
  pool_->work.notify_one();
  return image;
}

void PngDecodeStage::loop() {
#if MMSERVE_HAS_CUDA
  if (!device_.is_cpu()) (void)set_cuda_device(device_.index);  // the decoders allocate on the current device
#endif
  std::unique_lock<std::mutex> lock(pool_->mutex);
  while (true) {
    Lane* free_lane = nullptr;
    pool_->work.wait(lock, [&] {
      free_lane = nullptr;
      for (auto& lane : lanes_) {
        if (!lane->busy) free_lane = lane.get();
      }
      return stop_ || (!pending_.empty() && free_lane != nullptr);
    });
    if (stop_) break;
    // What has gathered goes in one launch (under load the queue fills while the lanes are busy).
    std::vector<std::shared_ptr<StagedImage>> items;
    while (!pending_.empty() && items.size() < static_cast<size_t>(options_.lane_images)) {
      items.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    pending_count_.store(static_cast<int>(pending_.size()), std::memory_order_relaxed);
    free_lane->busy = true;
    lock.unlock();
    launch(*free_lane, std::move(items));
    lock.lock();
  }
  // Stopping: pending images are refused (their holders decode them on the host); launches in flight finish.
  std::deque<std::shared_ptr<StagedImage>> refused = std::move(pending_);
  pending_.clear();
  pending_count_.store(0, std::memory_order_relaxed);
  for (auto& image : refused) {
    image->done_ = true;
    image->status_ = static_cast<int32_t>(kernels::PngInflateStatus::kBadImage);
  }
  pool_->decoded.notify_all();
  pool_->work.wait(lock, [&] {
    return std::none_of(lanes_.begin(), lanes_.end(), [](const auto& lane) { return lane->busy; });
  });
  // An image nobody else holds (its request gone) dies here, and its destructor takes the pool's lock.
  lock.unlock();
  refused.clear();
}

void PngDecodeStage::launch(Lane& lane, std::vector<std::shared_ptr<StagedImage>> items) {
  std::vector<BatchImage> images(items.size());
  for (size_t k = 0; k < items.size(); ++k) images[k].png = &items[k]->png_->stream;
  lane.items = std::move(items);
  void* stream = nullptr;
#if MMSERVE_HAS_CUDA
  if (!device_.is_cpu()) stream = lane.stream.get();
#endif
  Status status = lane.decoder->run(images, lane.out, stream);
  // Each image's levels to its own slot (the slot lives as long as its request; the lane's buffer is reused).
  for (size_t k = 0; status.ok() && k < lane.items.size(); ++k) {
    uint8_t* slot = lane.items[k]->levels_;
    const uint8_t* from = lane.out + k * image_bytes_;
    if (device_.is_cpu()) {
      std::memcpy(slot, from, image_bytes_);
      continue;
    }
#if MMSERVE_HAS_CUDA
    if (cudaMemcpyAsync(slot, from, image_bytes_, cudaMemcpyDeviceToDevice, lane.stream.get()) != cudaSuccess) {
      status = internal_error("the PNG decode stage's copy to a slot: " +
                              std::string(cudaGetErrorString(cudaGetLastError())));
    }
#endif
  }
  if (status.ok() && !device_.is_cpu()) {
#if MMSERVE_HAS_CUDA
    if (cudaLaunchHostFunc(lane.stream.get(), &PngDecodeStage::lane_done, &lane) == cudaSuccess) return;
    cudaGetLastError();
    status = internal_error("the PNG decode stage could not queue its completion");
    // Nothing was queued after the copies: wait for them before the lane is reused.
    cudaStreamSynchronize(lane.stream.get());
#endif
  }
  if (!status.ok()) {  // the device failed: every image of the launch goes to the host decode
    std::vector<std::shared_ptr<StagedImage>> done;
    {
      std::lock_guard<std::mutex> lock(pool_->mutex);
      for (auto& image : lane.items) {
        image->done_ = true;
        image->status_ = static_cast<int32_t>(kernels::PngInflateStatus::kBadImage);
      }
      done.swap(lane.items);
      lane.busy = false;
    }
    pool_->decoded.notify_all();
    pool_->work.notify_all();
    return;  // `done` lets go of the images outside the lock (a last holder returns its slot)
  }
  lane_done(&lane);  // cpu: the run and the copies are done
}

void PngDecodeStage::lane_done(void* raw) {
  Lane& lane = *static_cast<Lane*>(raw);
  // Once the lane is marked free the stage may be destroyed: only these locals are used after that.
  const std::shared_ptr<StagedImage::Pool> pool = lane.stage->pool_;
  const std::span<const int32_t> statuses = lane.decoder->statuses();  // pinned copy, landed before this call
  std::vector<std::shared_ptr<StagedImage>> done;
  {
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (size_t k = 0; k < lane.items.size(); ++k) {
      lane.items[k]->done_ = true;
      lane.items[k]->status_ = k < statuses.size() ? statuses[k] : 0;
    }
    done.swap(lane.items);
    lane.busy = false;
  }
  done.clear();  // before waking the waiters: a request that lets go of its image then frees the slot itself
  pool->decoded.notify_all();
  pool->work.notify_all();
}

Status PngDecodeStage::gather(std::span<const BatchImage> images, size_t image_bytes, uint8_t* out,
                              Device out_device, void* cuda_stream) {
  for (size_t i = 0; i < images.size(); ++i) {
    const BatchImage& im = images[i];
    const uint8_t* from = nullptr;
    if (im.staged != nullptr) {
      from = im.staged->levels();
    } else if (im.levels.size() == image_bytes) {
      from = im.levels.data();
    } else {
      return invalid_argument("image " + std::to_string(i) + ": neither a staged image nor " +
                              std::to_string(image_bytes) + " bytes of levels");
    }
    if (out_device.is_cpu()) {
      if (im.staged != nullptr && !im.staged->pool_->device.is_cpu()) {
        return invalid_argument("a staged image on a GPU gathered into host memory");
      }
      std::memcpy(out + i * image_bytes, from, image_bytes);
      continue;
    }
#if MMSERVE_HAS_CUDA
    // Default: host levels (a fallback) in, or a slot of another GPU's stage (a replica) across.
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out + i * image_bytes, from, image_bytes, cudaMemcpyDefault,
                                         static_cast<cudaStream_t>(cuda_stream)));
#else
    (void)cuda_stream;
    return unimplemented("this build has no CUDA backend");
#endif
  }
  return ok_status();
}

}  // namespace mmserve::engine
