// Whisper's logits processors and search loops over WhisperDecoderRows (whisper_decoding.h). Each piece names
// the HF transformers 5.17 function it follows; the goldens in tests/fixtures/whisper are that code's output.
// Tests: tests/unit/models/whisper_decoding_test.cpp, tests/unit/engine/whisper_executor_test.cpp.
#include "models/whisper/whisper_decoding.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>

#include "core/json_config.h"
#include "kernels/softmax/softmax.h"

namespace mmserve::models {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

StatusOr<std::vector<int32_t>> int_list(const nlohmann::json& json, const std::string& key, const std::string& label) {
  std::vector<int32_t> out;
  if (!json.contains(key) || json[key].is_null()) return out;
  if (!json[key].is_array()) return invalid_argument(label + ": \"" + key + "\" must be a list of token ids");
  for (const auto& v : json[key]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return invalid_argument(label + ": \"" + key + "\" holds a value that is not a token id");
    }
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return out;
}

StatusOr<std::unordered_map<std::string, int32_t>> id_map(const nlohmann::json& json, const std::string& key,
                                                          const std::string& label) {
  std::unordered_map<std::string, int32_t> out;
  if (!json.contains(key) || json[key].is_null()) return out;
  if (!json[key].is_object()) return invalid_argument(label + ": \"" + key + "\" must be an object of token ids");
  for (const auto& [name, v] : json[key].items()) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return invalid_argument(label + ": \"" + key + "\"[\"" + name + "\"] is not a token id");
    }
    out[name] = static_cast<int32_t>(v.get<int64_t>());
  }
  return out;
}

// First index of the maximum (torch.argmax on CPU returns the first one).
int64_t argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

}  // namespace

StatusOr<WhisperGenerationConfig> load_whisper_generation_config(const std::string& model_dir) {
  WhisperGenerationConfig config;
  const std::string path = model_dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return config;
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(path));
  const std::string label = "generation_config.json";
  ASSIGN_OR_RETURN(JsonObject obj, JsonObject::wrap(json, label));
  ASSIGN_OR_RETURN(config.suppress_tokens, int_list(json, "suppress_tokens", label));
  ASSIGN_OR_RETURN(config.begin_suppress_tokens, int_list(json, "begin_suppress_tokens", label));
  ASSIGN_OR_RETURN(int64_t start, obj.get_int_or("decoder_start_token_id", -1));
  ASSIGN_OR_RETURN(int64_t eos, obj.get_int_or("eos_token_id", -1));
  ASSIGN_OR_RETURN(int64_t no_ts, obj.get_int_or("no_timestamps_token_id", -1));
  ASSIGN_OR_RETURN(int64_t prev, obj.get_int_or("prev_sot_token_id", -1));
  ASSIGN_OR_RETURN(config.max_initial_timestamp_index, obj.get_int_or("max_initial_timestamp_index", -1));
  ASSIGN_OR_RETURN(config.max_length, obj.get_int_or("max_length", 448));
  ASSIGN_OR_RETURN(config.is_multilingual, obj.get_bool_or("is_multilingual", true));
  ASSIGN_OR_RETURN(config.lang_to_id, id_map(json, "lang_to_id", label));
  ASSIGN_OR_RETURN(config.task_to_id, id_map(json, "task_to_id", label));
  config.decoder_start_token_id = static_cast<int32_t>(start);
  config.eos_token_id = static_cast<int32_t>(eos);
  config.no_timestamps_token_id = static_cast<int32_t>(no_ts);
  config.prev_sot_token_id = static_cast<int32_t>(prev);
  return config;
}

// SuppressTokensLogitsProcessor / SuppressTokensAtBeginLogitsProcessor: scores[tokens] = -inf (ids past the
// row are ignored, as a vocabulary smaller than the config's list would be).
void suppress_whisper_tokens(std::span<const int32_t> tokens, std::span<float> scores) {
  for (int32_t t : tokens) {
    if (t >= 0 && static_cast<size_t>(t) < scores.size()) scores[t] = kNegInf;
  }
}

