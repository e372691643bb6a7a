// The CUDA twin of png_inflate.h: the same decoder (png_inflate_core.h), equal to the CPU twin byte for byte and
// status for status. Every pointer is a device pointer; `images` and `status` hold n entries. No allocation and no
// synchronisation inside: two kernels are queued on `stream` (inflate: one warp per image; rows: one block per
// image), so it runs inside the engine's work; status is ready when the stream reaches that point.
// Tests: png_inflate_cuda_test.cpp; bench: png_inflate_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/png_inflate/png_inflate.h"

namespace mmserve::kernels {

// The decoder the GPU uses unless told: the warp's speculative one (the serial one stays for the bench's
// comparison and as a fallback).
inline constexpr PngHuffmanDecoder kPngHuffmanDecoderCudaDefault = PngHuffmanDecoder::kSpeculative;

// `streams` 8-byte aligned (as cudaMalloc returns: the decoder reads aligned words around each stream's bytes);
// `scratch` of png_inflate_assign_scratch's size for these images. kInvalidArgument (nothing launched) for n < 0 or
// above 2^31 - 1, null pointers with n > 0, or misaligned streams; a bad descriptor is its image's kBadImage.
Status inflate_png_rows_cuda(const uint8_t* streams, uint64_t streams_bytes, const PngInflateImage* images, int64_t n,
                             uint8_t* scratch, uint64_t scratch_bytes, uint8_t* out, uint64_t out_bytes,
                             int32_t* status, cudaStream_t stream,
                             PngHuffmanDecoder decoder = kPngHuffmanDecoderCudaDefault);

}  // namespace mmserve::kernels
