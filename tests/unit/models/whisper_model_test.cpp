// Whisper CPU forward: self-consistency on a tiny random checkpoint written here (KV-cache decoding equals a
// full recompute, a batch equals its rows alone, greedy() equals an argmax loop over full recomputes), load
// errors (a broken checkpoint names every problem at once; a bad config names the key), and the HF goldens of
// tools/reference/make_whisper_fixtures.py when they have been generated into tests/fixtures/whisper/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/safetensors.h"
#include "models/whisper/whisper.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMels = 8, kMelFrames = 16, kVocab = 300;

nlohmann::json tiny_config() {
  return {{"architectures", {"WhisperForConditionalGeneration"}},
          {"vocab_size", kVocab},
          {"num_mel_bins", kMels},
          {"d_model", 16},
          {"encoder_layers", 2},
          {"decoder_layers", 2},
          {"encoder_attention_heads", 4},
          {"decoder_attention_heads", 4},
          {"encoder_ffn_dim", 24},
          {"decoder_ffn_dim", 32},
          {"max_source_positions", kMelFrames / 2},
          {"max_target_positions", 32},
          {"activation_function", "gelu"},
          {"scale_embedding", false},
          {"decoder_start_token_id", 1},
          {"pad_token_id", 0},
          {"eos_token_id", 0}};
}

struct Checkpoint {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> data;
};

// Random weights for every tensor of the table (proj_out left out: tied, as save_pretrained writes it).
Checkpoint random_checkpoint(const WhisperConfig& config) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Checkpoint ck;
  for (const WeightSpec& spec : whisper_weight_specs(config)) {
    if (spec.optional) continue;
    int64_t n = 1;
    for (int64_t s : spec.shape) n *= s;
    std::vector<float> values(static_cast<size_t>(n));
    const bool norm = spec.name.find("layer_norm") != std::string::npos;
    const float base = norm && spec.name.ends_with(".weight") ? 1.0f : 0.0f;
    const float std = norm ? 0.1f : spec.name.find("embed") != std::string::npos ? 0.5f : 0.3f;
    for (float& v : values) v = base + std * normal(rng);
    ck.names.push_back(spec.name);
    ck.shapes.push_back(spec.shape);
    ck.data.push_back(std::move(values));
  }
  return ck;
}

fs::path write_model(const std::string& name, const nlohmann::json& config, const Checkpoint& ck) {
  fs::path d = fs::temp_directory_path() / ("mmserve_whisper_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "config.json") << config.dump(1);
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < ck.names.size(); ++i) {
    tensors.push_back({ck.names[i], DType::kF32, ck.shapes[i], ck.data[i].data()});
  }
  Status s = write_safetensors((d / "model.safetensors").string(), tensors);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return d;
}

