// SamInputs: the SAM family's input preparation (engine::InputPreparer), for the server's preprocessing pool and
// `mmserve segment` alike. A request is one encoded image (or, in SamParams::image_id, the id an earlier response
// returned) and one prompt as named tensors, as HF's SamProcessor takes them for one image:
//   point_coords FP32 [N, 2] (or [1, N, 2]): x, y in the ORIGINAL image's pixels
//   point_labels INT32 [N]: 1 foreground, 0 background, -1 padding (default: all 1)
//   boxes        FP32 [M, 4] with M <= 1: x0, y0, x1, y1 in original pixels (all points and the box form ONE prompt)
//   mask_input   FP32 [1, 4g, 4g]: a previous call's low-resolution logits (g = the encoder's grid)
// The image is decoded and preprocessed PIL-exactly (frontends/image/sam_preprocess.h: longest side to
// size.longest_edge, normalise, pad), the coordinates normalised to the resized frame as SamProcessor does, and
// the image's content hash becomes its image_id (the embedding cache's key). The geometry of recent images is
// remembered here so that an image_id request needs no image at all.
//
// Errors are kInvalidArgument with a message: no prompt, a point or box outside the image, wrong shapes, labels
// outside -1..1, a non-finite value, an unknown image_id, inputs SAM does not take; kTooLarge above
// max_image_pixels. Thread-safe (the geometry index has its own lock).
// Tests: tests/unit/engine/sam_executor_test.cpp.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/executor.h"
#include "engine/sam_executor.h"
#include "frontends/image/sam_preprocess.h"

namespace mmserve::engine {

class SamInputs final : public InputPreparer {
 public:
  SamInputs(image::SamPreprocessConfig config, int64_t image_size, int64_t grid, PreparerOptions options)
      : config_(config), image_size_(image_size), grid_(grid), options_(std::move(options)) {}
  static StatusOr<std::unique_ptr<SamInputs>> create(const std::string& model_dir, const SamExecutor& executor,
                                                     const PreparerOptions& options);
  static StatusOr<std::unique_ptr<InputPreparer>> create_for_server(const std::string& model_dir, const Executor& first,
                                                                    const PreparerOptions& options);
  // A SamInput: items {1 image to encode (0 for an image_id request), 1 prompt}.
  StatusOr<Prepared> prepare(std::vector<InputItem>& inputs, const RequestParams* params) const override;

 private:
  static constexpr size_t kRememberedImages = 4096;
  void remember(const std::string& id, const image::SamImageInput& geometry) const;
  bool recall(const std::string& id, image::SamImageInput& geometry) const;

  image::SamPreprocessConfig config_;
  int64_t image_size_, grid_;
  PreparerOptions options_;
  mutable std::mutex mutex_;
  mutable std::list<std::string> order_;  // front = most recent
  mutable std::unordered_map<std::string, std::pair<image::SamImageInput, std::list<std::string>::iterator>> known_;
};

}  // namespace mmserve::engine
