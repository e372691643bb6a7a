// RequestPreprocessor: turns a CLIP request's inputs into what the engine takes, on a preprocessing-pool
// thread (never on an engine thread): texts tokenized with the model's tokenizer (truncated to the text
// tower's max_position_embeddings), encoded images decoded, resized and cropped PIL-exactly and normalised,
// preprocessed pixel values checked against [3, S, S]; then the SPEC 3.2 QoS score from the sizes (image
// tokens = the vision tower's patch count per image, text length in Unicode code points, no audio).
//
// Errors name the input by index: kInvalidArgument for bad UTF-8, undecodable or unsupported images and
// wrong pixel shapes; kTooLarge for an image above max_image_pixels (the decoder's kResourceExhausted).
// Thread-safe: it is immutable after construction (the tokenizer's word cache has its own lock).
// Tests: tests/unit/serving/inference_server_test.cpp (goldens through the server, error cases).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "frontends/image/preprocess.h"
#include "frontends/text/clip_tokenizer.h"
#include "serving/pending_request.h"
#include "serving/request.h"

namespace mmserve::serving {

struct PreprocessorOptions {
  int64_t image_size = 224;   // S: the vision tower's input
  int64_t image_tokens = 49;  // patches per image, for the QoS score
  int max_text_tokens = 77;   // truncation (BOS and EOS included)
  int64_t max_image_pixels = 64LL * 1024 * 1024;
  QosWeights qos;
};

class RequestPreprocessor {
 public:
  RequestPreprocessor(std::unique_ptr<text::ClipTokenizer> tokenizer, image::ClipPreprocessConfig image_config,
                      PreprocessorOptions options);

  // Fills `request`'s payload (input_is_image, text_ids, pixels, images, tokens), items and score from
  // `inputs` (consumed: large buffers are moved, not copied).
  Status run(std::vector<InputItem>& inputs, PendingRequest& request) const;
  // Token ids of one text, as run() produces them (warm-up and tests).
  StatusOr<std::vector<int32_t>> tokenize(const std::string& text) const;
  const PreprocessorOptions& options() const { return options_; }

 private:
  Status add_image(InputItem& input, size_t index, PendingRequest& request) const;

  std::unique_ptr<text::ClipTokenizer> tokenizer_;
  image::ClipPreprocessConfig image_config_;
  PreprocessorOptions options_;
};

// Unicode code points in valid UTF-8 (bytes that are not continuation bytes).
int64_t count_code_points(const std::string& utf8);

}  // namespace mmserve::serving