// torch's float32 log_softmax: row - logsumexp(row), with the vectorised exp: this runs per row and step on the
// host side of every GPU decode step (a 51,866 row: ~39 us, against ~181 us with a scalar double exp; softmax_bench.cpp).
void log_softmax_inplace(std::span<float> row) {
  const float log_sum = kernels::log_sum_exp(row.data(), static_cast<int64_t>(row.size()));
  if (!std::isfinite(log_sum)) return;  // every entry -inf: nothing to normalise
  for (float& v : row) v -= log_sum;
}

// WhisperTimeStampLogitsProcessor.__call__ (logits_process.py), one row; `generated` is input_ids[k,
// begin_index:]. timestamp_begin is no_timestamps + 1 there; the tokenizer gives the same id.
void apply_whisper_timestamp_rules(const WhisperLogitRules& rules, std::span<const int32_t> generated,
                                   std::span<float> scores) {
  const int64_t vocab = static_cast<int64_t>(scores.size());
  const int32_t ts_begin = rules.ids.timestamp_begin, eot = rules.ids.eot;
  auto mask = [&](int64_t from, int64_t to) {  // [from, to) clipped to the row
    for (int64_t i = std::max<int64_t>(from, 0); i < std::min<int64_t>(to, vocab); ++i) scores[i] = kNegInf;
  };
  // <|notimestamps|> is handled by the prompt.
  if (rules.ids.no_timestamps >= 0 && rules.ids.no_timestamps < vocab) scores[rules.ids.no_timestamps] = kNegInf;

  // Timestamps come in pairs, except directly before <|endoftext|>.
  const size_t n = generated.size();
  const bool last_was_timestamp = n >= 1 && generated[n - 1] >= ts_begin;
  const bool penultimate_was_timestamp = n < 2 || generated[n - 2] >= ts_begin;
  if (last_was_timestamp) {
    if (penultimate_was_timestamp) {
      mask(ts_begin, vocab);  // has to be text
    } else {
      mask(0, eot);  // cannot be text (HF and openai leave the ids between eot and the timestamps open)
    }
  }
  // Timestamps do not decrease; after a pair, not the same one again (openai/whisper PR 914).
  int32_t last_timestamp = -1;
  for (int32_t t : generated) {
    if (t >= ts_begin) last_timestamp = t;
  }
  if (last_timestamp >= 0) {
    const int32_t limit = (last_was_timestamp && !penultimate_was_timestamp) ? last_timestamp : last_timestamp + 1;
    mask(ts_begin, limit);
  }
  // The first generated token is a timestamp, at most max_initial_timestamp_index.
  if (n == 0) {
    mask(0, ts_begin);
    if (rules.max_initial_timestamp_index >= 0) mask(ts_begin + rules.max_initial_timestamp_index + 1, vocab);
  }
  // When the timestamps' total probability beats every text token, a timestamp it is. HF compares
  // logsumexp(log_softmax(scores)[ts:]) with max(log_softmax(scores)[:ts]); the normaliser is common to both
  // sides, so the same comparison on the raw scores needs no pass over the whole row.
  if (ts_begin < vocab && ts_begin > 0) {
    const float timestamp_score = kernels::log_sum_exp(scores.data() + ts_begin, vocab - ts_begin);
    const float max_text_score = *std::max_element(scores.begin(), scores.begin() + ts_begin);
    if (timestamp_score > max_text_score) mask(0, ts_begin);
  }
}

// HF's order (WhisperGenerationMixin._retrieve_logit_processors prepends each, so it runs begin-suppress,
// suppress, timestamps).
void apply_whisper_logit_rules(const WhisperLogitRules& rules, std::span<const int32_t> generated,
                               std::span<float> scores) {
  if (generated.empty()) suppress_whisper_tokens(rules.begin_suppress_tokens, scores);
  suppress_whisper_tokens(rules.suppress_tokens, scores);
  if (rules.timestamps) apply_whisper_timestamp_rules(rules, generated, scores);
}

