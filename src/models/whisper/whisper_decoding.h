// Whisper decoding shared by every device: the decoder-rows interface a device model implements, the
// generation config, the logits processors, and the search loops (greedy, beam search, sampling, language
// detection) written once over that interface.
//
// A device model (WhisperModel on the CPU through CpuWhisperDecoderRows, WhisperCudaModel in whisper_cuda.h)
// implements WhisperBackend: encode() a batch of log-mel windows into an opaque WhisperEncoded handle that stays
// on the device, and new_rows() a WhisperDecoderRows: a set of decoder rows that advance one token per step().
// Rows join with prefill() (each attends to one window of a WhisperEncoded, each with its own prompt), leave or
// are duplicated with reorder() (beam search; finished rows), so the executor batches decoder steps across
// requests continuously. Logits always come back to the host as f32 [rows, vocab].
//
// The rules follow HF transformers 5.17 (generation/logits_process.py, models/whisper/generation_whisper.py,
// generation/utils.py) because its outputs are the goldens; the comments at each definition in
// whisper_decoding.cpp name the reference function. Processor order is HF's _retrieve_logit_processors:
// begin-suppress, suppress, then the timestamp rules.
// Tests: tests/unit/models/whisper_decoding_test.cpp (each rule on hand-made logits; the CPU rows against
// the model's own lockstep decoding), tests/unit/engine/whisper_executor_test.cpp (HF goldens end to end).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/whisper/whisper.h"

namespace mmserve::models {

// ------------------------------------------------------------------------------------ device interface

// Encoder output of `windows` log-mel windows, kept where the backend computed it.
class WhisperEncoded {
 public:
  virtual ~WhisperEncoded() = default;
  virtual int64_t windows() const = 0;
  virtual int64_t frames() const = 0;  // encoder frames per window (1500 for 30 s)
};

// Decoder rows advancing one token per step. Rows are numbered 0..rows()-1; each has its own length (rows that
// joined at different times coexist). Not thread-safe: one thread drives it.
class WhisperDecoderRows {
 public:
  virtual ~WhisperDecoderRows() = default;
  virtual int64_t rows() const = 0;
  // Tokens one row can hold in all (prompt + generated); a step on a full row is kOutOfRange.
  virtual int64_t capacity() const = 0;
  virtual int64_t length(int64_t row) const = 0;
  virtual int64_t vocab_size() const = 0;

