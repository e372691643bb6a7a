// Whisper decoding (models/whisper/whisper_decoding.h): every logits-processor rule on hand-made logits (each
// rule checked where it must act and where it must not), beam search and greedy on a scripted fake backend
// (beam search beats greedy where a better continuation hides behind a weaker first token; a hypothesis that
// ends early wins by its length-normalised score), the CPU decoder rows against the model's own lockstep
// decoding (joins, reorders, rows leaving), a request joining a running session equals it alone, and HF's
// single-call timestamp decoding golden (tests/fixtures/whisper/*/golden.json) token for token.
#include "models/whisper/whisper_decoding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "frontends/audio/audio.h"
#include "frontends/audio/log_mel.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
constexpr float kInf = std::numeric_limits<float>::infinity();

// A vocabulary of 20: text 0..9, eot 10, notimestamps 11, timestamps 12..19 (<|0.00|> = 12).
constexpr int32_t kEot = 10, kNoTs = 11, kTs = 12, kVocab = 20;

WhisperLogitRules rules(bool timestamps) {
  WhisperLogitRules r;
  r.ids = {kEot, kNoTs, kTs, kVocab};
  r.timestamps = timestamps;
  return r;
}

std::vector<float> flat(float v = 0.0f) {
  return std::vector<float>(kVocab, v);
}

TEST(WhisperLogitRules, SuppressTokensAlwaysAndBeginSuppressOnlyFirst) {
  WhisperLogitRules r = rules(false);
  r.suppress_tokens = {3, 5, 999};  // 999: past the row, ignored
  r.begin_suppress_tokens = {1, kEot};
  std::vector<float> s = flat();
  apply_whisper_logit_rules(r, {}, s);
  for (int i = 0; i < kVocab; ++i) EXPECT_EQ(std::isinf(s[i]), i == 3 || i == 5 || i == 1 || i == kEot) << i;
  s = flat();
  const std::vector<int32_t> one = {4};
  apply_whisper_logit_rules(r, one, s);
  for (int i = 0; i < kVocab; ++i) EXPECT_EQ(std::isinf(s[i]), i == 3 || i == 5) << i;
}

TEST(WhisperLogitRules, FirstTokenIsATimestampUpToMaxInitial) {
  WhisperLogitRules r = rules(true);
  r.max_initial_timestamp_index = 2;
  std::vector<float> s = flat();
  apply_whisper_logit_rules(r, {}, s);
  for (int i = 0; i < kVocab; ++i) EXPECT_EQ(std::isfinite(s[i]), i >= kTs && i <= kTs + 2) << i;
  // Without a limit every timestamp is open.
  r.max_initial_timestamp_index = -1;
  s = flat();
  apply_whisper_logit_rules(r, {}, s);
  for (int i = 0; i < kVocab; ++i) EXPECT_EQ(std::isfinite(s[i]), i >= kTs) << i;
}

TEST(WhisperLogitRules, TimestampPairing) {
  WhisperLogitRules r = rules(true);
  // Text strongly preferred so the "timestamp mass" rule stays out of the way.
  auto text_heavy = [] {
    std::vector<float> s = flat();
    for (int i = 0; i <= kEot; ++i) s[i] = 5.0f;
    return s;
  };
  // After <ts> text: anything but <|notimestamps|> and timestamps below the last one.
  std::vector<int32_t> g = {kTs + 1, 2};
  std::vector<float> s = text_heavy();
  apply_whisper_timestamp_rules(r, g, s);
  for (int i = 0; i < kVocab; ++i) EXPECT_EQ(std::isinf(s[i]), i == kNoTs || i == kTs || i == kTs + 1) << i;
  // After text <ts> (a lone timestamp): no text below eot; eot and later timestamps (>= that one) allowed.
  g = {kTs, 2, kTs + 3};
  s = text_heavy();
  apply_whisper_timestamp_rules(r, g, s);
  for (int i = 0; i < kVocab; ++i) {
    const bool masked = i < kEot || i == kNoTs || (i >= kTs && i < kTs + 3);
    EXPECT_EQ(std::isinf(s[i]), masked) << i;
  }
  // After a pair: text only (no timestamp at all).
  g = {kTs, 2, kTs + 3, kTs + 3};
  s = text_heavy();
  apply_whisper_timestamp_rules(r, g, s);
  for (int i = 0; i < kVocab; ++i) EXPECT_EQ(std::isinf(s[i]), i == kNoTs || i >= kTs) << i;
}