// ------------------------------------------------------------------------------------------------ search
namespace {

// One request's search state. The rows of all requests sit in one WhisperDecoderRows, request after request.
struct SearchState {
  WhisperDecodeRequest request;
  int64_t vocab = 0;
  bool done = false;
  Status error;
  WhisperSequence result;
  std::mt19937_64 rng;
  // Greedy / sampling: one row.
  std::vector<int32_t> tokens;
  double sum_logprob = 0.0;
  // Beam search (HF _beam_search, transformers 5.17 generation/utils.py): the running beams and the finished
  // hypotheses, num_beams each, sorted best first.
  struct Beam {
    std::vector<int32_t> tokens;
    float score = 0.0f;    // running: summed processed log-probs; finished: normalised by length
    double raw_sum = 0.0;  // summed log-probs (no length penalty) for avg_logprob
    bool finished = false;
  };
  std::vector<Beam> running, finished;
  bool early_stop_unsatisfied = true;

  int64_t rows() const { return done ? 0 : static_cast<int64_t>(running.empty() ? 1 : running.size()); }
};

void finish_greedy(SearchState& t, bool ended_with_eot) {
  t.done = true;
  t.result.tokens = t.tokens;
  t.result.ended_with_eot = ended_with_eot;
  t.result.sum_logprob = t.sum_logprob;
  const size_t counted = t.tokens.size() + (ended_with_eot ? 1 : 0);
  t.result.avg_logprob = counted == 0 ? 0.0 : t.sum_logprob / static_cast<double>(counted);
}

// HF _sample: scores = processors(raw logits); argmax, or with a temperature TemperatureLogitsWarper then
// multinomial. The log-prob recorded is openai's (log_softmax of the processed logits before the temperature).
void advance_greedy(SearchState& t, std::span<const float> logits, std::vector<int64_t>& src, int64_t row,
                    std::vector<int32_t>& next) {
  std::vector<float> scores(logits.begin(), logits.end());
  apply_whisper_logit_rules(t.request.rules, t.tokens, scores);
  int64_t token = 0;
  if (t.request.search.temperature > 0.0f) {
    std::vector<double> probs(scores.size());
    const float max = *std::max_element(scores.begin(), scores.end());
    for (size_t i = 0; i < scores.size(); ++i) {
      probs[i] = std::exp((static_cast<double>(scores[i]) - max) / t.request.search.temperature);
    }
    std::discrete_distribution<int64_t> dist(probs.begin(), probs.end());
    token = dist(t.rng);
  } else {
    token = argmax(scores);
  }
  // log_softmax(scores)[token], without writing the whole row.
  t.sum_logprob += scores[static_cast<size_t>(token)] -
                   kernels::log_sum_exp(scores.data(), static_cast<int64_t>(scores.size()));
  const int32_t eot = t.request.rules.ids.eot;
  if (token == eot) return finish_greedy(t, true);
  t.tokens.push_back(static_cast<int32_t>(token));
  if (static_cast<int64_t>(t.tokens.size()) >= t.request.search.max_new_tokens) return finish_greedy(t, false);
  src.push_back(row);
  next.push_back(static_cast<int32_t>(token));
}

void finish_beam(SearchState& t) {
  t.done = true;
  if (t.finished.empty() || !t.finished[0].finished) {
    t.error = internal_error("beam search ended without a finished hypothesis");
    return;
  }
  const SearchState::Beam& best = t.finished[0];
  t.result.tokens = best.tokens;
  t.result.ended_with_eot = !best.tokens.empty() && best.tokens.back() == t.request.rules.ids.eot;
  if (t.result.ended_with_eot) t.result.tokens.pop_back();
  t.result.sum_logprob = best.raw_sum;
  t.result.avg_logprob = best.raw_sum / static_cast<double>(std::max<size_t>(best.tokens.size(), 1));
}

// One iteration of HF's _beam_search (b. to g.): log_softmax, processors, + running scores, top 2*num_beams
// candidates, the running beams for the next step (finished candidates masked by -1e9), the finished
// hypotheses updated with the top num_beams candidates that hit a stopping criterion (eos, or max length),
// normalised by (generated length) ** length_penalty, then the early-stop heuristic (early_stopping=False).
void advance_beams(SearchState& t, const float* logits, int64_t first_row, std::vector<int64_t>& src,
                   std::vector<int32_t>& next) {
  const int num_beams = t.request.search.num_beams;
  const int64_t vocab = t.vocab;
  const int32_t eot = t.request.rules.ids.eot;
  const int64_t cur = t.running.empty() ? 0 : static_cast<int64_t>(t.running[0].tokens.size());  // generated so far
  const int64_t live = static_cast<int64_t>(t.running.size());
  struct Candidate {
    float value;
    int64_t flat;  // beam * vocab + token, HF's flattened index
    float logprob;
  };
  const int keep = 2 * num_beams;  // beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams
  std::vector<Candidate> candidates;
  std::vector<float> lp(static_cast<size_t>(vocab));
  for (int64_t b = 0; b < live; ++b) {
    std::copy_n(logits + b * vocab, vocab, lp.begin());
    log_softmax_inplace(lp);
    apply_whisper_logit_rules(t.request.rules, t.running[b].tokens, lp);
    // The top `keep` of this beam suffice for the global top `keep`.
    std::vector<int64_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(keep, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int64_t a, int64_t c) { return lp[a] > lp[c] || (lp[a] == lp[c] && a < c); });
    for (int64_t i = 0; i < k; ++i) {
      candidates.push_back({lp[idx[i]] + t.running[b].score, b * vocab + idx[i], lp[idx[i]]});
    }
  }
  // Beams that do not exist yet (the first step: HF starts beams 1.. at -1e9) never reach the top candidates.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& c) {
    return a.value > c.value || (a.value == c.value && a.flat < c.flat);
  });
  if (static_cast<int>(candidates.size()) > keep) candidates.resize(keep);
  const bool at_max_length = cur + 1 >= t.request.search.max_new_tokens;
  auto hits = [&](const Candidate& c) { return at_max_length || c.flat % vocab == eot; };
  auto make = [&](const Candidate& c) {
    const SearchState::Beam& from = t.running[c.flat / vocab];
    SearchState::Beam beam{from.tokens, c.value, from.raw_sum + c.logprob, false};
    beam.tokens.push_back(static_cast<int32_t>(c.flat % vocab));
    return beam;
  };

  // e. The next running beams: the best num_beams candidates that did not finish.
  std::vector<SearchState::Beam> running;
  std::vector<int64_t> running_src;
  bool all_hit = true;
  for (const Candidate& c : candidates) all_hit = all_hit && hits(c);
  for (const Candidate& c : candidates) {
    if (static_cast<int>(running.size()) == num_beams) break;
    if (hits(c)) continue;
    running.push_back(make(c));
    running_src.push_back(c.flat / vocab);
  }
  // f. Finished hypotheses: the top num_beams candidates that hit a stopping criterion, length-normalised.
  if (t.early_stop_unsatisfied) {
    const float norm = std::pow(static_cast<float>(cur + 1), t.request.search.length_penalty);
    for (int i = 0; i < num_beams && i < static_cast<int>(candidates.size()); ++i) {
      if (!hits(candidates[i])) continue;
      SearchState::Beam beam = make(candidates[i]);
      beam.score = candidates[i].value / norm;
      beam.finished = true;
      t.finished.push_back(std::move(beam));
    }
    std::stable_sort(t.finished.begin(), t.finished.end(),
                     [](const SearchState::Beam& a, const SearchState::Beam& c) { return a.score > c.score; });
    if (static_cast<int>(t.finished.size()) > num_beams) t.finished.resize(num_beams);
  }
  // g. _check_early_stop_heuristic (early_stopping=False: the best running score at the current length).
  const int64_t new_len = cur + 1;
  if (static_cast<int>(t.finished.size()) == num_beams && !running.empty()) {
    const float best_possible =
        running[0].score / std::pow(static_cast<float>(new_len), t.request.search.length_penalty);
    const float worst_finished = t.finished.back().score;
    t.early_stop_unsatisfied = t.early_stop_unsatisfied && best_possible > worst_finished;
  }
  // _beam_search_has_unfinished_sequences: improvement possible and not every candidate stopped.
  if (!t.early_stop_unsatisfied || all_hit || running.empty()) return finish_beam(t);
  t.running = std::move(running);
  for (size_t i = 0; i < t.running.size(); ++i) {
    src.push_back(first_row + running_src[i]);
    next.push_back(t.running[i].tokens.back());
  }
}