  // Appends prompts.size() rows at the end: new row k attends to window windows[k] of `encoded` and is run over
  // prompts[k] (any non-empty length <= capacity). Writes the logits at each new row's last prompt position to
  // `logits` [prompts.size(), vocab] (resized). When `extra_positions` is non-empty (one per new row, -1 for none),
  // the logits at that prompt position are written to extra_logits [prompts.size(), vocab] (rows without one are
  // left zero): the no-speech probability is read at <|startoftranscript|>, which a <|startofprev|> context
  // puts mid-prompt.
  virtual Status prefill(const std::shared_ptr<const WhisperEncoded>& encoded, const std::vector<int64_t>& windows,
                         const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                         const std::vector<int64_t>& extra_positions = {},
                         std::vector<float>* extra_logits = nullptr) = 0;
  // One token per row (tokens.size() == rows()); logits [rows, vocab] (resized).
  virtual Status step(const std::vector<int32_t>& tokens, std::vector<float>& logits) = 0;
  // New row i becomes a copy of old row src[i]; src may be shorter (rows leave), repeat rows (beams) or be empty.
  virtual Status reorder(const std::vector<int64_t>& src) = 0;
};

// A loaded Whisper model on one device.
class WhisperBackend {
 public:
  virtual ~WhisperBackend() = default;
  virtual const WhisperConfig& config() const = 0;
  virtual Device device() const = 0;
  virtual DType dtype() const = 0;
  virtual int64_t memory_bytes() const = 0;
  // mel [windows, num_mel_bins, frames] f32 on the host.
  virtual StatusOr<std::shared_ptr<const WhisperEncoded>> encode(const Tensor& mel) = 0;
  // An empty set of rows with room for `capacity` tokens each (<= max_target_positions).
  virtual StatusOr<std::unique_ptr<WhisperDecoderRows>> new_rows(int64_t capacity) = 0;
  // How many decoder rows a rows object holds at once: a GPU model's are allocated at load (max_batch), so its
  // prefill() refuses more (kResourceExhausted) and the executor admits decodes within it; the CPU's grow.
  virtual int64_t max_rows() const { return std::numeric_limits<int64_t>::max(); }
};

// The CPU backend over a loaded WhisperModel (not owned when `model` is borrowed; owned otherwise). max_rows > 0
// bounds the decoder rows of its rows objects (decoder state memory and step width), as a GPU model's are; 0: none.
std::unique_ptr<WhisperBackend> make_cpu_whisper_backend(std::shared_ptr<const WhisperModel> model,
                                                         int64_t max_rows = 0);

// ------------------------------------------------------------------------------------ generation config

// generation_config.json of a Whisper checkpoint (HF's keys). Absent: the defaults below / empty.
struct WhisperGenerationConfig {
  std::vector<int32_t> suppress_tokens;
  std::vector<int32_t> begin_suppress_tokens;
  int32_t decoder_start_token_id = -1;  // <|startoftranscript|>
  int32_t eos_token_id = -1;            // <|endoftext|>
  int32_t no_timestamps_token_id = -1;
  int32_t prev_sot_token_id = -1;            // <|startofprev|>
  int64_t max_initial_timestamp_index = -1;  // -1: not set (no limit)
  int64_t max_length = 448;
  bool is_multilingual = true;
  std::unordered_map<std::string, int32_t> lang_to_id;  // "<|en|>" -> id
  std::unordered_map<std::string, int32_t> task_to_id;  // "transcribe" -> id
};

// Reads `model_dir`/generation_config.json; a missing file gives the defaults (kNotFound never), a malformed
// one kInvalidArgument naming the key.
StatusOr<WhisperGenerationConfig> load_whisper_generation_config(const std::string& model_dir);

// ------------------------------------------------------------------------------------ logits processors

// Token ids the rules need (from the tokenizer and the generation config).
struct WhisperSpecialIds {
  int32_t eot = -1;
  int32_t no_timestamps = -1;
  int32_t timestamp_begin = -1;  // <|0.00|>; every id >= it is a timestamp
  int64_t vocab_size = 0;        // logits width (the model's)
};

struct WhisperLogitRules {
  WhisperSpecialIds ids;
  std::vector<int32_t> suppress_tokens;        // always -inf (SuppressTokensLogitsProcessor)
  std::vector<int32_t> begin_suppress_tokens;  // -inf at the first generated position only
  bool timestamps = false;                     // WhisperTimeStampLogitsProcessor on
  int64_t max_initial_timestamp_index = -1;    // -1: no limit
};

// Applies HF's processors, in HF's order, to one row's scores (raw logits or log-probs: the rules are the same),
// `generated` = the tokens this row produced after its prompt so far.
void apply_whisper_logit_rules(const WhisperLogitRules& rules, std::span<const int32_t> generated,
                               std::span<float> scores);
// The single rules, exposed for tests.
void suppress_whisper_tokens(std::span<const int32_t> tokens, std::span<float> scores);
void apply_whisper_timestamp_rules(const WhisperLogitRules& rules, std::span<const int32_t> generated,
                                   std::span<float> scores);

// In-place log_softmax of one row (f32 accumulate in double).
void log_softmax_inplace(std::span<float> row);

// ------------------------------------------------------------------------------------ search

struct WhisperSearchOptions {
  int num_beams = 1;         // 1: greedy (or sampling when temperature > 0)
  float temperature = 0.0f;  // > 0: sample from softmax(logits / temperature) (num_beams must be 1)
  uint64_t seed = 0;
  int64_t max_new_tokens = 32;  // tokens after the prompt, <|endoftext|> included when produced
  float length_penalty = 1.0f;  // HF's beam-search default
};

struct WhisperSequence {
  std::vector<int32_t> tokens;  // after the prompt, without the final <|endoftext|>
  bool ended_with_eot = false;
  double sum_logprob = 0.0;    // of tokens (+ the eot when ended), from the processed log-softmax
  double avg_logprob = 0.0;    // sum_logprob / (tokens + eot)
  float no_speech_prob = NAN;  // softmax at the <|startoftranscript|> position, <|nospeech|> (when asked)
};

// One decoding task: a prompt over window `window` of `encoded`.
struct WhisperDecodeRequest {
  std::shared_ptr<const WhisperEncoded> encoded;
  int64_t window = 0;
  std::vector<int32_t> prompt;
  int64_t sot_position = -1;  // index of <|startoftranscript|> in prompt, for no_speech_prob (-1: none)
  int32_t no_speech_token = -1;
  WhisperLogitRules rules;
  WhisperSearchOptions search;
};

// Continuous batching of decoding requests over one WhisperDecoderRows (a CUDA model allows one alive at a
// time, so everything of one executor goes through one session). add() prefills a request's prompt at once
// (greedy/sampling: 1 row; beams: 1 row that the first step fans out to num_beams); advance() runs one decoder
// step of every live request and returns those that finished, whose rows leave; requests added between two
// advance() calls join at the next step. Beam search follows HF's _beam_search (generation/utils.py,
// transformers 5.17), greedy and sampling HF's _sample. Not thread-safe.
class WhisperDecodeSession {
 public:
  // capacity 0 = the model's max_target_positions.
  static StatusOr<std::unique_ptr<WhisperDecodeSession>> create(WhisperBackend& backend, int64_t capacity = 0);
  ~WhisperDecodeSession();