TEST(WhisperLogitRules, TimestampMassBeatsBestTextToken) {
  WhisperLogitRules r = rules(true);
  const std::vector<int32_t> g = {kTs, 2};
  // Each timestamp alone is weaker than the best text token, their sum is not: text is masked.
  std::vector<float> s = flat(-10.0f);
  s[3] = 1.0f;
  for (int i = kTs + 1; i < kVocab; ++i) s[i] = 0.0f;  // 7 timestamps of e^0 vs e^1: 7 > 2.72
  apply_whisper_timestamp_rules(r, g, s);
  for (int i = 0; i < kTs; ++i) EXPECT_TRUE(std::isinf(s[i])) << i;
  EXPECT_FLOAT_EQ(s[kTs + 1], 0.0f);
  // The same with a stronger text token (e^3 = 20 > 7): nothing changes for the text.
  s = flat(-10.0f);
  s[3] = 3.0f;
  for (int i = kTs + 1; i < kVocab; ++i) s[i] = 0.0f;
  apply_whisper_timestamp_rules(r, g, s);
  EXPECT_FLOAT_EQ(s[3], 3.0f);
  EXPECT_FLOAT_EQ(s[kTs + 1], 0.0f);
}

TEST(WhisperLogitRules, LogSoftmax) {
  std::vector<float> s = {1.0f, 2.0f, -kInf, 3.0f};
  log_softmax_inplace(s);
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(s[0], 1.0 - z, 1e-6);
  EXPECT_NEAR(s[3], 3.0 - z, 1e-6);
  EXPECT_TRUE(std::isinf(s[2]));
}

// HF _retrieve_segment on hand-made windows (timestamp_begin 100: <|t|> = 100 + t / 0.02 s).
TEST(WhisperSegments, CutAtPairsAndSeek) {
  const int32_t b = 100;
  // <0.0> a <1.0><1.0> c <2.0><2.0> d: two pairs, not a single ending: the tail "d" is dropped, seek to <2.0>.
  std::vector<int32_t> seq = {b, 1, b + 50, b + 50, 3, b + 100, b + 100, 4};
  WhisperWindowSegments w = whisper_retrieve_segments(seq, b, 1000, 3000);
  ASSERT_EQ(w.segments.size(), 2u);
  EXPECT_EQ(w.segments[0].tokens, (std::vector<int32_t>{b, 1, b + 50}));
  EXPECT_DOUBLE_EQ(w.segments[0].start, 10.0);
  EXPECT_DOUBLE_EQ(w.segments[0].end, 11.0);
  EXPECT_EQ(w.segments[1].tokens, (std::vector<int32_t>{b + 50, 3, b + 100, b + 100}));
  EXPECT_DOUBLE_EQ(w.segments[1].end, 12.0);
  EXPECT_EQ(w.seek_advance, 200);
  // A single timestamp at the end: the last segment runs to it and the seek takes the whole window.
  seq = {b, 1, b + 50, b + 50, 3, b + 80};
  w = whisper_retrieve_segments(seq, b, 0, 2500);
  ASSERT_EQ(w.segments.size(), 2u);
  EXPECT_EQ(w.segments[1].tokens, (std::vector<int32_t>{b + 50, 3, b + 80}));
  EXPECT_DOUBLE_EQ(w.segments[1].end, 1.6);
  EXPECT_EQ(w.seek_advance, 2500);
  // No pair: one segment to the last timestamp; without any timestamp, to the window's end.
  seq = {b + 10, 5, 6, b + 40};
  w = whisper_retrieve_segments(seq, b, 0, 3000);
  ASSERT_EQ(w.segments.size(), 1u);
  EXPECT_DOUBLE_EQ(w.segments[0].start, 0.0);
  EXPECT_DOUBLE_EQ(w.segments[0].end, 0.8);
  seq = {5, 6};
  w = whisper_retrieve_segments(seq, b, 3000, 301);
  EXPECT_DOUBLE_EQ(w.segments[0].start, 30.0);
  EXPECT_DOUBLE_EQ(w.segments[0].end, 30.0 + 150 * 0.02);
  EXPECT_EQ(w.seek_advance, 301);
}

