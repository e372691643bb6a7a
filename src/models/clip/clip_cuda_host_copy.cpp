// Host pixels to the GPU for a single-rank ClipCudaModel (see clip_cuda.h): the pinned staging ring, the pageable
// alternative, and the choice between them at load.
//
// Why both: a server batch's pixels sit in one buffer per request, so the copy must take pieces (joining them into
// one vector first cost the engine thread more than the forward: fresh pages for a 38 MB vector every batch). The
// ring copies each piece into page-locked slots with streaming stores (the DMA engine reads the slot, this core
// never does, so the stores skip the cache) while the previous slots' DMAs run; the pageable way issues one
// cudaMemcpyAsync per piece and lets the driver stage it. On the H200 host one core's copy into the ring ran at
// 10.9 GB/s with plain memcpy, below what the driver reached there from one pageable buffer (about 18 GB/s, from
// clip_throughput --input host vs device), so HostCopy::kAuto measures both on the machine at hand and keeps the
// faster; both give the same bytes.
// Tests: tests/unit/engine/clip_batch_cuda_test.cpp (each way forced, slots ending inside images, bit for bit).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "models/clip/clip_cuda.h"
#include "models/clip/clip_cuda_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mmserve::models {
namespace {

// memcpy with non-temporal stores for the aligned middle (a plain memcpy elsewhere). The stores are weakly
// ordered: fence_streaming() before the DMA that reads them is enqueued.
void copy_streaming(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
#endif
  std::memcpy(dst, src, n);
}

void fence_streaming() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace

Status ClipCudaModel::copy_host_pixels(std::span<const std::span<const float>> pieces, bool staged) {
  std::vector<std::span<const char>> bytes;
  bytes.reserve(pieces.size());
  for (const std::span<const float>& piece : pieces) {
    bytes.emplace_back(reinterpret_cast<const char*>(piece.data()), piece.size_bytes());
  }
  return copy_host_bytes(bytes, reinterpret_cast<char*>(ranks_[0]->act->pixels), staged);
}

Status ClipCudaModel::copy_host_bytes(std::span<const std::span<const char>> pieces, char* device, bool staged) {
  if (staged) return stage_bytes(pieces, device);
  Rank& rank = *ranks_[0];
  size_t copied = 0;
  for (const std::span<const char>& piece : pieces) {
    if (piece.empty()) continue;
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device + copied, piece.data(), piece.size(), cudaMemcpyHostToDevice, rank.stream.get()));
    copied += piece.size();
  }
  return ok_status();
}

Status ClipCudaModel::stage_bytes(std::span<const std::span<const char>> pieces, char* device) {
  Rank& rank = *ranks_[0];
  cudaStream_t s = rank.stream.get();
  const size_t slot_bytes = rank.staging_slot_bytes;
  size_t slot = 0, fill = 0, copied = 0;  // the slot being filled, its bytes, the bytes already sent
  auto slot_data = [&] { return rank.pixel_staging.data_as<char>() + slot * slot_bytes; };
  auto send = [&]() -> Status {  // the filled slot to the GPU; then the next slot, once its last copy is done
    fence_streaming();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device + copied, slot_data(), fill, cudaMemcpyHostToDevice, s));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(rank.staging_copied[slot].get(), s));
    copied += fill;
    fill = 0;
    slot = (slot + 1) % kPixelStagingSlots;
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(rank.staging_copied[slot].get()));
    return ok_status();
  };
  // A failed call may have left copies running from the first slot.
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(rank.staging_copied[slot].get()));
  for (const std::span<const char>& piece : pieces) {
    const char* from = piece.data();
    for (size_t left = piece.size(); left > 0;) {
      const size_t take = std::min(left, slot_bytes - fill);
      copy_streaming(slot_data() + fill, from, take);
      fill += take;
      from += take;
      left -= take;
      if (fill == slot_bytes) RETURN_IF_ERROR(send());
    }
  }
  if (fill > 0) RETURN_IF_ERROR(send());
  return ok_status();
}

Status ClipCudaModel::choose_host_copy() {
  Rank& rank = *ranks_[0];
  if (options_.host_copy != HostCopy::kAuto) {
    staged_host_copy_ = options_.host_copy == HostCopy::kStaged;
    return ok_status();
  }
  // One batch (at most 64 images: a bounded cost at load) of image-sized pieces in ordinary, touched memory.
  const ClipVisionConfig& v = config_.vision;
  const size_t image_floats = static_cast<size_t>(v.num_channels * v.image_size * v.image_size);
  const int64_t n = std::min<int64_t>(max_batch_, 64);
  std::vector<std::vector<float>> images(static_cast<size_t>(n), std::vector<float>(image_floats, 0.5f));
  std::vector<std::span<const float>> pieces(images.begin(), images.end());
  const double gigabytes = static_cast<double>(n * image_floats * sizeof(float)) * 1e-9;
  auto best_gb_per_s = [&](bool staged) -> StatusOr<double> {
    double best = 0;
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(copy_host_pixels(pieces, staged));
      RETURN_IF_ERROR(rank.stream.synchronize());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, gigabytes / std::max(s, 1e-9));
    }
    return best;
  };
  ASSIGN_OR_RETURN(staged_gb_per_s_, best_gb_per_s(true));
  ASSIGN_OR_RETURN(pageable_gb_per_s_, best_gb_per_s(false));
  staged_host_copy_ = staged_gb_per_s_ >= pageable_gb_per_s_;
  return ok_status();
}

std::string ClipCudaModel::host_copy_description() const {
  if (ranks_.size() != 1 || group_) return "pageable, one contiguous buffer (tensor / pipeline parallel)";
  char text[96];
  if (staged_gb_per_s_ > 0) {
    std::snprintf(text, sizeof(text), "%s, %.1f GB/s (the other: %.1f GB/s)",
                  staged_host_copy_ ? "pinned ring" : "pageable per piece",
                  staged_host_copy_ ? staged_gb_per_s_ : pageable_gb_per_s_,
                  staged_host_copy_ ? pageable_gb_per_s_ : staged_gb_per_s_);
    return text;
  }
  return staged_host_copy_ ? "pinned ring (chosen by option)" : "pageable per piece (chosen by option)";
}

}  // namespace mmserve::models
