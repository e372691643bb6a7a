// Reads a Whisper preprocessor_config.json (or, as transformers 5's WhisperProcessor.save_pretrained writes it,
// the "feature_extractor" object of processor_config.json) into WhisperFeatureConfig and checks the values
// compute() relies on.
//
// HF's WhisperFeatureExtractor.__init__ takes feature_size, sampling_rate, hop_length, chunk_length, n_fft,
// padding_value and dither; it recomputes n_samples and nb_max_frames from them (the stored copies are
// ignored, as here). padding_side comes from SequenceFeatureExtractor ("right" unless set). Absent or null
// keys keep the defaults; a wrong type names the file and key.
// Tests: tests/unit/frontends/audio/log_mel_test.cpp.
#include <cmath>
#include <filesystem>
#include <string>

#include "core/json_config.h"
#include "frontends/audio/log_mel.h"

namespace mmserve::audio {
namespace {

Status read_int(const JsonObject& root, const std::string& key, int& value) {
  ASSIGN_OR_RETURN(int64_t read, root.get_int_or(key, value));
  if (read < 1 || read > (1 << 30)) {
    return invalid_argument(root.label() + ": " + key + ": expected a positive integer, got " + std::to_string(read));
  }
  value = static_cast<int>(read);
  return ok_status();
}

}  // namespace

Status validate_whisper_feature_config(const WhisperFeatureConfig& config) {
  auto out_of_range = [](const char* key, int64_t value, const char* range) {
    return invalid_argument(std::string("whisper features: ") + key + " = " + std::to_string(value) + " is outside " +
                            range);
  };
  if (config.feature_size < 1 || config.feature_size > 512)
    return out_of_range("feature_size", config.feature_size, "1..512");
  if (config.sampling_rate < 1000 || config.sampling_rate > 384000) {
    return out_of_range("sampling_rate", config.sampling_rate, "1000..384000");
  }
  // Even n_fft: HF's frame count (1 + n_samples / hop, then the last dropped) assumes it.
  if (config.n_fft < 2 || config.n_fft > 8192 || config.n_fft % 2 != 0) {
    return out_of_range("n_fft", config.n_fft, "2..8192 (even)");
  }
  if (config.hop_length < 1 || config.hop_length > 65536)
    return out_of_range("hop_length", config.hop_length, "1..65536");
  if (config.chunk_length < 1 || config.chunk_length > 3600) {
    return out_of_range("chunk_length", config.chunk_length, "1..3600 seconds");
  }
  // Reflect padding needs more than n_fft / 2 samples; at least one frame must remain after the drop.
  if (config.n_samples() <= config.n_fft / 2 || config.n_frames() < 1) {
    return invalid_argument("whisper features: chunk_length * sampling_rate is too short for n_fft and hop_length");
  }
  if (!std::isfinite(config.padding_value)) return invalid_argument("whisper features: padding_value is not finite");
  return ok_status();
}

StatusOr<WhisperFeatureConfig> load_whisper_feature_config(const std::string& model_dir) {
  std::string path = model_dir + "/preprocessor_config.json";
  const std::string processor = model_dir + "/processor_config.json";
  std::error_code ec;
  nlohmann::json json;
  if (!std::filesystem::exists(path, ec) && std::filesystem::exists(processor, ec)) {
    ASSIGN_OR_RETURN(nlohmann::json whole, read_json_file(processor));
    if (!whole.is_object() || !whole.contains("feature_extractor") || !whole["feature_extractor"].is_object()) {
      return not_found(model_dir + ": no preprocessor_config.json, and processor_config.json has no "
                       "\"feature_extractor\" object");
    }
    json = std::move(whole["feature_extractor"]);
    path = processor + ": feature_extractor";
  } else {
    ASSIGN_OR_RETURN(json, read_json_file(path));
  }
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::wrap(json, path));
  WhisperFeatureConfig config;
  RETURN_IF_ERROR(read_int(root, "feature_size", config.feature_size));
  RETURN_IF_ERROR(read_int(root, "sampling_rate", config.sampling_rate));
  RETURN_IF_ERROR(read_int(root, "hop_length", config.hop_length));
  RETURN_IF_ERROR(read_int(root, "n_fft", config.n_fft));
  RETURN_IF_ERROR(read_int(root, "chunk_length", config.chunk_length));
  ASSIGN_OR_RETURN(double padding_value, root.get_double_or("padding_value", config.padding_value));
  config.padding_value = static_cast<float>(padding_value);  // HF pads the float32 array with it
  ASSIGN_OR_RETURN(double dither, root.get_double_or("dither", 0.0));
  if (dither != 0.0) {
    return unimplemented(path + ": dither: " + std::to_string(dither) +
                         " adds random noise; only 0 (deterministic features) is supported");
  }
  ASSIGN_OR_RETURN(std::string padding_side, root.get_string_or("padding_side", "right"));
  if (padding_side != "right") {
    return unimplemented(path + ": padding_side: \"" + padding_side + "\" is not supported (only \"right\")");
  }
  Status valid = validate_whisper_feature_config(config);
  if (!valid.ok()) return valid.with_context(path);
  return config;
}

}  // namespace mmserve::audio