Status check_request(const WhisperDecodeRequest& r, int64_t vocab, int64_t capacity) {
  if (r.encoded == nullptr) return invalid_argument("no encoder output");
  if (r.window < 0 || r.window >= r.encoded->windows()) return invalid_argument("window index out of range");
  if (r.prompt.empty()) return invalid_argument("empty decoder prompt");
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= vocab)
      return invalid_argument("prompt token " + std::to_string(id) + " outside the vocabulary");
  }
  if (r.search.num_beams < 1) return invalid_argument("num_beams must be >= 1");
  if (!(r.search.temperature >= 0.0f) || !std::isfinite(r.search.temperature)) {
    return invalid_argument("temperature must be a finite number >= 0");
  }
  if (r.search.num_beams > 1 && r.search.temperature > 0.0f) {
    return invalid_argument("beam search samples nothing: num_beams > 1 needs temperature 0");
  }
  if (r.search.max_new_tokens < 1) return invalid_argument("max_new_tokens must be >= 1");
  // The last generated token is never fed back, so prompt + max_new_tokens - 1 positions are needed.
  if (static_cast<int64_t>(r.prompt.size()) + r.search.max_new_tokens > capacity + 1) {
    return invalid_argument("prompt of " + std::to_string(r.prompt.size()) + " tokens + max_new_tokens " +
                            std::to_string(r.search.max_new_tokens) + " exceeds the decoder's " +
                            std::to_string(capacity) + " positions");
  }
  if (r.rules.ids.eot < 0 || r.rules.ids.eot >= vocab) return invalid_argument("no <|endoftext|> id");
  if (r.rules.timestamps && (r.rules.ids.timestamp_begin <= r.rules.ids.eot || r.rules.ids.timestamp_begin >= vocab)) {
    return invalid_argument("timestamps asked but the vocabulary has no timestamp tokens");
  }
  if (r.sot_position >= static_cast<int64_t>(r.prompt.size())) return invalid_argument("sot_position past the prompt");
  return ok_status();
}

}  // namespace