std::unique_ptr<WhisperModel> tiny_model() {
  auto config = parse_whisper_config(tiny_config(), "tiny");
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  fs::path d = write_model("tiny", tiny_config(), random_checkpoint(*config));
  auto model = WhisperModel::load(d.string());
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<float> random_mel(int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> mel(static_cast<size_t>(batch * kMels * kMelFrames));
  for (float& v : mel) v = normal(rng);
  return mel;
}

float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Logits of the last position of `ids` by a fresh prefill of the whole sequence (no cache reuse).
std::vector<float> full_recompute(const WhisperModel& model, const std::vector<float>& enc, int64_t frames,
                                  const std::vector<int32_t>& ids) {
  auto state = model.start_decoder(enc, 1, frames, static_cast<int64_t>(ids.size()));
  EXPECT_TRUE(state.ok()) << state.status().to_string();
  std::vector<float> logits;
  Status s = model.prefill(*state, {ids}, logits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return logits;
}

TEST(WhisperModel, EncoderOutputShape) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  std::vector<float> mel = random_mel(1, 7), enc;
  Tensor mel_t(mel.data(), DType::kF32, {1, kMels, kMelFrames});
  ASSERT_TRUE(model->encode(mel_t, enc).ok());
  EXPECT_EQ(whisper_encoder_frames(kMelFrames), kMelFrames / 2);
  EXPECT_EQ(whisper_encoder_frames(3000), 1500);
  EXPECT_EQ(static_cast<int64_t>(enc.size()), kMelFrames / 2 * 16);
  for (float v : enc) ASSERT_TRUE(std::isfinite(v));
  // Too many frames for the position table is an error, not a crash.
  std::vector<float> long_mel(static_cast<size_t>(kMels * (kMelFrames + 2)));
  Tensor long_t(long_mel.data(), DType::kF32, {1, kMels, kMelFrames + 2});
  EXPECT_EQ(model->encode(long_t, enc).code(), StatusCode::kInvalidArgument);
}

TEST(WhisperModel, KvCacheStepsMatchFullRecompute) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  std::vector<float> mel = random_mel(1, 11), enc;
  Tensor mel_t(mel.data(), DType::kF32, {1, kMels, kMelFrames});
  ASSERT_TRUE(model->encode(mel_t, enc).ok());
  const int64_t frames = kMelFrames / 2;
  const std::vector<int32_t> ids = {1, 57, 3, 299, 120, 8, 8, 42, 0, 77};

  // Prompt of 3 by prefill, then one step per token; compare every step with a full recompute.
  auto state = model->start_decoder(enc, 1, frames, static_cast<int64_t>(ids.size()));
  ASSERT_TRUE(state.ok());
  std::vector<float> logits;
  ASSERT_TRUE(model->prefill(*state, {{ids.begin(), ids.begin() + 3}}, logits).ok());
  for (size_t p = 3; p <= ids.size(); ++p) {
    if (p > 3) {
      ASSERT_TRUE(model->step(*state, {ids[p - 1]}, logits).ok());
    }
    std::vector<float> full = full_recompute(*model, enc, frames, {ids.begin(), ids.begin() + p});
    ASSERT_EQ(full.size(), static_cast<size_t>(kVocab));
    EXPECT_LE(max_abs_diff(logits.data(), full.data(), kVocab), 1e-5f) << "position " << p - 1;
  }
  EXPECT_EQ(state->length, static_cast<int64_t>(ids.size()));
  // The cache is full: one more token is an error.
  EXPECT_EQ(model->step(*state, {5}, logits).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(model->step(*state, {kVocab}, logits).code(), StatusCode::kInvalidArgument);
}

TEST(WhisperModel, BatchOfTwoEqualsEachAlone) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  const int64_t frames = kMelFrames / 2, d = 16;
  std::vector<float> mel = random_mel(2, 21), enc2;
  Tensor mel2(mel.data(), DType::kF32, {2, kMels, kMelFrames});
  ASSERT_TRUE(model->encode(mel2, enc2).ok());
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {1, 250, 9}};
  const std::vector<std::vector<int32_t>> steps = {{4, 100}, {17, 17}, {299, 0}};
  auto state2 = model->start_decoder(enc2, 2, frames, 6);
  ASSERT_TRUE(state2.ok());
  std::vector<std::vector<float>> batched;  // logits [2, vocab] after the prompt and each step
  std::vector<float> logits;
  ASSERT_TRUE(model->prefill(*state2, prompts, logits).ok());
  batched.push_back(logits);
  for (const auto& s : steps) {
    ASSERT_TRUE(model->step(*state2, s, logits).ok());
    batched.push_back(logits);
  }
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<float> enc1;
    Tensor mel1(mel.data() + b * kMels * kMelFrames, DType::kF32, {1, kMels, kMelFrames});
    ASSERT_TRUE(model->encode(mel1, enc1).ok());
    EXPECT_LE(max_abs_diff(enc1.data(), enc2.data() + b * frames * d, frames * d), 1e-5f) << "row " << b;
    auto state1 = model->start_decoder(enc1, 1, frames, 6);
    ASSERT_TRUE(state1.ok());
    ASSERT_TRUE(model->prefill(*state1, {prompts[b]}, logits).ok());
    EXPECT_LE(max_abs_diff(logits.data(), batched[0].data() + b * kVocab, kVocab), 1e-5f) << "row " << b;
    for (size_t i = 0; i < steps.size(); ++i) {
      ASSERT_TRUE(model->step(*state1, {steps[i][b]}, logits).ok());
      EXPECT_LE(max_abs_diff(logits.data(), batched[i + 1].data() + b * kVocab, kVocab), 1e-5f)
          << "row " << b << " step " << i;
    }
  }
}

