// A test double of serving::InferenceServer for the api's unit tests: deterministic "embeddings" that encode
// which input they came from, scripted errors, a hook that runs inside infer() (to block, throw or watch
// RequestSpec.cancelled), and a record of the last RequestSpec so tests can check what the api passed on.
// Model "whisper" transcribes: the audio bytes are the transcript's segments separated by '|' (each segment's
// text is " " + the piece), every segment goes to the WhisperParams' on_segment, bytes starting with "NOTAUDIO" are
// refused as the real decoder refuses them, and CLIP models refuse audio as the real preprocessor does.
// It implements the interface only; the real server is exercised by tests/e2e.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "engine/clip_executor.h"
#include "engine/whisper_executor.h"
#include "serving/inference_server.h"

namespace mmserve::api::testing {

class FakeInferenceServer : public serving::InferenceServer {
 public:
  static constexpr int64_t kDim = 4;

  FakeInferenceServer() {
    states_["clip"] = serving::ModelState::kReady;
    states_["loading-clip"] = serving::ModelState::kLoading;
  }
  // Adds a model (the audio tests add "whisper", READY).
  void add_model(const std::string& name, serving::ModelState state = serving::ModelState::kReady) {
    std::lock_guard<std::mutex> lock(mutex_);
    states_[name] = state;
  }

  Status start() override { return ok_status(); }
  bool live() const override { return true; }
  bool ready() const override { return ready_flag.load(); }