struct WhisperDecodeSession::Task : SearchState {
  int64_t id = 0;
  bool has_pending = false;  // joined since the last step: its logits are `pending`, not the step's
  std::vector<float> pending;
};

WhisperDecodeSession::WhisperDecodeSession(WhisperBackend& backend, std::unique_ptr<WhisperDecoderRows> rows)
    : backend_(backend), rows_(std::move(rows)) {}
WhisperDecodeSession::~WhisperDecodeSession() = default;

StatusOr<std::unique_ptr<WhisperDecodeSession>> WhisperDecodeSession::create(WhisperBackend& backend,
                                                                             int64_t capacity) {
  if (capacity == 0) capacity = backend.config().max_target_positions;
  ASSIGN_OR_RETURN(std::unique_ptr<WhisperDecoderRows> rows, backend.new_rows(capacity));
  return std::unique_ptr<WhisperDecodeSession>(new WhisperDecodeSession(backend, std::move(rows)));
}

bool WhisperDecodeSession::idle() const {
  return live_.empty();
}

StatusOr<int64_t> WhisperDecodeSession::add(WhisperDecodeRequest request) {
  const int64_t vocab = backend_.config().vocab_size;
  RETURN_IF_ERROR(check_request(request, vocab, rows_->capacity()));
  auto t = std::make_unique<Task>();
  t->request = std::move(request);
  t->vocab = vocab;
  t->rng.seed(t->request.search.seed);
  if (t->request.search.num_beams > 1) t->running.push_back(Task::Beam{});
  const bool want_extra =
      t->request.sot_position >= 0 && t->request.no_speech_token >= 0 && t->request.no_speech_token < vocab;
  std::vector<float> extra;
  RETURN_IF_ERROR(rows_->prefill(t->request.encoded, {t->request.window}, {t->request.prompt}, t->pending,
                                 want_extra ? std::vector<int64_t>{t->request.sot_position} : std::vector<int64_t>{},
                                 want_extra ? &extra : nullptr));
  if (want_extra) {
    // openai's DecodingTask._main_loop / HF WhisperNoSpeechDetection: softmax at <|startoftranscript|>.
    log_softmax_inplace(extra);
    t->result.no_speech_prob = std::exp(extra[t->request.no_speech_token]);
  }
  t->has_pending = true;
  t->id = next_id_++;
  live_.push_back(std::move(t));
  return live_.back()->id;
}

