// WhisperExecutor: one instance of a Whisper model on one device, turning audio into a transcript.
//
// It owns the model (models/whisper/whisper.h on cpu, models/whisper/whisper_cuda.h on cuda), the log-mel
// frontend built from the model's preprocessor_config.json and the tokenizer from its directory. A request is
// decoded audio (mono, 16 kHz) plus TranscribeOptions; the executor runs the reference package's algorithm
// (openai-whisper `transcribe()`): 30 s windows with timestamp-based seeking, the initial prompt and the
// previous window's text as <|startofprev|> context, temperature fallback on a failed window (compression
// ratio, average log-probability, no-speech probability), the generation config's suppression rules and the
// timestamp rules. Decoding rules live in models/whisper/whisper_decoding.h so both devices share them.
// One executor is driven by one thread at a time (the server gives each instance its own engine thread).
// Tests: tests/unit/engine/whisper_executor_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/executor.h"

namespace mmserve::engine {

enum class WhisperTask { kTranscribe, kTranslate };

struct TranscribeOptions {
  WhisperTask task = WhisperTask::kTranscribe;
  std::string language;    // ISO code ("en") or name ("english"); empty = detect from the first window
  bool timestamps = true;  // false: <|notimestamps|> prompt, one segment per window
  int beam_size = 1;       // 1 = greedy; > 1 = beam search at temperature 0 (the reference's best_of rules)
  int best_of = 5;         // samples per window when the temperature is > 0
  std::vector<float> temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};  // fallback schedule
  float compression_ratio_threshold = 2.4f;                                // <= 0 disables the check
  float logprob_threshold = -1.0f;                                         // NaN disables the check
  float no_speech_threshold = 0.6f;                                        // NaN disables the check
  bool condition_on_previous_text = true;
  std::string initial_prompt;  // as <|startofprev|> context of the first window
  int64_t max_new_tokens = 0;  // per window; 0 = the model's limit (max_target_positions / 2 - 1 as the reference)
  uint64_t seed = 0;           // sampling at temperature > 0
  bool vad = false;            // skip silence with the Silero VAD before the encoder (when the model has one)
};

struct TranscriptSegment {
  int64_t id = 0;
  int64_t seek = 0;               // window start, in mel frames (10 ms), as the reference reports it
  double start = 0.0, end = 0.0;  // seconds in the input audio
  std::string text;
  std::vector<int32_t> tokens;  // the segment's text and timestamp tokens (OpenAI's verbose_json `tokens`)
  float temperature = 0.0f;
  float avg_logprob = 0.0f;
  float compression_ratio = 0.0f;
  float no_speech_prob = 0.0f;
};

struct Transcript {
  std::string text;       // all segments' text, concatenated
  std::string language;   // ISO code, given or detected
  double duration = 0.0;  // seconds of input audio
  std::vector<TranscriptSegment> segments;
  double vad_skipped_seconds = 0.0;  // audio the VAD kept away from the encoder
};

// Called after each finished segment (streaming responses); returning false cancels the request (kCancelled).
using SegmentCallback = std::function<bool(const TranscriptSegment&)>;

// Whisper's own options (mmserve.yaml: cross_kv, decoder_rows).
struct WhisperOptions {
  // CUDA: how the cross-attention K/V are stored: "same" (the compute dtype), "fp8_e4m3" or "int8" (per
  // row-and-head scales; half the bytes of f16). The CPU path takes "same" only.
  std::string cross_kv = "same";
  // The most decoder rows in flight at once (every beam and best_of sample of the batch's requests); more wait
  // for rows to free up. 0 = the device's: max(batch_size_max, 5) on cuda (allocated at load), unbounded on cpu.
  // Otherwise at least 5 (the default best_of, so a default request always fits).
  int64_t decoder_rows = 0;
};

// A request's decoding options and its streaming callback (engine::RequestParams of the Whisper family).
struct WhisperParams : virtual RequestParams {
  TranscribeOptions options;
  // Optional: called on the engine thread after each finished segment; returning false cancels the request.
  // A request with a callback is decoded alone (transcribe_batch has no per-request callbacks) and, having
  // streamed, is never retried on another replica.
  SegmentCallback on_segment;
};

// One prepared Whisper request (engine/whisper_inputs.h): mono samples at the executor's rate.
struct WhisperInput : ModelInput {
  std::vector<float> audio;
  double audio_seconds = 0;
  TranscribeOptions options;
  SegmentCallback on_segment;
};

struct TranscriptOutput : ModelOutput {
  Transcript transcript;
  double audio_seconds() const override { return transcript.duration; }
};

class WhisperExecutor final : public Executor {
 public:
  static StatusOr<std::unique_ptr<WhisperExecutor>> create(const std::string& model_dir, const ExecutorOptions& options,
                                                           const WhisperOptions& whisper = {});
  // engine/families.h: the family config's keys are cross_kv and decoder_rows.
  static StatusOr<std::unique_ptr<Executor>> create_for_server(const std::string& model_dir,
                                                               const ExecutorOptions& options,
                                                               const nlohmann::json& family_config);
  ~WhisperExecutor() override;

  // Executor.
  Device device() const override;
  DType dtype() const override;
  int64_t memory_bytes() const override;
  std::string describe() const override;
  const FamilyInfo& info() const override;
  // One second of silence, a few tokens, no fallback (touches every weight and arena once).
  Status warm() override;
  // The items without a segment callback are decoded together by transcribe_batch (their windows share the
  // encoder and the decoder steps); one with a callback is decoded alone by transcribe() so its segments reach
  // the client as they finish. Without hooks.keep_inputs, each item's audio is released once it has run.
  BatchStats run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) override;

  int sample_rate() const;                     // the rate transcribe() expects (16000)
  std::vector<std::string> languages() const;  // ISO codes this model's tokenizer knows

  // audio: mono samples at sample_rate(). Errors: kInvalidArgument for bad options (unknown language, beam < 1,
  // translate on an English-only model...), kCancelled when the callback says so.
  StatusOr<Transcript> transcribe(const std::vector<float>& audio, const TranscribeOptions& options,
                                  const SegmentCallback& on_segment = nullptr);
  // Several requests decoded together (their windows batched through the encoder and the decoder steps).
  std::vector<StatusOr<Transcript>> transcribe_batch(const std::vector<const std::vector<float>*>& audios,
                                                     const std::vector<TranscribeOptions>& options);

 private:
  WhisperExecutor();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Output formats of `mmserve transcribe` and /v1/audio/transcriptions (OpenAI's response_format values).
enum class TranscriptFormat { kJson, kText, kSrt, kVtt, kVerboseJson };
StatusOr<TranscriptFormat> parse_transcript_format(const std::string& name);  // "json", "text", "srt", ...
std::string transcript_content_type(TranscriptFormat format);                 // application/json, text/plain, ...
// json: {"text": ...}; verbose_json: OpenAI's shape (task, language as a name, duration, text, segments with
// id/seek/start/end/text/tokens/temperature/avg_logprob/compression_ratio/no_speech_prob).
std::string format_transcript(const Transcript& transcript, TranscriptFormat format, WhisperTask task);

}  // namespace mmserve::engine