// ---------------------------------------------------------------------------------------------- fake backend
// Logits as a function of a row's tokens (prompt included).
using Script = std::function<std::vector<float>(const std::vector<int32_t>&)>;

class FakeEncoded : public WhisperEncoded {
 public:
  int64_t windows() const override { return 4; }
  int64_t frames() const override { return 1; }
};

class FakeRows : public WhisperDecoderRows {
 public:
  explicit FakeRows(Script script) : script_(std::move(script)) {}
  int64_t rows() const override { return static_cast<int64_t>(rows_.size()); }
  int64_t capacity() const override { return 64; }
  int64_t length(int64_t r) const override { return static_cast<int64_t>(rows_[r].size()); }
  int64_t vocab_size() const override { return kVocab; }
  Status prefill(const std::shared_ptr<const WhisperEncoded>&, const std::vector<int64_t>&,
                 const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                 const std::vector<int64_t>&, std::vector<float>*) override {
    logits.clear();
    for (const auto& p : prompts) {
      rows_.push_back(p);
      const auto l = script_(p);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return ok_status();
  }
  Status step(const std::vector<int32_t>& tokens, std::vector<float>& logits) override {
    logits.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      rows_[i].push_back(tokens[i]);
      const auto l = script_(rows_[i]);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return ok_status();
  }
  Status reorder(const std::vector<int64_t>& src) override {
    std::vector<std::vector<int32_t>> next;
    for (int64_t s : src) next.push_back(rows_[s]);
    rows_ = std::move(next);
    return ok_status();
  }

 private:
  Script script_;
  std::vector<std::vector<int32_t>> rows_;
};

class FakeBackend : public WhisperBackend {
 public:
  explicit FakeBackend(Script script) : script_(std::move(script)) {
    config_.vocab_size = kVocab;
    config_.max_target_positions = 64;
  }
  const WhisperConfig& config() const override { return config_; }
  Device device() const override { return Device::cpu(); }
  DType dtype() const override { return DType::kF32; }
  int64_t memory_bytes() const override { return 0; }
  StatusOr<std::shared_ptr<const WhisperEncoded>> encode(const Tensor&) override {
    return std::shared_ptr<const WhisperEncoded>(std::make_shared<FakeEncoded>());
  }
  StatusOr<std::unique_ptr<WhisperDecoderRows>> new_rows(int64_t) override {
    return std::unique_ptr<WhisperDecoderRows>(std::make_unique<FakeRows>(script_));
  }

