// The SAM family's API codec: POST /v1/segment (JSON in, JSON out) and the masks' shared output form, also used
// by `mmserve segment` and the KServe response (kserve_sam.cpp).
//
// Request: {"model": "sam", "image": "data:image/png;base64,..." | "image_id": "<id of an earlier response>",
//           "points": [[x, y], ...], "labels": [1, 0, ...], "boxes": [[x0, y0, x1, y1]],
//           "multimask_output": true, "output": "rle" | "png"}
// Coordinates are in the original image's pixels; all points and the box form one prompt (HF's input_points /
// input_labels / input_boxes for one image). Response:
//   {"image_id": "...", "iou_scores": [...], "masks": [{"size": [H, W], "counts": "<COCO compressed RLE>"}, ...]}
// with "output": "png", each mask is {"size": [H, W], "png": "<base64 of an 8-bit grayscale PNG, 255 = inside>"}.
// Every malformed field is kInvalidArgument naming it. Tests: tests/unit/api/sam_codec_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"
#include "engine/sam_executor.h"

namespace mmserve::api {

enum class MaskFormat { kRle, kPng };

struct SegmentRequest {
  std::string model;
  std::vector<engine::InputItem> inputs;      // the image (if any) and the prompt tensors
  std::shared_ptr<engine::SamParams> params;  // multimask_output, image_id
  MaskFormat format = MaskFormat::kRle;
};

StatusOr<SegmentRequest> parse_segment_request(std::string_view body);

// {"size": [H, W], "counts": "..."} of mask `index` (COCO's compressed RLE, pycocotools' string form).
std::string mask_rle_json(const engine::SamOutput& output, int64_t index);
// The /v1/segment (and `mmserve segment`) response body.
std::string encode_segment_response(const engine::SamOutput& output, MaskFormat format);

}  // namespace mmserve::api