void WhisperDecodeSession::advance(std::vector<std::pair<int64_t, StatusOr<WhisperSequence>>>& finished) {
  const int64_t vocab = backend_.config().vocab_size;
  std::vector<int64_t> src;
  std::vector<int32_t> next;
  std::vector<std::unique_ptr<Task>> still;
  int64_t row = 0;       // row in the rows object
  int64_t step_row = 0;  // row in logits_ (tasks that were live at the last step)
  for (std::unique_ptr<Task>& t : live_) {
    const int64_t n = t->rows();
    const float* logits = t->has_pending ? t->pending.data() : logits_.data() + step_row * vocab;
    if (!t->has_pending) step_row += n;
    const size_t src_before = src.size();
    if (t->request.search.num_beams > 1) {
      advance_beams(*t, logits, 0, src, next);
    } else {
      advance_greedy(*t, std::span<const float>(logits, vocab), src, 0, next);
    }
    for (size_t i = src_before; i < src.size(); ++i) src[i] += row;  // task-relative -> rows-object row
    row += n;
    t->has_pending = false;
    t->pending.clear();
    if (t->done) {
      if (t->error.ok()) {
        finished.emplace_back(t->id, std::move(t->result));
      } else {
        finished.emplace_back(t->id, t->error);
      }
    } else {
      still.push_back(std::move(t));
    }
  }
  live_ = std::move(still);
  Status s = rows_->reorder(src);
  if (s.ok() && !live_.empty()) s = rows_->step(next, logits_);
  if (!s.ok()) {
    for (std::unique_ptr<Task>& t : live_) finished.emplace_back(t->id, s);
    live_.clear();
    (void)rows_->reorder({});
  }
}

StatusOr<std::vector<WhisperDecodeSession::LanguageGuess>> WhisperDecodeSession::detect_language(
    const std::shared_ptr<const WhisperEncoded>& encoded, const std::vector<int64_t>& windows, int32_t sot,
    std::span<const int32_t> language_ids) {
  if (language_ids.empty()) return invalid_argument("the model has no language tokens");
  const int64_t vocab = backend_.config().vocab_size;
  for (int32_t id : language_ids) {
    if (id < 0 || id >= vocab) return invalid_argument("language token " + std::to_string(id) + " past the vocabulary");
  }
  const int64_t before = rows_->rows();
  std::vector<std::vector<int32_t>> prompts(windows.size(), std::vector<int32_t>{sot});
  std::vector<float> logits;
  Status s = rows_->prefill(encoded, windows, prompts, logits);
  // The detection rows leave at once: keep rows 0..before-1.
  std::vector<int64_t> keep(static_cast<size_t>(before));
  std::iota(keep.begin(), keep.end(), 0);
  if (rows_->rows() != before) RETURN_IF_ERROR(rows_->reorder(keep));
  RETURN_IF_ERROR(s);
  std::vector<LanguageGuess> out;
  for (size_t w = 0; w < windows.size(); ++w) {
    const float* row = logits.data() + w * vocab;
    std::vector<float> lang;
    for (int32_t id : language_ids) lang.push_back(row[id]);
    const int64_t best = argmax(lang);  // the lowest id on ties, as argmax over the masked row
    log_softmax_inplace(lang);
    out.push_back({language_ids[best], std::exp(lang[best])});
  }
  return out;
}