 private:
  Script script_;
  WhisperConfig config_;
};

std::vector<float> log_probs(std::initializer_list<std::pair<int32_t, double>> probs) {
  std::vector<float> l(kVocab, -30.0f);
  for (auto [id, p] : probs) l[id] = static_cast<float>(std::log(p));
  return l;
}

WhisperDecodeRequest request(int beams, int64_t max_new) {
  WhisperDecodeRequest r;
  r.encoded = std::make_shared<FakeEncoded>();
  r.prompt = {kNoTs};
  r.rules = rules(false);
  r.search.num_beams = beams;
  r.search.max_new_tokens = max_new;
  return r;
}

// After the prompt: 1 (p .6) or 2 (p .4). After 1: flat over 0..4 (p .2 each). After 2: 3 (p .95). Then eot.
std::vector<float> hidden_path(const std::vector<int32_t>& t) {
  const size_t n = t.size() - 1;  // generated
  if (n == 0) return log_probs({{1, 0.6}, {2, 0.4}});
  if (n == 1 && t.back() == 1) return log_probs({{0, 0.2}, {1, 0.2}, {2, 0.2}, {3, 0.2}, {4, 0.2}});
  if (n == 1 && t.back() == 2) return log_probs({{3, 0.95}, {4, 0.05}});
  return log_probs({{kEot, 0.9}, {5, 0.1}});
}

TEST(WhisperSearch, BeamFindsTheBetterPathGreedyMisses) {
  FakeBackend backend(hidden_path);
  auto out = whisper_decode(backend, {request(1, 8), request(3, 8)});
  ASSERT_TRUE(out[0].ok() && out[1].ok());
  EXPECT_EQ(out[0]->tokens, (std::vector<int32_t>{1, 0}));  // greedy: .6 * .2 (first of the ties)
  EXPECT_TRUE(out[0]->ended_with_eot);
  EXPECT_EQ(out[1]->tokens, (std::vector<int32_t>{2, 3}));  // .4 * .95 > .12
  EXPECT_TRUE(out[1]->ended_with_eot);
  EXPECT_NEAR(out[1]->sum_logprob, std::log(0.4) + std::log(0.95) + std::log(0.9), 1e-4);
}

TEST(WhisperSearch, BeamLengthPenaltyAndMaxLength) {
  // 5 then eot (p .5 * .55: the only way to end early), or 6 then 6 (.6) / 8 (.4) until max length.
  Script script = [](const std::vector<int32_t>& t) {
    const size_t n = t.size() - 1;
    if (n == 0) return log_probs({{5, 0.5}, {6, 0.5}});
    if (t.back() == 5 && n == 1) return log_probs({{kEot, 0.55}, {7, 0.45}});
    return log_probs({{6, 0.6}, {8, 0.4}});
  };
  FakeBackend backend(script);
  WhisperDecodeRequest r = request(2, 6);
  auto out = whisper_decode(backend, {r});
  ASSERT_TRUE(out[0].ok()) << out[0].status().to_string();
  // Normalised by length (HF's default length_penalty 1): (log .5 + 5 log .6) / 6 = -0.54 beats
  // log(.5 * .55) / 2 = -0.65: the hypothesis cut at max length is returned.
  EXPECT_EQ(out[0]->tokens, (std::vector<int32_t>{6, 6, 6, 6, 6, 6}));
  EXPECT_FALSE(out[0]->ended_with_eot);
  // With length_penalty 0 (raw sums: -1.29 vs -3.25) the early end wins.
  r.search.length_penalty = 0.0f;
  out = whisper_decode(backend, {r});
  ASSERT_TRUE(out[0].ok());
  EXPECT_EQ(out[0]->tokens, (std::vector<int32_t>{5}));
  EXPECT_TRUE(out[0]->ended_with_eot);
}

TEST(WhisperSearch, SamplingIsSeededAndBadRequestsAreRefused) {
  Script script = [](const std::vector<int32_t>&) { return flat(); };
  FakeBackend backend(script);
  WhisperDecodeRequest r = request(1, 10);
  r.search.temperature = 1.0f;
  r.search.seed = 42;
  auto a = whisper_decode(backend, {r, r});
  ASSERT_TRUE(a[0].ok() && a[1].ok());
  EXPECT_EQ(a[0]->tokens, a[1]->tokens);
  r.search.seed = 43;
  auto b = whisper_decode(backend, {r});
  EXPECT_NE(a[0]->tokens, b[0]->tokens);
  WhisperDecodeRequest bad = request(0, 4);
  EXPECT_EQ(whisper_decode(backend, {bad})[0].status().code(), StatusCode::kInvalidArgument);
  bad = request(2, 4);
  bad.search.temperature = 0.5f;
  EXPECT_EQ(whisper_decode(backend, {bad})[0].status().code(), StatusCode::kInvalidArgument);
  bad = request(1, 100);  // past the 64 positions
  EXPECT_EQ(whisper_decode(backend, {bad})[0].status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------- real model
std::string fixture(const std::string& name) {
  return (fs::path(MMSERVE_FIXTURES_DIR) / "whisper" / name).string();
}

TEST(WhisperCpuRows, JoinReorderLeaveEqualsLockstep) {
  auto model = WhisperModel::load(fixture("whisper-tiny-mel80-f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::shared_ptr<const WhisperModel> shared = std::move(*model);
  auto backend = make_cpu_whisper_backend(shared);
  const int64_t mels = 80, frames = 3000, vocab = shared->config().vocab_size;
  std::vector<float> mel(static_cast<size_t>(2 * mels * frames));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : mel) v = normal(rng);
  auto encoded = backend->encode(Tensor(mel.data(), DType::kF32, {2, mels, frames}));
  ASSERT_TRUE(encoded.ok());
  // Reference: each row decoded alone by the model.
  auto alone = [&](int64_t window, const std::vector<int32_t>& ids) {
    std::vector<float> enc;
    EXPECT_TRUE(shared->encode(Tensor(mel.data() + window * mels * frames, DType::kF32, {1, mels, frames}), enc).ok());
    auto state = shared->start_decoder(enc, 1, shared->config().max_source_positions, 32);
    std::vector<float> logits;
    EXPECT_TRUE(shared->prefill(*state, {ids}, logits).ok());
    return logits;
  };
  auto rows_or = backend->new_rows(32);
  ASSERT_TRUE(rows_or.ok());
  WhisperDecoderRows& rows = **rows_or;
  std::vector<float> logits, extra;
  ASSERT_TRUE(rows.prefill(*encoded, {0, 1}, {{50258, 50259}, {50258, 50259, 50359}}, logits, {0, -1}, &extra).ok());
  auto near = [&](const float* got, const std::vector<float>& want) {
    double worst = 0.0;
    for (int64_t i = 0; i < vocab; ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    return worst;
  };
  EXPECT_LT(near(logits.data(), alone(0, {50258, 50259})), 1e-4);
  EXPECT_LT(near(logits.data() + vocab, alone(1, {50258, 50259, 50359})), 1e-4);
  EXPECT_LT(near(extra.data(), alone(0, {50258})), 1e-4);
  // Duplicate row 1, drop row 0, then step: rows are [r1, r1]; then a new row joins.
  ASSERT_TRUE(rows.reorder({1, 1}).ok());
  ASSERT_TRUE(rows.step({7, 8}, logits).ok());
  EXPECT_LT(near(logits.data(), alone(1, {50258, 50259, 50359, 7})), 1e-4);
  EXPECT_LT(near(logits.data() + vocab, alone(1, {50258, 50259, 50359, 8})), 1e-4);
  ASSERT_TRUE(rows.prefill(*encoded, {0}, {{50258}}, logits).ok());
  ASSERT_EQ(rows.rows(), 3);
  ASSERT_TRUE(rows.reorder({2, 0}).ok());
  ASSERT_TRUE(rows.step({9, 10}, logits).ok());
  EXPECT_LT(near(logits.data(), alone(0, {50258, 9})), 1e-4);
  EXPECT_LT(near(logits.data() + vocab, alone(1, {50258, 50259, 50359, 7, 10})), 1e-4);
  EXPECT_EQ(rows.length(0), 2);
  EXPECT_EQ(rows.length(1), 5);
  EXPECT_EQ(rows.reorder({5}).code(), StatusCode::kInvalidArgument);
}

struct Golden {
  std::shared_ptr<const WhisperModel> model;
  std::unique_ptr<WhisperBackend> backend;
  std::shared_ptr<const WhisperEncoded> encoded;
  nlohmann::json json;
};

Golden load_golden(const std::string& name) {
  Golden g;
  auto model = WhisperModel::load(fixture(name));
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  g.model = std::move(*model);
  g.backend = make_cpu_whisper_backend(g.model);
  std::ifstream in(fs::path(fixture(name)) / "golden.json");
  g.json = nlohmann::json::parse(in);
  auto audio = audio::decode_audio_file(std::string(MMSERVE_FIXTURES_DIR) + "/audio/jfk.wav");
  EXPECT_TRUE(audio.ok());
  audio::WhisperFeatureConfig fc;
  fc.feature_size = static_cast<int>(g.model->config().num_mel_bins);
  auto log_mel = audio::WhisperLogMel::create(fc);
  std::vector<float> mel = log_mel->compute(audio->samples);
  auto encoded = g.backend->encode(Tensor(mel.data(), DType::kF32, {1, fc.feature_size, 3000}));
  EXPECT_TRUE(encoded.ok());
  g.encoded = *encoded;
  return g;
}

WhisperDecodeRequest golden_request(const Golden& g, const std::string& run) {
  const nlohmann::json& e = g.json["generate"][run];
  WhisperDecodeRequest r;
  r.encoded = g.encoded;
  r.prompt = e["expected_prompt"].get<std::vector<int32_t>>();
  const nlohmann::json& sp = g.json["special"];
  r.rules.ids = {sp["<|endoftext|>"].get<int32_t>(), sp["<|notimestamps|>"].get<int32_t>(),
                 sp["<|0.00|>"].get<int32_t>(), g.model->config().vocab_size};
  const nlohmann::json& eff = e["effective"];
  if (!eff["suppress_tokens"].is_null()) r.rules.suppress_tokens = eff["suppress_tokens"].get<std::vector<int32_t>>();
  if (!eff["begin_suppress_tokens"].is_null()) {
    r.rules.begin_suppress_tokens = eff["begin_suppress_tokens"].get<std::vector<int32_t>>();
  }
  r.rules.timestamps = eff["return_timestamps"].get<bool>();
  r.rules.max_initial_timestamp_index = eff["max_initial_timestamp_index"].get<int64_t>();
  r.search.num_beams = eff["num_beams"].get<int>();
  r.search.max_new_tokens = eff["max_new_tokens"].get<int64_t>();
  return r;
}

class DecodeGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(DecodeGolden, EveryGenerateRunMatchesHf) {
  Golden g = load_golden(GetParam());
  for (const char* run : {"greedy", "greedy_no_suppress", "beam4", "timestamps"}) {
    SCOPED_TRACE(run);
    auto out = whisper_decode(*g.backend, {golden_request(g, run)});
    ASSERT_TRUE(out[0].ok()) << out[0].status().to_string();
    EXPECT_EQ(out[0]->tokens, g.json["generate"][run]["tokens"].get<std::vector<int32_t>>());
  }
  // All four at once through one session (continuous batching) give the same.
  std::vector<WhisperDecodeRequest> all;
  for (const char* run : {"greedy", "greedy_no_suppress", "beam4", "timestamps"}) all.push_back(golden_request(g, run));
  auto out = whisper_decode(*g.backend, all);
  int i = 0;
  for (const char* run : {"greedy", "greedy_no_suppress", "beam4", "timestamps"}) {
    ASSERT_TRUE(out[i].ok());
    EXPECT_EQ(out[i++]->tokens, g.json["generate"][run]["tokens"].get<std::vector<int32_t>>()) << run;
  }
}

TEST_P(DecodeGolden, JoiningARunningSessionEqualsAlone) {
  Golden g = load_golden(GetParam());
  auto session = WhisperDecodeSession::create(*g.backend);
  ASSERT_TRUE(session.ok());
  std::map<int64_t, std::vector<int32_t>> got;
  std::vector<std::pair<int64_t, StatusOr<WhisperSequence>>> finished;
  auto first = (*session)->add(golden_request(g, "beam4"));
  ASSERT_TRUE(first.ok());
  for (int s = 0; s < 5; ++s) (*session)->advance(finished);
  auto late = (*session)->add(golden_request(g, "timestamps"));
  ASSERT_TRUE(late.ok());
  auto guess = (*session)->detect_language(g.encoded, {0}, g.json["special"]["<|startoftranscript|>"].get<int32_t>(),
                                           std::vector<int32_t>{50259, 50260, 50353, 50355});
  ASSERT_TRUE(guess.ok());
  while (!(*session)->idle()) (*session)->advance(finished);
  for (auto& [id, r] : finished) {
    ASSERT_TRUE(r.ok());
    got[id] = r->tokens;
  }
  EXPECT_EQ(got[*first], g.json["generate"]["beam4"]["tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(got[*late], g.json["generate"]["timestamps"]["tokens"].get<std::vector<int32_t>>());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeGolden, ::testing::Values("whisper-tiny-mel80-f32", "whisper-v3-mel128-f16"));

}  // namespace
}  // namespace mmserve::models