  // Checks and prefills the request; returns its id. Bad options are kInvalidArgument here.
  StatusOr<int64_t> add(WhisperDecodeRequest request);
  bool idle() const;
  int64_t live_rows() const { return rows_->rows(); }
  // One step of every live request; appends the ones that finished (id, result) to `finished`. A failing step
  // fails every live request (reported in `finished`), and the session is empty afterwards.
  void advance(std::vector<std::pair<int64_t, StatusOr<WhisperSequence>>>& finished);

  // Language detection (HF WhisperGenerationMixin.detect_language) of `windows` of `encoded`: a row over
  // [<|startoftranscript|>] each, joined and dropped again between two steps; of the language tokens' logits
  // (all other ids masked), the argmax. Returns per window the language token and its probability (softmax over
  // the language tokens).
  struct LanguageGuess {
    int32_t token = -1;
    float probability = 0.0f;
  };
  StatusOr<std::vector<LanguageGuess>> detect_language(const std::shared_ptr<const WhisperEncoded>& encoded,
                                                       const std::vector<int64_t>& windows, int32_t sot,
                                                       std::span<const int32_t> language_ids);

 private:
  struct Task;
  WhisperDecodeSession(WhisperBackend& backend, std::unique_ptr<WhisperDecoderRows> rows);
  WhisperBackend& backend_;
  std::unique_ptr<WhisperDecoderRows> rows_;
  std::vector<std::unique_ptr<Task>> live_;  // in row order
  std::vector<float> logits_;                // the last step's, rows of the tasks live then (in order)
  int64_t next_id_ = 1;
};

// Decodes `requests` together in one session until all finish; results in request order.
std::vector<StatusOr<WhisperSequence>> whisper_decode(WhisperBackend& backend,
                                                      std::vector<WhisperDecodeRequest> requests);

// ------------------------------------------------------------------------------------ long-form segments

// One segment of a decoded window: times in seconds of the (possibly VAD-concatenated) input, its tokens
// (text and timestamps, as HF returns them).
struct WhisperSegmentCut {
  double start = 0.0, end = 0.0;
  std::vector<int32_t> tokens;
};
struct WhisperWindowSegments {
  std::vector<WhisperSegmentCut> segments;
  int64_t seek_advance = 0;  // mel frames the next window starts after this one's start
};
// HF WhisperGenerationMixin._retrieve_segment (transformers 5.17): a window decoded at mel frame `seek` (10 ms
// frames) holding `window_frames` frames of input, its generated `tokens` (no prompt, no <|endoftext|>) cut at
// every pair of consecutive timestamps; the last segment keeps its closing pair. The seek advances to the last
// pair's first timestamp, or by the whole window after a single final timestamp or when there is no pair (then
// one segment ending at the last timestamp, or at the window's end).
WhisperWindowSegments whisper_retrieve_segments(std::span<const int32_t> tokens, int32_t timestamp_begin, int64_t seek,
                                                int64_t window_frames);

}  // namespace mmserve::models