  std::vector<serving::ModelStatus> models() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<serving::ModelStatus> out;
    for (const auto& [name, state] : states_) out.push_back(status_of(name, state));
    return out;
  }
  StatusOr<serving::ModelStatus> model_status(const std::string& name) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(name);
    if (it == states_.end()) return not_found("unknown model '" + name + "'");
    return status_of(name, it->second);
  }
  StatusOr<serving::ModelMetadata> model_metadata(const std::string& name) const override {
    RETURN_IF_ERROR(model_status(name).status());
    serving::ModelMetadata m;
    m.name = name;
    m.versions = {"1"};
    m.platform = "mmserve_clip";
    m.inputs = {{"text", "BYTES", {-1}}, {"image", "BYTES", {-1}}, {"pixel_values", "FP32", {-1, 3, 32, 32}}};
    m.outputs = {{"text_embeds", "FP32", {-1, kDim}},
                 {"image_embeds", "FP32", {-1, kDim}},
                 {"logits_per_image", "FP32", {-1, -1}}};
    m.embedding_dim = kDim;
    return m;
  }
  Status load_model(const std::string& name) override {
    if (name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
      return invalid_argument("bad model name");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!states_.count(name)) return not_found("no model directory '" + name + "'");
    states_[name] = serving::ModelState::kReady;
    return ok_status();
  }
  Status unload_model(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!states_.count(name)) return not_found("unknown model '" + name + "'");
    states_[name] = serving::ModelState::kUnavailable;
    return ok_status();
  }
  // The CLIP fake takes no adapters (the real server's are tests/e2e/lora_server_test.cpp).
  Status load_adapter(const std::string&, const std::string& name, const std::string&) override {
    return Status(StatusCode::kNotFound, "adapter '" + name + "': no loaded model takes adapters");
  }
  Status unload_adapter(const std::string& name, bool) override {
    return Status(StatusCode::kNotFound, "no adapter '" + name + "' is loaded");
  }
  std::vector<serving::AdapterStatus> adapters() const override { return {}; }
  std::optional<std::string> resolve_adapter(const std::string&) const override { return std::nullopt; }
  bool allow_runtime_lora_updating() const override { return false; }

  void submit(serving::RequestSpec spec, serving::Completion done) override { done(infer(std::move(spec))); }

  StatusOr<serving::ResponseData> infer(serving::RequestSpec spec) override {
    ++infer_calls;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_options = spec.options;
      last_kinds.clear();
      last_texts.clear();
      last_images.clear();
      const auto* whisper = dynamic_cast<const engine::WhisperParams*>(spec.params.get());
      last_transcribe = whisper ? whisper->options : engine::TranscribeOptions{};
      for (const serving::InputItem& item : spec.inputs) {
        last_kinds.push_back(item.kind);
        if (item.kind == serving::InputKind::kText) last_texts.push_back(item.text);
        if (item.kind == serving::InputKind::kImageBytes) last_images.push_back(item.image_bytes);
      }
    }
    if (on_infer) on_infer(spec);
    if (draining.load()) return Status(StatusCode::kUnavailable, "the server is draining");
    ASSIGN_OR_RETURN(serving::ModelStatus status, model_status(spec.model));
    if (status.state != serving::ModelState::kReady) {
      return Status(StatusCode::kUnavailable, "model '" + spec.model + "' is not ready");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!next_error.ok()) return next_error;
    }
    const bool audio = !spec.inputs.empty() && spec.inputs[0].kind == serving::InputKind::kAudioBytes;
    if (audio || spec.model == "whisper") return transcribe(spec);
    engine::ClipOutput r;
    int64_t tokens = 0;
    r.dim = kDim;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const serving::InputItem& item = spec.inputs[i];
      const float kind = item.kind == serving::InputKind::kText         ? 0.f
                         : item.kind == serving::InputKind::kImageBytes ? 1.f
                                                                        : 2.f;
      const float size = item.kind == serving::InputKind::kText         ? item.text.size()
                         : item.kind == serving::InputKind::kImageBytes ? item.image_bytes.size()
                                                                        : item.pixel_values.size();
      r.embeddings.push_back({static_cast<float>(i), kind, size, 0.5f});
      if (item.kind == serving::InputKind::kText) {
        ++r.texts;
        tokens += static_cast<int64_t>(item.text.size()) + 2;
      } else {
        ++r.images;
      }
    }
    if (r.texts > 0 && r.images > 0) {
      for (int64_t m = 0; m < r.images; ++m) {
        for (int64_t n = 0; n < r.texts; ++n) r.logits_per_image.push_back(static_cast<float>(10 * m + n));
      }
    }
    serving::ResponseData out;
    out.output = std::make_shared<engine::ClipOutput>(std::move(r));
    out.tokens = tokens;
    out.times = {1.0, 2.0, 3.0, 6.5};
    return out;
  }

  StatusOr<serving::ResponseData> transcribe(const serving::RequestSpec& spec) {
    if (spec.model != "whisper") {
      return invalid_argument("input 0 is audio, but this is a CLIP model (texts and images only)");
    }
    if (spec.inputs.size() != 1 || spec.inputs[0].kind != serving::InputKind::kAudioBytes) {
      return invalid_argument("model 'whisper' is a speech-to-text (Whisper) model: it takes one audio file");
    }
    const std::string& bytes = spec.inputs[0].audio_bytes;
    if (bytes.rfind("NOTAUDIO", 0) == 0) return invalid_argument("audio: not an audio file we can read");
    const auto* params = dynamic_cast<const engine::WhisperParams*>(spec.params.get());
    const engine::TranscribeOptions options = params ? params->options : engine::TranscribeOptions{};
    const engine::SegmentCallback on_segment = params ? params->on_segment : nullptr;
    engine::Transcript t;
    t.language = options.language.empty() ? "en" : options.language;
    size_t begin = 0;
    for (int64_t id = 0; begin <= bytes.size(); ++id) {
      const size_t end = std::min(bytes.find('|', begin), bytes.size());
      engine::TranscriptSegment segment;
      segment.id = id;
      segment.start = static_cast<double>(id);
      segment.end = static_cast<double>(id) + 1.0;
      segment.text = " " + bytes.substr(begin, end - begin);
      segment.tokens = {50364 + static_cast<int32_t>(id)};
      t.text += segment.text;
      t.segments.push_back(segment);
      if (on_segment && !on_segment(segment)) return Status(StatusCode::kCancelled, "cancelled");
      begin = end + 1;
    }
    t.duration = static_cast<double>(t.segments.size());
    auto output = std::make_shared<engine::TranscriptOutput>();
    output->transcript = std::move(t);
    serving::ResponseData r;
    r.output = output;
    r.times = {1.0, 2.0, 3.0, 6.5};
    return r;
  }

  bool drain(std::chrono::milliseconds) override {
    draining = true;
    return true;
  }
  serving::MetricsRegistry& metrics() override { return registry_; }

  void set_error(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    next_error = std::move(status);
  }

  std::atomic<bool> ready_flag{true};
  std::atomic<bool> draining{false};
  std::atomic<int> infer_calls{0};
  std::function<void(const serving::RequestSpec&)> on_infer;  // set before the server starts
  // What the last infer() received (read after the response arrived).
  serving::RequestOptions last_options;
  std::vector<serving::InputKind> last_kinds;
  std::vector<std::string> last_texts, last_images;
  engine::TranscribeOptions last_transcribe;

 private:
  static serving::ModelStatus status_of(const std::string& name, serving::ModelState state) {
    serving::ModelStatus s;
    s.name = name;
    s.state = state;
    s.architecture = "CLIPModel";
    if (state != serving::ModelState::kReady) s.reason = "not loaded";
    return s;
  }

  mutable std::mutex mutex_;
  std::map<std::string, serving::ModelState> states_;
  Status next_error;
  serving::MetricsRegistry registry_;
};

}  // namespace mmserve::api::testing
