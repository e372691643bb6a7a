// ClipInputs: the CLIP family's input preparation (engine::InputPreparer), used by the server's preprocessing
// pool and by `mmserve embed` alike: texts tokenized with the model's tokenizer (truncated to the text tower's
// max_position_embeddings), encoded images decoded, resized and cropped PIL-exactly and normalised, preprocessed
// pixel values checked against [3, S, S]; then the SPEC 3.2 QoS score from the sizes (image tokens = the vision
// tower's patch count per image, text length in Unicode code points, no audio).
//
// Errors name the input by index: kInvalidArgument for bad UTF-8, undecodable or unsupported images, wrong
// pixel shapes and inputs CLIP does not take (audio, tensors); kTooLarge for an image above max_image_pixels.
// Thread-safe: it is immutable after construction (the tokenizer's word cache has its own lock).
// Tests: tests/unit/serving/inference_server_test.cpp (goldens through the server, error cases),
// tests/e2e/cli_test.cpp (`mmserve embed`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/clip_executor.h"
#include "engine/executor.h"
#include "engine/png_decode_stage.h"
#include "frontends/image/preprocess.h"
#include "frontends/text/clip_tokenizer.h"

namespace mmserve::engine {

struct ClipInputOptions {
  int64_t image_size = 224;   // S: the vision tower's input
  int64_t image_tokens = 49;  // patches per image, for the QoS score
  int max_text_tokens = 77;   // truncation (BOS and EOS included)
  // The executor decodes PNGs itself (ClipOptions::image_decode kBatch): requests without pixel_values keep each
  // PNG the batch decoder takes compressed (ClipInput::kept_pngs); the rest are decoded here as always.
  bool keep_pngs = false;
  PreparerOptions common;
};

class ClipInputs final : public InputPreparer {
 public:
  // `stage` (ClipOptions::image_decode kStage, else null): the kept PNGs are submitted to it as they arrive.
  ClipInputs(std::unique_ptr<text::ClipTokenizer> tokenizer, image::ClipPreprocessConfig image_config,
             ClipInputOptions options, std::unique_ptr<PngDecodeStage> stage = nullptr);
  // Reads the tokenizer and preprocessor_config.json of `model_dir`, sized for `executor` (checks that the
  // preprocessor's crop matches the vision tower's input).
  static StatusOr<std::unique_ptr<ClipInputs>> create(const std::string& model_dir, const ClipExecutor& executor,
                                                      const PreparerOptions& options);
  // engine/families.h (`first` is a ClipExecutor).
  static StatusOr<std::unique_ptr<InputPreparer>> create_for_server(const std::string& model_dir, const Executor& first,
                                                                    const PreparerOptions& options);

  // A ClipInput with items {texts, images}.
  StatusOr<Prepared> prepare(std::vector<InputItem>& inputs, const RequestParams* params) const override;
  // With keep_pngs, a request whose images are all PNGs the batch decoder takes (by their headers and sizes) costs
  // only the split here, microseconds: it is prepared on the submitting thread, without the preprocessing pool's hop.
  bool decodes_media(const std::vector<InputItem>& inputs) const override;
  // Token ids of one text, as prepare() produces them.
  StatusOr<std::vector<int32_t>> tokenize(const std::string& text) const;
  const ClipInputOptions& options() const { return options_; }

 private:
  Status add_image(InputItem& input, size_t index, bool keep_png, ClipInput& request) const;

  std::unique_ptr<text::ClipTokenizer> tokenizer_;
  image::ClipPreprocessConfig image_config_;
  // pixel_value_table(image_config_): what every prepared request's levels map through (shared, never copied).
  std::shared_ptr<const std::vector<float>> level_table_;
  ClipInputOptions options_;
  std::unique_ptr<PngDecodeStage> stage_;
};

}  // namespace mmserve::engine