std::vector<StatusOr<WhisperSequence>> whisper_decode(WhisperBackend& backend,
                                                      std::vector<WhisperDecodeRequest> requests) {
  std::vector<StatusOr<WhisperSequence>> out(requests.size(), StatusOr<WhisperSequence>(internal_error("not run")));
  auto session = WhisperDecodeSession::create(backend);
  if (!session.ok()) {
    for (auto& o : out) o = session.status();
    return out;
  }
  std::unordered_map<int64_t, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    StatusOr<int64_t> id = (*session)->add(std::move(requests[i]));
    if (id.ok()) {
      index[*id] = i;
    } else {
      out[i] = id.status();
    }
  }
  std::vector<std::pair<int64_t, StatusOr<WhisperSequence>>> finished;
  while (!(*session)->idle()) {
    finished.clear();
    (*session)->advance(finished);
    for (auto& [id, result] : finished) out[index[id]] = std::move(result);
  }
  return out;
}

WhisperWindowSegments whisper_retrieve_segments(std::span<const int32_t> seq, int32_t ts_begin, int64_t seek,
                                                int64_t window_frames) {
  constexpr double kTimePrecision = 0.02;  // seconds per timestamp token
  constexpr int64_t kInputStride = 2;      // mel frames per timestamp step
  // time_offset = seek * time_precision / input_stride, in float64 as HF computes it.
  const double time_offset = static_cast<double>(seek) * kTimePrecision / kInputStride;
  const int64_t n = static_cast<int64_t>(seq.size());
  auto is_ts = [&](int64_t i) { return seq[i] >= ts_begin; };
  std::vector<int64_t> slices;  // timestamp_segment_indices + 1
  for (int64_t i = 0; i + 1 < n; ++i) {
    if (is_ts(i) && is_ts(i + 1)) slices.push_back(i + 1);
  }
  const bool single_ending = n >= 2 && !is_ts(n - 2) && is_ts(n - 1);  // timestamp_tokens[-2:] == [False, True]
  WhisperWindowSegments out;
  if (!slices.empty()) {
    if (single_ending) {
      slices.push_back(n);
    } else {
      slices.back() += 1;  // the last segment keeps its closing pair
    }
    int64_t last = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      const bool is_last = i + 1 == slices.size();
      std::vector<int32_t> tokens(seq.begin() + last, seq.begin() + slices[i]);
      const int64_t start_pos = tokens.front() - ts_begin;
      const size_t end_index = (!is_last || single_ending) ? tokens.size() - 1 : tokens.size() - 2;
      const int64_t end_pos = tokens[end_index] - ts_begin;
      out.segments.push_back({time_offset + static_cast<double>(start_pos) * kTimePrecision,
                              time_offset + static_cast<double>(end_pos) * kTimePrecision, std::move(tokens)});
      last = slices[i];
    }
    out.seek_advance = single_ending ? window_frames : (seq[last - 2] - ts_begin) * kInputStride;
  } else {
    // last_timestamp_pos = int(seek_num_frames * time_precision_features / time_precision), or the last
    // timestamp when there is one other than <|0.00|>.
    int64_t last_pos = window_frames / kInputStride;
    int32_t last_ts = -1;
    for (int32_t t : seq) {
      if (t >= ts_begin) last_ts = t;
    }
    if (last_ts >= 0 && last_ts != ts_begin) last_pos = last_ts - ts_begin;
    out.segments.push_back({time_offset, time_offset + static_cast<double>(last_pos) * kTimePrecision,
                            std::vector<int32_t>(seq.begin(), seq.end())});
    out.seek_advance = window_frames;
  }
  return out;
}

}  // namespace mmserve::models