TEST(WhisperModel, GreedyEqualsArgmaxOverFullRecomputes) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  std::vector<float> mel = random_mel(1, 31), enc;
  Tensor mel_t(mel.data(), DType::kF32, {1, kMels, kMelFrames});
  const std::vector<int32_t> prompt = {1, 5, 6};
  const int64_t eos = 0, max_new = 12;
  auto tokens = model->greedy(mel_t, prompt, max_new, eos);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  ASSERT_TRUE(model->encode(mel_t, enc).ok());
  std::vector<int32_t> ids = prompt, expected;
  for (int64_t i = 0; i < max_new; ++i) {
    std::vector<float> logits = full_recompute(*model, enc, kMelFrames / 2, ids);
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next == eos) break;
    expected.push_back(next);
    ids.push_back(next);
  }
  EXPECT_EQ(*tokens, expected);
  EXPECT_FALSE(model->greedy(mel_t, prompt, 40, eos).ok());  // beyond max_target_positions
}

// ---------------------------------------------------------------------------------------------------------
// A naive reference forward (plain loops over the checkpoint's tensors, no kernels, no fusion, no cache),
// written from modeling_whisper.py independently of whisper.cpp.
struct Naive {
  const Checkpoint& ck;
  int64_t d = 16, heads = 4;
  const std::vector<float>& w(const std::string& name) const {
    for (size_t i = 0; i < ck.names.size(); ++i) {
      if (ck.names[i] == name) return ck.data[i];
    }
    static const std::vector<float> kNone;
    ADD_FAILURE() << "no tensor " << name;
    return kNone;
  }
  // x [n, in] -> [n, out] with weight [out, in] and optional bias.
  std::vector<float> linear(const std::vector<float>& x, int64_t n, const std::string& name, bool bias = true) const {
    const std::vector<float>& wt = w(name + ".weight");
    const int64_t in = static_cast<int64_t>(x.size()) / n, out = static_cast<int64_t>(wt.size()) / in;
    std::vector<float> y(static_cast<size_t>(n * out));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias ? w(name + ".bias")[o] : 0.0;
        for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(x[i * in + k]) * wt[o * in + k];
        y[i * out + o] = static_cast<float>(acc);
      }
    }
    return y;
  }
  std::vector<float> layer_norm(const std::vector<float>& x, const std::string& name) const {
    std::vector<float> y(x.size());
    const int64_t n = static_cast<int64_t>(x.size()) / d;
    for (int64_t i = 0; i < n; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < d; ++j) mean += x[i * d + j];
      mean /= d;
      for (int64_t j = 0; j < d; ++j) var += (x[i * d + j] - mean) * (x[i * d + j] - mean);
      var /= d;
      for (int64_t j = 0; j < d; ++j) {
        y[i * d + j] = static_cast<float>((x[i * d + j] - mean) / std::sqrt(var + 1e-5) * w(name + ".weight")[j] +
                                          w(name + ".bias")[j]);
      }
    }
    return y;
  }
  static void gelu(std::vector<float>& x) {
    for (float& v : x) v = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
  // HF WhisperAttention: q = q_proj(x) * head_dim^-0.5, k = k_proj(kv) (no bias), v = v_proj(kv); softmax per head.
  std::vector<float> attention(const std::vector<float>& x, int64_t n, const std::vector<float>& kv, int64_t m,
                               const std::string& p, bool causal) const {
    std::vector<float> q = linear(x, n, p + ".q_proj"), k = linear(kv, m, p + ".k_proj", false),
                       v = linear(kv, m, p + ".v_proj"), ctx(static_cast<size_t>(n * d), 0.0f);
    const int64_t hd = d / heads;
    for (float& e : q) e *= static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> s(static_cast<size_t>(m));
        double mx = -1e300, sum = 0;
        const int64_t seen = causal ? i + 1 : m;
        for (int64_t j = 0; j < seen; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < hd; ++e) acc += q[i * d + h * hd + e] * k[j * d + h * hd + e];
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        for (int64_t j = 0; j < seen; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < seen; ++j) acc += s[j] / sum * v[j * d + h * hd + e];
          ctx[i * d + h * hd + e] = static_cast<float>(acc);
        }
      }
    }
    return linear(ctx, n, p + ".out_proj");
  }
  static void add(std::vector<float>& x, const std::vector<float>& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  std::vector<float> mlp(const std::vector<float>& x, int64_t n, const std::string& p) const {
    std::vector<float> h = linear(layer_norm(x, p + ".final_layer_norm"), n, p + ".fc1");
    gelu(h);
    return linear(h, n, p + ".fc2");
  }
  // nn.Conv1d(kernel 3, padding 1, stride) over x [channels, length] -> [out, frames] (channel-major, as torch).
  std::vector<float> conv(const std::vector<float>& x, int64_t channels, int64_t length, const std::string& name,
                          int64_t stride) const {
    const int64_t frames = (length + 2 - 3) / stride + 1;
    std::vector<float> y(static_cast<size_t>(d * frames));
    for (int64_t o = 0; o < d; ++o) {
      for (int64_t t = 0; t < frames; ++t) {
        double acc = w(name + ".bias")[o];
        for (int64_t c = 0; c < channels; ++c) {
          for (int64_t k = 0; k < 3; ++k) {
            const int64_t i = t * stride + k - 1;
            if (i >= 0 && i < length) acc += w(name + ".weight")[(o * channels + c) * 3 + k] * x[c * length + i];
          }
        }
        y[o * frames + t] = static_cast<float>(acc);
      }
    }
    gelu(y);
    return y;
  }
  // mel [mels, frames] -> encoder last_hidden_state [frames / 2, d].
  std::vector<float> encode(const std::vector<float>& mel) const {
    std::vector<float> h1 = conv(mel, kMels, kMelFrames, "model.encoder.conv1", 1);
    std::vector<float> h2 = conv(h1, d, kMelFrames, "model.encoder.conv2", 2);
    const int64_t n = kMelFrames / 2;
    std::vector<float> x(static_cast<size_t>(n * d));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < d; ++c)
        x[t * d + c] = h2[c * n + t] + w("model.encoder.embed_positions.weight")[t * d + c];
    }
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.encoder.layers." + std::to_string(l);
      std::vector<float> normed = layer_norm(x, p + ".self_attn_layer_norm");
      add(x, attention(normed, n, normed, n, p + ".self_attn", false));
      add(x, mlp(x, n, p));
    }
    return layer_norm(x, "model.encoder.layer_norm");
  }
  // Logits [vocab] of the last of `ids`, recomputing the whole sequence.
  std::vector<float> logits(const std::vector<float>& enc, const std::vector<int32_t>& ids) const {
    const int64_t n = static_cast<int64_t>(ids.size()), m = kMelFrames / 2;
    std::vector<float> x(static_cast<size_t>(n * d));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < d; ++c) {
        x[t * d + c] = w("model.decoder.embed_tokens.weight")[ids[t] * d + c] +
                       w("model.decoder.embed_positions.weight")[t * d + c];
      }
    }
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.decoder.layers." + std::to_string(l);
      std::vector<float> normed = layer_norm(x, p + ".self_attn_layer_norm");
      add(x, attention(normed, n, normed, n, p + ".self_attn", true));
      add(x, attention(layer_norm(x, p + ".encoder_attn_layer_norm"), n, enc, m, p + ".encoder_attn", false));
      add(x, mlp(x, n, p));
    }
    std::vector<float> h = layer_norm(x, "model.decoder.layer_norm");
    std::vector<float> last(h.end() - d, h.end()), out(static_cast<size_t>(kVocab));
    for (int64_t v = 0; v < kVocab; ++v) {
      double acc = 0;
      for (int64_t c = 0; c < d; ++c)
        acc += static_cast<double>(last[c]) * w("model.decoder.embed_tokens.weight")[v * d + c];
      out[v] = static_cast<float>(acc);
    }
    return out;
  }
};

