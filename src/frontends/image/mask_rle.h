// COCO run-length encoding of binary masks, byte for byte as pycocotools (common/maskApi.c) writes it.
//
// Segmentation responses return masks as COCO "compressed RLE" {"size": [h, w], "counts": "..."}, the format
// pycocotools.mask.decode, SA-1B and most annotation tools read. The runs alternate zeros and ones over the
// pixels in column-major order (down each column, then the next), starting with a run of zeros (0 when the first
// pixel is set). The string packs each count like LEB128 with 5 payload bits and a continuation bit per
// character (ASCII 48..111, low bits first, the last character's bit 4 the sign); from the fourth count on
// (index > 2) the difference to the count two places back is written instead of the count.
// Tests: tests/unit/frontends/image/mask_rle_test.cpp (goldens from tools/reference/make_sam_fixtures.py's
// transliteration of maskApi.c and a string from pycocotools' own tests).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mmserve::image {

// rleEncode: the run lengths of a row-major height x width mask (nonzero = foreground), column-major, zeros
// first. Their sum is height * width; every run but the first is positive.
std::vector<uint32_t> coco_rle_runs(const uint8_t* mask, int height, int width);
// rleToString on run lengths.
std::string coco_rle_runs_to_string(std::span<const uint32_t> runs);
// rleFrString, checked: kInvalidArgument for a character outside '0'..'o', a value cut off by the end of the
// string, one longer than 7 characters, or a run that comes out negative or above 2^32 - 1.
StatusOr<std::vector<uint32_t>> coco_rle_runs_from_string(std::string_view counts);

// The compressed "counts" string of a row-major mask: coco_rle_runs_to_string(coco_rle_runs(...)).
std::string coco_rle_counts(const uint8_t* mask, int height, int width);
// Decodes a "counts" string to a row-major height x width mask of 0/1 bytes. kInvalidArgument when the string
// is malformed (see above), the size is negative, or the runs do not add up to exactly height * width.
StatusOr<std::vector<uint8_t>> decode_coco_rle(std::string_view counts, int height, int width);

}  // namespace mmserve::image
