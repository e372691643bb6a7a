// WhisperExecutor (see whisper_executor.h): loading, and the transcription loop.
//
// Every request is a Job, a small state machine: it needs a window -> its window is encoded (the windows of all
// jobs that need one now go through the encoder together) -> its decode requests join the shared
// WhisperDecodeSession (continuous batching: they enter at the next decoder step and leave when finished) ->
// the result is accepted or retried at the next temperature -> segments, seek, next window. transcribe() is
// transcribe_batch() of one.
//
// References: the window loop, seeking and segments follow HF transformers 5.17
// WhisperGenerationMixin.generate (long-form: _retrieve_segment, _get_input_segment, generate_with_fallback),
// whose output the fixtures hold; the fallback rules, the prompt context, skipping silent windows and the
// compression ratio (zlib over the text) follow openai-whisper's transcribe() / decode_with_fallback.
// Tests: tests/unit/engine/whisper_executor_test.cpp.
#include "engine/whisper_executor.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/json_config.h"
#include "frontends/audio/log_mel.h"
#include "frontends/text/whisper_languages.h"
#include "frontends/text/whisper_tokenizer.h"
#include "kernels/gemm/gemm.h"
#include "models/vad/silero_vad.h"
#include "models/whisper/whisper.h"
#include "models/whisper/whisper_decoding.h"
#if MMSERVE_HAS_CUDA
#include "models/whisper/whisper_cuda.h"
#include "models/whisper/whisper_cuda_tp.h"
#define MMSERVE_WHISPER_CUDA 1
#endif

namespace mmserve::engine {
namespace {

// openai-whisper utils.compression_ratio: len(text bytes) / len(zlib.compress(text bytes)) at zlib's default level.
float compression_ratio(const std::string& text) {
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::vector<Bytef> out(size);
  if (compress2(out.data(), &size, reinterpret_cast<const Bytef*>(text.data()), static_cast<uLong>(text.size()),
                Z_DEFAULT_COMPRESSION) != Z_OK ||
      size == 0) {
    return 0.0f;
  }
  return static_cast<float>(text.size()) / static_cast<float>(size);
}

// Speech spans kept by the VAD, in the concatenated audio and in the original.
struct SpanMap {
  struct Piece {
    int64_t concat_start, source_start, length;
  };
  std::vector<Piece> pieces;  // empty: identity
  // A time in the concatenated audio -> the original's. `is_end`: a time on a boundary belongs to the piece
  // before it (a segment's end), otherwise to the piece after (a segment's start).
  double map(double seconds, int sample_rate, bool is_end) const {
    if (pieces.empty()) return seconds;
    const double s = seconds * sample_rate;
    const Piece* best = &pieces.front();
    for (const Piece& p : pieces) {
      if (is_end ? s > static_cast<double>(p.concat_start) : s >= static_cast<double>(p.concat_start)) best = &p;
    }
    return (static_cast<double>(best->source_start) + (s - static_cast<double>(best->concat_start))) / sample_rate;
  }
};

}  // namespace

struct WhisperExecutor::Impl {
  ExecutorOptions options;
  WhisperOptions whisper;
  FamilyInfo info;
  std::shared_ptr<models::WhisperModel> cpu_model;
  std::unique_ptr<models::WhisperBackend> backend;
  models::WhisperGenerationConfig generation;
  std::unique_ptr<text::WhisperTokenizer> tokenizer;
  audio::WhisperFeatureConfig features;
  std::optional<audio::WhisperLogMel> log_mel;  // the 30 s one
  std::unique_ptr<models::SileroVad> vad;       // loaded on first use
  std::unique_ptr<models::WhisperDecodeSession> session;