TEST(WhisperModel, MatchesNaiveReference) {
  auto config = parse_whisper_config(tiny_config(), "tiny");
  ASSERT_TRUE(config.ok());
  const Checkpoint ck = random_checkpoint(*config);
  auto model = WhisperModel::load(write_model("naive", tiny_config(), ck).string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const Naive naive{ck};
  std::vector<float> mel = random_mel(1, 41), enc;
  Tensor mel_t(mel.data(), DType::kF32, {1, kMels, kMelFrames});
  ASSERT_TRUE((*model)->encode(mel_t, enc).ok());
  const std::vector<float> ref_enc = naive.encode(mel);
  EXPECT_LE(max_abs_diff(enc.data(), ref_enc.data(), static_cast<int64_t>(enc.size())), 1e-4f);
  const std::vector<int32_t> ids = {1, 57, 3, 299, 120};
  auto state = (*model)->start_decoder(enc, 1, kMelFrames / 2, 8);
  ASSERT_TRUE(state.ok());
  std::vector<float> logits;
  ASSERT_TRUE((*model)->prefill(*state, {{ids.begin(), ids.begin() + 2}}, logits).ok());
  for (size_t p = 2; p <= ids.size(); ++p) {
    if (p > 2) {
      ASSERT_TRUE((*model)->step(*state, {ids[p - 1]}, logits).ok());
    }
    const std::vector<float> ref = naive.logits(ref_enc, {ids.begin(), ids.begin() + p});
    EXPECT_LE(max_abs_diff(logits.data(), ref.data(), kVocab), 1e-4f) << "position " << p - 1;
  }
}

TEST(WhisperModel, BrokenCheckpointNamesEveryProblem) {
  auto config = parse_whisper_config(tiny_config(), "tiny");
  ASSERT_TRUE(config.ok());
  Checkpoint ck = random_checkpoint(*config);
  for (size_t i = 0; i < ck.names.size(); ++i) {
    if (ck.names[i] == "model.decoder.layers.1.fc2.bias") {
      ck.names.erase(ck.names.begin() + i);
      ck.shapes.erase(ck.shapes.begin() + i);
      ck.data.erase(ck.data.begin() + i);
      break;
    }
  }
  for (size_t i = 0; i < ck.names.size(); ++i) {
    if (ck.names[i] == "model.encoder.conv1.weight") ck.shapes[i] = {16, kMels * 3};  // same bytes, wrong shape
  }
  ck.names.push_back("model.encoder.layers.0.self_attn.k_proj.bias");  // Whisper's k_proj has no bias
  ck.shapes.push_back({16});
  ck.data.emplace_back(16, 0.0f);
  fs::path d = write_model("broken", tiny_config(), ck);
  auto model = WhisperModel::load(d.string());
  ASSERT_FALSE(model.ok());
  const std::string& m = model.status().message();
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.find("1 missing: model.decoder.layers.1.fc2.bias"), std::string::npos) << m;
  EXPECT_NE(m.find("model.encoder.conv1.weight [16, 24] (expected [16, 8, 3])"), std::string::npos) << m;
  EXPECT_NE(m.find("1 unexpected: model.encoder.layers.0.self_attn.k_proj.bias"), std::string::npos) << m;
}

