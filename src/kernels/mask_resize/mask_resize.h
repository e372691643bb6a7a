// SAM's mask post-processing (transformers 5's SamProcessor.post_process_masks) as one op: k low-resolution
// logit maps -> bilinear to the padded input size -> crop the resized image's window -> bilinear to the original
// image size -> binarise (> threshold). Both resizes are torch's F.interpolate(mode="bilinear",
// align_corners=False) as its CPU kernel computes it, in float32:
//   scale = in / out, src = max(scale * (dst + 0.5) - 0.5, 0), i0 = min(floor(src), in - 1), i1 = i0 + (i0 < in - 1),
//   lambda = clamp(src - i0, 0, 1), out = (a * (1 - lambda_x) + b * lambda_x) height-blended the same way,
// with in == out a copy (torch's special case). Only the rows and columns the crop keeps are computed.
//
// Layout: logits [k, in_h, in_w] f32 row-major; out [k, out_h, out_w] bytes (1 above the threshold, else 0).
// Every output is the same sequence of IEEE float32 multiplies and adds on the CPU and the GPU (no FMA
// contraction on either: this file's CPU twin is compiled with -ffp-contract=off, the CUDA kernel spells its
// operations with __fmul_rn / __fadd_rn), so the two agree bit for bit. torch's own build may fuse some of them
// into FMAs, so a pixel whose logit sits within an ulp of the threshold can differ from HF's.
// Tests: mask_resize_cuda_test.cpp (the GPU against this CPU twin, odd shapes) and
// tests/unit/frontends/image/sam_preprocess_test.cpp (this CPU twin against HF's post-processed masks).
#pragma once

#include <cstdint>

namespace mmserve::kernels {

struct MaskResizeShape {
  int k = 0;                    // masks
  int in_h = 0, in_w = 0;       // the low-res logits (256 x 256 for 1024 px SAM models)
  int pad_h = 0, pad_w = 0;     // the first resize's size (the processor's pad_size)
  int crop_h = 0, crop_w = 0;   // the window kept: [0, crop_h) x [0, crop_w) (the resized image, <= pad size)
  int out_h = 0, out_w = 0;     // the original image
};

// True when every size is positive and the crop fits inside the pad size.
bool mask_resize_shape_valid(const MaskResizeShape& s);

// CPU twin: splits its passes' rows over OpenMP threads when large (every output computed by the same operations
// whichever thread runs it). Precondition (checked, aborts): mask_resize_shape_valid(s), non-null pointers.
void mask_resize_threshold(const float* logits, const MaskResizeShape& s, float threshold, uint8_t* out);

}  // namespace mmserve::kernels