  struct Job;
  Status start_job(Job& job);
  void window_ready(Job& job, const std::shared_ptr<const models::WhisperEncoded>& encoded, int64_t window);
  int64_t rows_needed(const Job& job) const;
  void admit(std::vector<Job*>& jobs, std::unordered_map<int64_t, Job*>& owner);
  void start_window(Job& job);
  void start_attempt(Job& job);
  void attempt_done(Job& job);
  void accept(Job& job, const models::WhisperSequence& result, float temperature, float ratio);
  std::vector<float> window_mel(const Job& job) const;
  void run(std::vector<Job*>& jobs);
};

struct WhisperExecutor::Impl::Job {
  const TranscribeOptions* options = nullptr;
  SegmentCallback on_segment;
  Status status;
  bool done = false;
  Transcript transcript;
  std::vector<float> audio;  // after the VAD
  SpanMap spans;
  // Features: the 30 s log-mel for short audio, HF's "longest" log-mel over all of it otherwise.
  std::vector<float> mel;
  int64_t mel_columns = 0, content_frames = 0;
  bool short_form = true;
  int64_t seek = 0, window_frames = 0;
  std::vector<int32_t> sot_sequence;
  bool need_language = false;
  std::vector<int32_t> context;  // initial prompt + accepted windows' tokens since the last reset
  // The current window.
  std::shared_ptr<const models::WhisperEncoded> encoded;
  int64_t window = 0;
  size_t temperature_index = 0;
  std::vector<int64_t> outstanding;  // session ids of the current attempt
  std::vector<models::WhisperSequence> samples;
  bool needs_window = true;
  bool waiting = false;  // the window is encoded; its next attempt waits for decoder rows (admit)
};

WhisperExecutor::WhisperExecutor() : impl_(std::make_unique<Impl>()) {}
WhisperExecutor::~WhisperExecutor() = default;

StatusOr<std::unique_ptr<WhisperExecutor>> WhisperExecutor::create(const std::string& model_dir,
                                                                   const ExecutorOptions& options,
                                                                   const WhisperOptions& whisper) {
  auto executor = std::unique_ptr<WhisperExecutor>(new WhisperExecutor());
  Impl& impl = *executor->impl_;
  impl.options = options;
  impl.whisper = whisper;
  if (!options.pipeline_devices.empty()) {
    return unimplemented("pipeline_parallel is implemented for CLIP only (Whisper takes tensor_parallel)");
  }
  const int64_t default_best_of = TranscribeOptions{}.best_of;
  if (whisper.decoder_rows != 0 && whisper.decoder_rows < default_best_of) {
    return invalid_argument("decoder_rows " + std::to_string(whisper.decoder_rows) + " must be 0 (the " +
                            "device's) or at least " + std::to_string(default_best_of) +
                            " (the default best_of: a default request must fit)");
  }
  ASSIGN_OR_RETURN(impl.generation, models::load_whisper_generation_config(model_dir));
  ASSIGN_OR_RETURN(impl.tokenizer, text::WhisperTokenizer::from_model_dir(model_dir));
  ASSIGN_OR_RETURN(impl.features, audio::load_whisper_feature_config(model_dir));
  ASSIGN_OR_RETURN(audio::WhisperLogMel log_mel, audio::WhisperLogMel::create(impl.features));
  impl.log_mel.emplace(std::move(log_mel));
  if (options.device.is_cpu()) {
    if (options.dtype && *options.dtype != DType::kF32) {
      return unimplemented(std::string("the CPU path computes in f32 (dtype ") + dtype_name(*options.dtype) +
                           " needs device cuda)");
    }
    if (whisper.cross_kv != "same") {
      return unimplemented("cross_kv " + whisper.cross_kv +
                           ": compressed cross-attention K/V is a CUDA feature (the CPU path keeps f32)");
    }
    if (options.threads > 0) kernels::set_cpu_threads(options.threads);
    ASSIGN_OR_RETURN(std::unique_ptr<models::WhisperModel> model, models::WhisperModel::load(model_dir));
    impl.cpu_model = std::move(model);
    impl.backend = models::make_cpu_whisper_backend(impl.cpu_model, whisper.decoder_rows);
  } else {
#if MMSERVE_WHISPER_CUDA
    models::WhisperCudaOptions cuda;
    cuda.device = options.device.index;
    cuda.dtype = options.dtype.value_or(DType::kF16);
    cuda.cuda_graphs = options.cuda_graphs;
    // Decoder rows: the batch, and at least what one request with the default options needs (best_of samples when
    // a window falls back to sampling), so that no default request is refused by a small max_batch_size.
    cuda.max_batch = whisper.decoder_rows > 0 ? whisper.decoder_rows
                                              : std::max<int64_t>(options.batch_size_max, TranscribeOptions{}.best_of);
    if (whisper.cross_kv == "fp8_e4m3") {
      cuda.cross_kv = models::WhisperCrossKv::kFp8E4M3;
    } else if (whisper.cross_kv == "int8") {
      cuda.cross_kv = models::WhisperCrossKv::kInt8;
    } else if (whisper.cross_kv != "same") {
      return invalid_argument("cross_kv '" + whisper.cross_kv + "' is not one of same, fp8_e4m3, int8");
    }
    if (!options.tp_devices.empty()) {
      // A tensor-parallel group (whisper_cuda_tp.h): the same backend interface over every rank.
      models::WhisperCudaTpOptions tp;
      tp.rank = cuda;
      tp.devices = options.tp_devices;
      ASSIGN_OR_RETURN(tp.collective, parse_tp_collective(options.tp_collective));
      ASSIGN_OR_RETURN(std::unique_ptr<models::WhisperCudaTpModel> model,
                       models::WhisperCudaTpModel::load(model_dir, tp));
      impl.backend = std::move(model);
    } else {
      ASSIGN_OR_RETURN(std::unique_ptr<models::WhisperCudaModel> model,
                       models::WhisperCudaModel::load(model_dir, cuda));
      impl.backend = std::move(model);
    }
#else
    return unimplemented(
        "device " + options.device.to_string() +
        ": this build has no CUDA Whisper backend (models/whisper/whisper_cuda.h with -DMMSERVE_CUDA=ON)");
#endif
  }
  const models::WhisperConfig& config = impl.backend->config();
  if (config.num_mel_bins != impl.features.feature_size) {
    return invalid_argument(model_dir + ": preprocessor_config.json feature_size " +
                            std::to_string(impl.features.feature_size) + " != config.json num_mel_bins " +
                            std::to_string(config.num_mel_bins));
  }
  if (impl.tokenizer->vocab_size() > config.vocab_size) {
    return invalid_argument(model_dir + ": the tokenizer's " + std::to_string(impl.tokenizer->vocab_size()) +
                            " ids exceed the model's vocab_size " + std::to_string(config.vocab_size));
  }
  ASSIGN_OR_RETURN(impl.session, models::WhisperDecodeSession::create(*impl.backend));
  impl.info.platform = "mmserve_whisper";
  impl.info.slot_names = {"audio", ""};
  impl.info.counts_audio = true;
  impl.info.inputs = {{"audio", "BYTES", {1}}};
  impl.info.outputs = {{"text", "BYTES", {1}}, {"segments", "BYTES", {1}}, {"language", "BYTES", {1}}};
  return executor;
}

const FamilyInfo& WhisperExecutor::info() const {
  return impl_->info;
}

Device WhisperExecutor::device() const {
  return impl_->backend->device();
}
DType WhisperExecutor::dtype() const {
  return impl_->backend->dtype();
}
int WhisperExecutor::sample_rate() const {
  return impl_->features.sampling_rate;
}
int64_t WhisperExecutor::memory_bytes() const {
  return impl_->backend->memory_bytes();
}

std::string WhisperExecutor::describe() const {
  const models::WhisperConfig& c = impl_->backend->config();
  return device().to_string() + " " + dtype_name(dtype()) + ": whisper d_model " + std::to_string(c.d_model) + ", " +
         std::to_string(c.encoder_layers) + "+" + std::to_string(c.decoder_layers) + " layers, " +
         std::to_string(c.num_mel_bins) + " mel bins, " + std::to_string(impl_->tokenizer->num_languages()) +
         " languages, " + std::to_string((memory_bytes() + (1 << 19)) >> 20) + " MiB" +
         (device().is_cpu() ? "" : ", cross K/V " + impl_->whisper.cross_kv);
}

std::vector<std::string> WhisperExecutor::languages() const {
  std::vector<std::string> out;
  const auto all = text::whisper_languages();
  for (int i = 0; i < impl_->tokenizer->num_languages() && i < static_cast<int>(all.size()); ++i) {
    out.emplace_back(all[i].code);
  }
  if (out.empty()) out.emplace_back("en");  // an English-only model
  return out;
}

// ------------------------------------------------------------------------------------------------ jobs

// Options, VAD, features, the SOT sequence. Errors are the request's (kInvalidArgument for bad options).
Status WhisperExecutor::Impl::start_job(Job& job) {
  const TranscribeOptions& o = *job.options;
  if (o.beam_size < 1) return invalid_argument("beam_size must be >= 1");
  if (o.best_of < 1) return invalid_argument("best_of must be >= 1");
  if (o.temperatures.empty()) return invalid_argument("temperatures must not be empty");
  for (float t : o.temperatures) {
    if (!std::isfinite(t) || t < 0.0f) return invalid_argument("temperatures must be finite and >= 0");
  }
  if (o.max_new_tokens < 0) return invalid_argument("max_new_tokens must be >= 0");
  // An attempt's rows are decoded together (admit): more than the model holds could never start.
  const int64_t rows = backend->max_rows();
  const bool sampling = std::any_of(o.temperatures.begin(), o.temperatures.end(), [](float t) { return t > 0.0f; });
  if (o.beam_size > rows || (sampling && o.best_of > rows)) {
    const bool beams = o.beam_size > rows;
    return invalid_argument(std::string(beams ? "beam_size " : "best_of ") +
                            std::to_string(beams ? o.beam_size : o.best_of) + " needs as many decoder rows at once; " +
                            "this model holds " + std::to_string(rows) + " (decoder_rows, or max_batch_size)");
  }
  if (!std::isfinite(o.compression_ratio_threshold) && !std::isnan(o.compression_ratio_threshold)) {
    return invalid_argument("compression_ratio_threshold must be finite");
  }
  const text::WhisperTokenizer& tok = *tokenizer;
  const bool multilingual = tok.num_languages() > 0;
  std::string language = o.language;
  if (!language.empty()) {
    auto code = text::whisper_language_code(language);
    if (!code) return invalid_argument("unknown language \"" + language + "\"");
    language = std::string(*code);
    if (!multilingual && language != "en") {
      return invalid_argument("this model is English-only: language \"" + o.language + "\" is not available");
    }
    if (multilingual) RETURN_IF_ERROR(tok.language_token(language).status());
  }
  if (!multilingual && o.task == WhisperTask::kTranslate) {
    return invalid_argument("this model is English-only: it cannot translate");
  }
  for (float s : job.audio) {
    if (!std::isfinite(s)) return invalid_argument("audio holds a non-finite sample");
  }
  if (job.audio.empty()) return invalid_argument("empty audio");
  job.transcript.duration = static_cast<double>(job.audio.size()) / features.sampling_rate;

  if (o.vad) {
    if (!vad) {
      ASSIGN_OR_RETURN(vad, models::SileroVad::load_default());
    }
    ASSIGN_OR_RETURN(std::vector<models::SpeechSpan> spans, vad->speech_spans(job.audio));
    std::vector<float> kept;
    for (const models::SpeechSpan& s : spans) {
      job.spans.pieces.push_back({static_cast<int64_t>(kept.size()), s.start, s.end - s.start});
      kept.insert(kept.end(), job.audio.begin() + s.start, job.audio.begin() + s.end);
    }
    job.transcript.vad_skipped_seconds = static_cast<double>(job.audio.size() - kept.size()) / features.sampling_rate;
    job.audio = std::move(kept);
    if (job.audio.empty()) {  // no speech at all
      job.transcript.language = language.empty() ? "en" : language;
      job.done = true;
      return ok_status();
    }
  }

  const int64_t samples = static_cast<int64_t>(job.audio.size());
  const int64_t hop = features.hop_length;
  if (samples <= features.n_samples()) {
    // HF short-form: WhisperFeatureExtractor's 30 s features (padding included) are the first window.
    job.short_form = true;
    job.mel = log_mel->compute(job.audio);
    job.mel_columns = log_mel->n_frames();
    job.content_frames = std::max<int64_t>((samples + hop - 1) / hop, 1);
  } else {
    // HF long-form: features over the whole audio (padding="longest": one log-mel, one max for the clamp),
    // frames = samples / hop. Our log-mel takes whole seconds, so it runs over the audio zero-padded to the next
    // second and the extra frames are dropped; only the last frame's STFT (reflect padding vs zeros) can differ.
    job.short_form = false;
    audio::WhisperFeatureConfig config = features;
    config.chunk_length = static_cast<int>((samples + features.sampling_rate - 1) / features.sampling_rate);
    ASSIGN_OR_RETURN(audio::WhisperLogMel long_mel, audio::WhisperLogMel::create(config));
    job.mel = long_mel.compute(job.audio);
    job.mel_columns = long_mel.n_frames();
    job.content_frames = std::min(samples / hop, job.mel_columns);
  }
  job.need_language = multilingual && language.empty();
  job.transcript.language = language.empty() ? (multilingual ? "" : "en") : language;
  if (!o.initial_prompt.empty()) {
    // openai transcribe(): tokenizer.encode(" " + initial_prompt.strip())
    std::string prompt = o.initial_prompt;
    const auto first = prompt.find_first_not_of(" \t\r\n");
    const auto last = prompt.find_last_not_of(" \t\r\n");
    prompt = first == std::string::npos ? "" : prompt.substr(first, last - first + 1);
    ASSIGN_OR_RETURN(job.context, tok.encode(" " + prompt));
  }
  return ok_status();
}

// The window at job.seek, [num_mel_bins, 3000]: HF _get_input_segment (the frames from seek, zero-padded), except
// that a short input's first window is its 30 s features as they are (HF's short-form call).
std::vector<float> WhisperExecutor::Impl::window_mel(const Job& job) const {
  const int64_t mels = features.feature_size, frames = features.n_frames();
  if (job.short_form && job.seek == 0) return job.mel;
  std::vector<float> out(static_cast<size_t>(mels * frames), 0.0f);
  for (int64_t m = 0; m < mels; ++m) {
    std::copy_n(job.mel.data() + m * job.mel_columns + job.seek, job.window_frames, out.data() + m * frames);
  }
  return out;
}

void WhisperExecutor::Impl::window_ready(Job& job, const std::shared_ptr<const models::WhisperEncoded>& encoded,
                                         int64_t window) {
  job.encoded = encoded;
  job.window = window;
  job.needs_window = false;
  job.temperature_index = 0;
  job.waiting = true;
}

// The decoder rows an attempt holds at its widest: best_of samples when sampling, else the beams.
int64_t WhisperExecutor::Impl::rows_needed(const Job& job) const {
  const TranscribeOptions& o = *job.options;
  return o.temperatures[job.temperature_index] > 0.0f ? o.best_of : o.beam_size;
}

// Starts the attempts that wait, in job order, while the rows they need are free: a GPU model holds a fixed number
// of decoder rows (backend->max_rows()), so a batch of requests, each with best_of samples or beams, may need more
// at once than it has; the rest wait for rows to free up instead of failing. First come first served: a job that
// does not fit holds back the ones after it (a wide request is not starved by narrow ones).
void WhisperExecutor::Impl::admit(std::vector<Job*>& jobs, std::unordered_map<int64_t, Job*>& owner) {
  const int64_t limit = backend->max_rows();
  int64_t reserved = 0;
  for (const Job* j : jobs) {
    // A job that failed may still have samples draining: their rows are taken until they finish.
    if (!j->outstanding.empty()) reserved += rows_needed(*j);
  }
  for (Job* j : jobs) {
    if (j->done || !j->waiting) continue;
    const int64_t need = rows_needed(*j);  // <= limit: start_job checked it
    if (reserved + need > limit) break;
    j->waiting = false;
    start_window(*j);
    if (j->done) continue;
    reserved += need;
    for (int64_t id : j->outstanding) owner[id] = j;
  }
}

// The language (first window of a multilingual model without one: one row, released at once), the SOT sequence,
// then the attempt at temperatures[temperature_index].
void WhisperExecutor::Impl::start_window(Job& job) {
  const std::shared_ptr<const models::WhisperEncoded>& encoded = job.encoded;
  const int64_t window = job.window;
  if (job.need_language) {
    // openai transcribe() / HF generate: the language of the first window decides.
    job.need_language = false;
    auto guess = session->detect_language(encoded, {window}, tokenizer->sot(), tokenizer->language_ids());
    if (!guess.ok()) {
      job.status = guess.status();
      job.done = true;
      return;
    }
    const auto& ids = tokenizer->language_ids();
    const int64_t index = std::find(ids.begin(), ids.end(), (*guess)[0].token) - ids.begin();
    job.transcript.language = std::string(text::whisper_languages()[index].code);
  }
  if (job.sot_sequence.empty()) {
    const bool multilingual = tokenizer->num_languages() > 0;
    auto sot = tokenizer->sot_sequence(
        multilingual ? job.transcript.language : "",
        multilingual ? std::optional<text::WhisperTask>(job.options->task == WhisperTask::kTranslate
                                                            ? text::WhisperTask::kTranslate
                                                            : text::WhisperTask::kTranscribe)
                     : std::nullopt,
        job.options->timestamps);
    if (!sot.ok()) {
      job.status = sot.status();
      job.done = true;
      return;
    }
    job.sot_sequence = std::move(*sot);
  }
  start_attempt(job);
}

// One decoding of the current window at temperatures[temperature_index]: beam search or greedy at 0, best_of
// samples above (openai DecodingOptions: best_of applies when sampling, beam_size when not).
void WhisperExecutor::Impl::start_attempt(Job& job) {
  const TranscribeOptions& o = *job.options;
  const models::WhisperConfig& config = backend->config();
  const float temperature = o.temperatures[job.temperature_index];
  models::WhisperDecodeRequest request;
  request.encoded = job.encoded;
  request.window = job.window;
  // openai: [<|startofprev|>] + the last n_ctx // 2 - 1 context tokens, then the SOT sequence.
  const int64_t context_max = config.max_target_positions / 2 - 1;
  if (!job.context.empty()) {
    request.prompt.push_back(tokenizer->sot_prev());
    const int64_t from = std::max<int64_t>(0, static_cast<int64_t>(job.context.size()) - context_max);
    request.prompt.insert(request.prompt.end(), job.context.begin() + from, job.context.end());
  }
  request.sot_position = static_cast<int64_t>(request.prompt.size());
  request.prompt.insert(request.prompt.end(), job.sot_sequence.begin(), job.sot_sequence.end());
  if (std::isnan(o.no_speech_threshold)) request.sot_position = -1;
  request.no_speech_token = tokenizer->no_speech();
  request.rules.ids = {tokenizer->eot(), tokenizer->no_timestamps(), tokenizer->timestamp_begin(), config.vocab_size};
  request.rules.suppress_tokens = generation.suppress_tokens;
  request.rules.begin_suppress_tokens = generation.begin_suppress_tokens;
  request.rules.timestamps = o.timestamps;
  request.rules.max_initial_timestamp_index = generation.max_initial_timestamp_index;
  const int64_t room = config.max_target_positions + 1 - static_cast<int64_t>(request.prompt.size());
  request.search.max_new_tokens = std::min(o.max_new_tokens > 0 ? o.max_new_tokens : context_max, room);
  request.search.temperature = temperature;
  const int copies = temperature > 0.0f ? o.best_of : 1;
  request.search.num_beams = temperature > 0.0f ? 1 : o.beam_size;
  job.outstanding.clear();
  job.samples.clear();
  for (int k = 0; k < copies; ++k) {
    models::WhisperDecodeRequest r = request;
    r.search.seed = o.seed * 1000003ULL + static_cast<uint64_t>(job.seek) * 101ULL + static_cast<uint64_t>(k) +
                    static_cast<uint64_t>(job.temperature_index) * 7919ULL;
    StatusOr<int64_t> id = session->add(std::move(r));
    if (!id.ok()) {
      job.status = id.status();
      job.done = true;
      return;
    }
    job.outstanding.push_back(*id);
  }
}

// openai decode_with_fallback: the best sample (sum_logprob / length), then the fallback checks.
void WhisperExecutor::Impl::attempt_done(Job& job) {
  const TranscribeOptions& o = *job.options;
  const float temperature = o.temperatures[job.temperature_index];
  size_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < job.samples.size(); ++i) {
    const double score = job.samples[i].sum_logprob / std::max<size_t>(job.samples[i].tokens.size(), 1);
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  models::WhisperSequence result = job.samples[best];
  auto text = tokenizer->decode(result.tokens, /*skip_special=*/true);
  const float ratio = text.ok() ? compression_ratio(*text) : 0.0f;
  bool needs_fallback = false;
  if (o.compression_ratio_threshold > 0.0f && ratio > o.compression_ratio_threshold) needs_fallback = true;
  if (!std::isnan(o.logprob_threshold) && result.avg_logprob < o.logprob_threshold) needs_fallback = true;
  if (!std::isnan(o.no_speech_threshold) && result.no_speech_prob > o.no_speech_threshold) needs_fallback = false;
  if (needs_fallback && job.temperature_index + 1 < o.temperatures.size()) {
    ++job.temperature_index;
    job.waiting = true;  // admit() starts it when its rows are free
    return;
  }
  // openai transcribe(): a window that looks silent is skipped.
  bool skip = !std::isnan(o.no_speech_threshold) && result.no_speech_prob > o.no_speech_threshold;
  if (skip && !std::isnan(o.logprob_threshold) && result.avg_logprob > o.logprob_threshold) skip = false;
  if (skip) {
    job.seek += job.window_frames;
  } else {
    accept(job, result, temperature, ratio);
    if (job.done) return;
  }
  job.encoded.reset();
  job.needs_window = true;
  if (job.seek >= job.content_frames) job.done = true;
}

// The window's segments (HF _retrieve_segment, in models::whisper_retrieve_segments), the callback, the context.
void WhisperExecutor::Impl::accept(Job& job, const models::WhisperSequence& result, float temperature, float ratio) {
  const TranscribeOptions& o = *job.options;
  const std::vector<int32_t>& seq = result.tokens;
  const models::WhisperWindowSegments cut =
      models::whisper_retrieve_segments(seq, tokenizer->timestamp_begin(), job.seek, job.window_frames);
  int64_t segment_offset = cut.seek_advance;
  const int64_t window_seek = job.seek;
  // The timestamp rules make the last pair start after <|0.00|>, so the seek always moves; this guards the loop
  // against a backend that broke them.
  if (segment_offset < 1) segment_offset = job.window_frames;
  job.seek += segment_offset;
  for (const models::WhisperSegmentCut& p : cut.segments) {
    TranscriptSegment segment;
    segment.id = static_cast<int64_t>(job.transcript.segments.size());
    segment.seek = window_seek;
    segment.start = job.spans.map(p.start, features.sampling_rate, false);
    segment.end = job.spans.map(p.end, features.sampling_rate, true);
    auto text = tokenizer->decode(p.tokens, /*skip_special=*/true);
    if (!text.ok()) {
      job.status = text.status();
      job.done = true;
      return;
    }
    segment.text = *text;
    segment.tokens = p.tokens;
    segment.temperature = temperature;
    segment.avg_logprob = static_cast<float>(result.avg_logprob);
    segment.compression_ratio = ratio;
    segment.no_speech_prob = std::isnan(result.no_speech_prob) ? 0.0f : result.no_speech_prob;
    job.transcript.text += segment.text;
    job.transcript.segments.push_back(segment);
    if (job.on_segment && !job.on_segment(job.transcript.segments.back())) {
      job.status = Status(StatusCode::kCancelled, "transcription cancelled");
      job.done = true;
      return;
    }
  }
  // openai transcribe(): the window's tokens become context, unless conditioning is off or the window needed a
  // high temperature (then the context restarts).
  if (!o.condition_on_previous_text || temperature > 0.5f) {
    job.context.clear();
  } else {
    job.context.insert(job.context.end(), seq.begin(), seq.end());
  }
}

// The loop: encode the windows that are needed (together), let their decodes join the session, step it, route
// the finished decodes.
void WhisperExecutor::Impl::run(std::vector<Job*>& jobs) {
  const int64_t mels = features.feature_size, frames = features.n_frames();
  std::unordered_map<int64_t, Job*> owner;
  std::vector<std::pair<int64_t, StatusOr<models::WhisperSequence>>> finished;
  while (true) {
    std::vector<Job*> need;
    bool any_open = false;
    for (Job* j : jobs) {
      if (j->done) continue;
      any_open = true;
      if (j->needs_window) need.push_back(j);
    }
    if (!any_open) break;
    if (!need.empty()) {
      std::vector<float> batch(static_cast<size_t>(need.size() * mels * frames));
      for (size_t i = 0; i < need.size(); ++i) {
        Job& j = *need[i];
        j.window_frames = std::min(frames, j.content_frames - j.seek);
        std::vector<float> w = window_mel(j);
        std::copy(w.begin(), w.end(), batch.begin() + static_cast<int64_t>(i) * mels * frames);
      }
      Tensor mel(batch.data(), DType::kF32, {static_cast<int64_t>(need.size()), mels, frames});
      auto encoded = backend->encode(mel);
      for (size_t i = 0; i < need.size(); ++i) {
        Job& j = *need[i];
        if (!encoded.ok()) {
          j.status = encoded.status();
          j.done = true;
          continue;
        }
        window_ready(j, *encoded, static_cast<int64_t>(i));
      }
    }
    admit(jobs, owner);
    if (session->idle()) {
      if (need.empty()) {  // open jobs with nothing to wait for: a broken invariant, reported, not a hang
        for (Job* j : jobs) {
          if (!j->done) {
            j->status = internal_error("transcription stalled");
            j->done = true;
          }
        }
      }
      continue;  // every job finished or failed while joining
    }
    finished.clear();
    session->advance(finished);
    for (auto& [id, result] : finished) {
      Job& j = *owner[id];
      owner.erase(id);
      j.outstanding.erase(std::find(j.outstanding.begin(), j.outstanding.end(), id));
      if (j.done) continue;  // failed already; its other samples drain
      if (!result.ok()) {
        j.status = result.status();
        j.done = true;
        continue;
      }
      j.samples.push_back(std::move(*result));
      if (j.outstanding.empty()) attempt_done(j);  // a fallback attempt waits for admit()
    }
  }
  // A job that failed with samples still running: let them finish so the session is clean for the next call.
  while (!session->idle()) {
    finished.clear();
    session->advance(finished);
  }
}

StatusOr<Transcript> WhisperExecutor::transcribe(const std::vector<float>& audio, const TranscribeOptions& options,
                                                 const SegmentCallback& on_segment) {
  Impl::Job job;
  job.options = &options;
  job.on_segment = on_segment;
  job.audio = audio;
  Status s = impl_->start_job(job);
  if (!s.ok()) return s;
  std::vector<Impl::Job*> jobs = {&job};
  impl_->run(jobs);
  if (!job.status.ok()) return job.status;
  return std::move(job.transcript);
}

std::vector<StatusOr<Transcript>> WhisperExecutor::transcribe_batch(
    const std::vector<const std::vector<float>*>& audios, const std::vector<TranscribeOptions>& options) {
  std::vector<StatusOr<Transcript>> out;
  if (audios.size() != options.size()) {
    for (size_t i = 0; i < audios.size(); ++i) {
      out.emplace_back(invalid_argument("transcribe_batch needs one TranscribeOptions per audio"));
    }
    return out;
  }
  std::vector<Impl::Job> jobs(audios.size());
  std::vector<Impl::Job*> run;
  for (size_t i = 0; i < audios.size(); ++i) {
    jobs[i].options = &options[i];
    if (audios[i] == nullptr) {
      jobs[i].status = invalid_argument("no audio");
      jobs[i].done = true;
      continue;
    }
    jobs[i].audio = *audios[i];
    jobs[i].status = impl_->start_job(jobs[i]);
    if (!jobs[i].status.ok()) jobs[i].done = true;
    run.push_back(&jobs[i]);
  }
  impl_->run(run);
  for (Impl::Job& j : jobs) {
    if (j.status.ok()) {
      out.emplace_back(std::move(j.transcript));
    } else {
      out.emplace_back(j.status);
    }
  }
  return out;
}

}  // namespace mmserve::engine
