// The CUDA twin of pil_resize.h (bit-equal to pil_resize_cpu: the same integer sums). Two launches per 64 images:
//  - the horizontal pass, for images where both passes run: one CTA per (source row the vertical pass reads,
//    image), threads along output x (coalesced 3-byte writes of the temporary, neighbouring threads reading
//    overlapping source spans through L1);
//  - the placement: one thread per output pixel of the [3, out_height, out_width] planes (threads along x, so
//    each plane's writes coalesce), the vertical pass over the temporary, or over the source when only one pass
//    or none runs (the horizontal taps computed on the spot), and 0 outside the window (crop and padding).
// The descriptors travel by value as a __grid_constant__ kernel parameter (no upload, nothing to synchronise);
// the coefficient tables are read from global memory through the read-only path (a table row is shared by every
// thread of a CTA row in the vertical pass: a broadcast). No allocation, no synchronisation, everything on
// `stream`, so it can run inside the engine's work (and a CUDA graph).
// Tests: pil_resize_cuda_test.cpp; bench: pil_resize_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/pil_resize/pil_resize.h"

namespace mmserve::kernels {

// `batch.images` in host memory; src, tables, scratch and out device pointers. kInvalidArgument for what
// pil_resize_validate refuses (nothing launched). The tables' contents are trusted (see pil_resize_cpu).
Status pil_resize_cuda(const PilResizeBatch& batch, cudaStream_t stream);

}  // namespace mmserve::kernels