TEST(WhisperConfig, ErrorsNameTheKey) {
  nlohmann::json j = tiny_config();
  j["activation_function"] = "swishy";
  auto c = parse_whisper_config(j, "cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("cfg.json.activation_function"), std::string::npos) << c.status().message();

  j = tiny_config();
  j["d_model"] = "sixteen";
  c = parse_whisper_config(j, "cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("d_model"), std::string::npos) << c.status().message();

  j = tiny_config();
  j["decoder_attention_heads"] = 5;
  c = parse_whisper_config(j, "cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("decoder_attention_heads"), std::string::npos) << c.status().message();

  // HF defaults for absent keys.
  auto defaults = parse_whisper_config(nlohmann::json::object(), "empty");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_source_positions, 1500);
  EXPECT_EQ(defaults->max_target_positions, 448);
  EXPECT_EQ(defaults->vocab_size, 51865);
  EXPECT_EQ(defaults->activation_function, kernels::Activation::kGelu);
}

// HF goldens (tools/reference/make_whisper_fixtures.py): encoder output, the raw logits of the first greedy steps
// and the raw greedy ids, for an 80-bin f32 model (its input features are logmel_golden's logmel_jfk) and a
// large-v3-like 128-bin f16 model (its own input_features).
class WhisperConformance : public ::testing::TestWithParam<const char*> {};

TEST_P(WhisperConformance, MatchesHf) {
  const fs::path root = fs::path(MMSERVE_FIXTURES_DIR) / "whisper";
  const fs::path dir = root / GetParam();
  auto model = WhisperModel::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto golden = SafetensorsFile::open((dir / "golden.safetensors").string());
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  auto logmel = SafetensorsFile::open((root / "logmel_golden.safetensors").string());
  ASSERT_TRUE(logmel.ok()) << logmel.status().to_string();
  auto tensor = [](const SafetensorsFile& file, const char* name) {
    const TensorInfo* info = file.find(name);
    EXPECT_NE(info, nullptr) << name;
    EXPECT_TRUE(info == nullptr || info->dtype == DType::kF32) << name;
    return info;
  };
  const bool mel80 = (*model)->config().num_mel_bins == 80;
  const TensorInfo* features = mel80 ? tensor(**logmel, "logmel_jfk") : tensor(**golden, "input_features");
  const TensorInfo* hidden = tensor(**golden, "encoder_last_hidden_state");
  const TensorInfo* raw_logits = tensor(**golden, "greedy_raw_logits");
  ASSERT_TRUE(features && hidden && raw_logits);
  std::ifstream json_file(dir / "golden.json");
  const nlohmann::json info = nlohmann::json::parse(json_file);
  const std::vector<int32_t> prompt = info["greedy_raw"]["prompt"].get<std::vector<int32_t>>();
  const std::vector<int32_t> tokens = info["greedy_raw"]["tokens"].get<std::vector<int32_t>>();
  const int64_t eot = info["special"]["<|endoftext|>"].get<int64_t>();
  ASSERT_GE(std::set<int32_t>(tokens.begin(), tokens.end()).size(), 8u) << "an uninformative golden";

  const int64_t mels = (*model)->config().num_mel_bins;
  ASSERT_EQ(features->numel(), mels * 3000);
  const Tensor mel = features->view().reshape({1, mels, 3000});
  std::vector<float> enc;
  ASSERT_TRUE((*model)->encode(mel, enc).ok());
  ASSERT_EQ(static_cast<int64_t>(enc.size()), hidden->numel());
  const float* ref = reinterpret_cast<const float*>(hidden->data);
  float ref_max = 0.0f;
  for (int64_t i = 0; i < hidden->numel(); ++i) ref_max = std::max(ref_max, std::fabs(ref[i]));
  EXPECT_LE(max_abs_diff(enc.data(), ref, hidden->numel()), 1e-4f * std::max(1.0f, ref_max));

  // Raw logits of the first steps, decoding the golden ids (so a near-tie cannot derail the comparison).
  const int64_t vocab = (*model)->config().vocab_size, steps = raw_logits->shape[0];
  ASSERT_EQ(raw_logits->shape[1], vocab);
  auto state = (*model)->start_decoder(enc, 1, hidden->shape[1], static_cast<int64_t>(prompt.size()) + steps);
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  std::vector<float> logits;
  ASSERT_TRUE((*model)->prefill(*state, {prompt}, logits).ok());
  const float* ref_logits = reinterpret_cast<const float*>(raw_logits->data);
  for (int64_t s = 0; s < steps; ++s) {
    if (s > 0) {
      ASSERT_TRUE((*model)->step(*state, {tokens[s - 1]}, logits).ok());
    }
    float step_max = 0.0f;
    for (int64_t i = 0; i < vocab; ++i) step_max = std::max(step_max, std::fabs(ref_logits[s * vocab + i]));
    EXPECT_LE(max_abs_diff(logits.data(), ref_logits + s * vocab, vocab), 1e-4f * std::max(1.0f, step_max))
        << "step " << s;
  }

  const int64_t max_new = 32;  // MAX_NEW_TOKENS of the fixture script
  auto greedy = (*model)->greedy(mel, prompt, max_new, eot);
  ASSERT_TRUE(greedy.ok()) << greedy.status().to_string();
  EXPECT_EQ(*greedy, tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WhisperConformance,
                         ::testing::Values("whisper-tiny-mel80-f32", "whisper-v3-mel128-f16"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace mmserve::models
