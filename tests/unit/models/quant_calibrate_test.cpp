// `mmserve calibrate` (issue 17 item 4) on the tiny GQA Llama (tests/fixtures/llama/llama-gqa-f32): the library's
// KL, top-1 and greedy agreement of FP8 (static and dynamic inputs, tensor and channel weights) against f32 (printed
// for docs/quantization.md, a bound asserted), the written compressed-tensors checkpoint loading back through
// LlamaModel::load with the in-memory FP8 model's logits bit for bit, the static scales in the file equal to amax /
// 448 of the calibration prompts' inputs, --max-kl 1e-12 refused with nothing written; the binary (a byte-level
// tokenizer.json beside a copy of the fixture, a JSONL written here): success with progress lines and the JSON
// summary, the refusal's figure and exit code, and bad arguments (missing --data, empty data, a broken line, bad
// numbers, --holdout leaving no calibration prompt, an unknown scheme), each with a non-zero exit and its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "../../conformance/golden.h"
#include "core/json_config.h"
#include "models/llama/llama.h"
#include "models/quant/fp8_calibrate.h"
#include "models/quant/fp8_checkpoint.h"
#include "quant_test_util.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using testing::fixture;

const std::string kBase = "llama/llama-gqa-f32";

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mmserve_calibrate_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::vector<std::vector<int32_t>> random_prompts(int count, int length, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count));
  for (auto& p : out) {
    p.push_back(1);
    for (int i = 1; i < length; ++i) p.push_back(static_cast<int32_t>(3 + rng() % 253));
  }
  return out;
}

using quant_test::prompt_logits;

TEST(Calibrate, WritesACheckpointThatLoadsAsTheMeasuredModel) {
  auto base = LlamaModel::load(fixture(kBase));
  ASSERT_TRUE(base.ok()) << base.status().to_string()
                         << " (a fixture folder missing? the lead's GPU runs move "
                            "them aside for a few minutes: rerun)";
  const std::vector<int32_t> golden_prompt = {1, 68, 71, 12, 144, 6, 13, 107, 234};
  struct Case {
    const char* name;
    Fp8InputScale inputs;
    Fp8WeightScale weights;
  };
  for (const Case& c : {Case{"static_tensor", Fp8InputScale::kStatic, Fp8WeightScale::kTensor},
                        Case{"static_channel", Fp8InputScale::kStatic, Fp8WeightScale::kChannel},
                        Case{"dynamic_channel", Fp8InputScale::kDynamicToken, Fp8WeightScale::kChannel}}) {
    SCOPED_TRACE(c.name);
    CalibrateOptions o;
    o.model_dir = fixture(kBase);
    o.output_dir = temp_dir(c.name).string();
    o.prompts = random_prompts(20, 24, 7);  // 16 calibrate, 4 held apart
    o.inputs = c.inputs;
    o.weights = c.weights;
    std::vector<std::string> lines;
    o.progress = [&](const std::string& l) { lines.push_back(l); };
    auto r = calibrate_fp8(o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->calibration_prompts, 16);
    EXPECT_EQ(r->held_out_prompts, 4);
    EXPECT_EQ(r->positions, 4 * 24);
    EXPECT_TRUE(r->written);
    EXPECT_GT(r->kl, 0.0);
    EXPECT_LT(r->kl, 0.01);
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines.back().find("KL(p_orig || p_fp8) = "), std::string::npos) << lines.back();
    // Reloaded: the measured model's logits, bit for bit.
    auto loaded = LlamaModel::load(o.output_dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const std::vector<float> a = prompt_logits(*r->fp8_model, golden_prompt),
                             b = prompt_logits(**loaded, golden_prompt);
    ASSERT_EQ(a, b);
    const std::vector<float> f = prompt_logits(**base, golden_prompt);
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < f.size(); ++i) diff2 += (a[i] - f[i]) * (a[i] - f[i]), ref2 += f[i] * f[i];
    auto gf = (*base)->greedy(golden_prompt, 12, true), gq = (*loaded)->greedy(golden_prompt, 12, true);
    ASSERT_TRUE(gf.ok() && gq.ok());
    int same = 0;
    for (size_t i = 0; i < gf->size(); ++i) same += (*gf)[i] == (*gq)[i];
    std::cout << "[ calibrate ] " << c.name << ": KL " << r->kl << " over " << r->positions
              << " held-apart positions, top-1 agreement " << r->top1_agreement << "; golden prompt: logits relative "
              << "rms " << std::sqrt(diff2 / ref2) << ", greedy ids equal " << same << "/" << gf->size() << "\n";
    // The file: compressed-tensors float-quantized, E4M3 weights, static input scales from the calibration amax.
    auto config = read_json_file(o.output_dir + "/config.json");
    ASSERT_TRUE(config.ok());
    const auto& q = (*config)["quantization_config"];
    EXPECT_EQ(q["quant_method"], "compressed-tensors");
    EXPECT_EQ(q["format"], "float-quantized");
    EXPECT_EQ(q["ignore"], nlohmann::json({"lm_head"}));
    auto store = WeightStore::open_model_dir(o.output_dir);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->find("model.layers.1.mlp.down_proj.weight")->dtype, DType::kF8E4M3);
    EXPECT_EQ((*store)->find("lm_head.weight")->dtype, DType::kF32);
    const TensorInfo* ws = (*store)->find("model.layers.0.self_attn.q_proj.weight_scale");
    ASSERT_NE(ws, nullptr);
    EXPECT_EQ(ws->shape,
              (c.weights == Fp8WeightScale::kChannel ? std::vector<int64_t>{64, 1} : std::vector<int64_t>{1}));
    const TensorInfo* is = (*store)->find("model.layers.0.mlp.down_proj.input_scale");
    if (c.inputs == Fp8InputScale::kStatic) {
      ASSERT_NE(is, nullptr);
      // down_proj's input amax over the 16 calibration prompts, from the f32 model's activations.
      float amax = 0;
      const LlamaActivationCallback cb = [&](int64_t layer, LlamaActivation site, const float* rows, int64_t n,
                                             int64_t width) {
        if (layer != 0 || site != LlamaActivation::kMlpHidden) return;
        for (int64_t i = 0; i < n * width; ++i) amax = std::max(amax, std::fabs(rows[i]));
      };
      for (int p = 0; p < 16; ++p) {
        auto cache = (*base)->new_cache(24);
        LlamaForwardExtras extras;
        extras.activations = &cb;
        ASSERT_TRUE((*base)->forward(o.prompts[p].data(), 24, *cache, nullptr, nullptr, extras).ok());
      }
      float stored;
      std::memcpy(&stored, is->data, 4);
      EXPECT_EQ(stored, amax / 448.0f);
    } else {
      EXPECT_EQ(is, nullptr);
    }
    EXPECT_EQ((*store)->find("model.layers.0.mlp.down_proj.input_scale") != nullptr,
              c.inputs == Fp8InputScale::kStatic);
  }
}

TEST(Calibrate, RefusesAboveMaxKlAndWritesNothing) {
  CalibrateOptions o;
  o.model_dir = fixture(kBase);
  o.output_dir = temp_dir("refused").string();
  o.prompts = random_prompts(6, 16, 3);
  o.max_kl = 1e-12;
  auto r = calibrate_fp8(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->written);
  EXPECT_GT(r->kl, 1e-12);
  EXPECT_EQ(r->held_out_prompts, 1);  // max(1, 20% of 6)
  EXPECT_FALSE(fs::exists(o.output_dir));
  // Bad options, named.
  auto expect_bad = [](CalibrateOptions c, const std::string& needle) {
    auto bad = calibrate_fp8(c);
    ASSERT_FALSE(bad.ok()) << needle;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
  };
  CalibrateOptions c = o;
  c.max_kl = -1;
  expect_bad(c, "--max-kl");
  c = o, c.max_kl = NAN;
  expect_bad(c, "--max-kl");
  c = o, c.holdout = 0;
  expect_bad(c, "--holdout 0: expected at least 1");
  c = o, c.holdout = 6;
  expect_bad(c, "--holdout 6 leaves no calibration prompt");
  c = o, c.prompts = {{1, 2, 3}};
  expect_bad(c, "leaves no calibration prompt (1 prompts; at least 2 are needed)");
  c = o, c.prompts.clear();
  expect_bad(c, "no calibration prompts");
  c = o, c.prompts[2].clear();
  expect_bad(c, "prompt 3 has no tokens");
  c = o, c.prompts[1] = std::vector<int32_t>(65, 5);
  expect_bad(c, "prompt 2 has 65 tokens; the model takes at most 64");
}

// ---- The binary.

quant_test::Result run(const std::vector<std::string>& args) {
  return quant_test::run_binary(MMSERVE_BINARY, args);
}

void expect_error(const quant_test::Result& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err << "\nexpected to mention: " << needle;
}

std::string model_with_byte_tokenizer() {
  return quant_test::with_byte_tokenizer(fixture(kBase), temp_dir("byte_tokenizer"));
}

fs::path write_data(const std::string& name, const std::vector<std::string>& texts) {
  const fs::path data =
      fs::temp_directory_path() / ("mmserve_calibrate_" + name + std::to_string(::getpid()) + ".jsonl");
  std::ofstream out(data);
  for (const std::string& t : texts) out << nlohmann::json{{"text", t}}.dump() << "\n";
  return data;
}

TEST(CalibrateCli, WritesOrRefusesWithTheFigure) {
  const std::string model = model_with_byte_tokenizer();
  const fs::path data =
      write_data("ok", {"Once upon a time there was a tiny model.", "It kept its weights in FP8.",
                        "Each linear had one scale for its input.", "The KL stayed small.", "Then it was served."});
  const std::string out = temp_dir("cli_ok").string();
  const quant_test::Result r = run({"calibrate", "--model", model, "--data", data.string(), "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("calibrate: prompt 4/4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("calibrate: held-apart prompt 1/1"), std::string::npos) << r.err;
  auto summary = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << r.out;
  EXPECT_EQ(summary["written"], true);
  EXPECT_EQ(summary["held_out_prompts"], 1);
  EXPECT_LE(summary["kl"].get<double>(), 0.01);
  EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer.json"));
  EXPECT_TRUE(LlamaModel::load(out).ok());
  // The same output again: refused.
  expect_error(run({"calibrate", "--model", model, "--data", data.string(), "--output", out}), "already holds a model");
  // --max-kl 1e-12: the figure, exit 1, nothing written.
  const std::string refused = temp_dir("cli_refused").string();
  const quant_test::Result k =
      run({"calibrate", "--model", model, "--data", data.string(), "--output", refused, "--max-kl", "1e-12",
           "--activation-scheme", "dynamic", "--weight-strategy", "channel", "--holdout", "2"});
  EXPECT_EQ(k.exit_code, 1) << k.err;
  EXPECT_NE(k.err.find("mmserve: error: KL(p_orig || p_fp8) = "), std::string::npos) << k.err;
  EXPECT_NE(k.err.find("exceeds --max-kl 1e-12; nothing written"), std::string::npos) << k.err;
  EXPECT_FALSE(fs::exists(refused));
  auto refused_summary = nlohmann::json::parse(k.out, nullptr, false);
  ASSERT_FALSE(refused_summary.is_discarded()) << k.out;
  EXPECT_EQ(refused_summary["written"], false);
  EXPECT_EQ(refused_summary["held_out_prompts"], 2);
  fs::remove(data);
}

TEST(CalibrateCli, BadArgumentsExitNonZeroWithTheReason) {
  const std::string model = model_with_byte_tokenizer(), out = temp_dir("cli_bad").string();
  const fs::path data = write_data("bad", {"one prompt", "and another"});
  expect_error(run({"calibrate", "--model", model, "--output", out}), "--data");
  const fs::path empty = write_data("empty", {});
  expect_error(run({"calibrate", "--model", model, "--data", empty.string(), "--output", out}), "no prompts");
  std::ofstream(empty) << R"({"text": "fine"})"
                          "\n"
                       << R"({"prompt": "no text"})"
                          "\n";
  expect_error(run({"calibrate", "--model", model, "--data", empty.string(), "--output", out}),
               ":2: expected a JSON object with a \"text\" string");
  expect_error(run({"calibrate", "--model", model, "--data", data.string(), "--output", out, "--max-kl", "abc"}),
               "--max-kl");
  expect_error(run({"calibrate", "--model", model, "--data", data.string(), "--output", out, "--max-kl", "-1"}),
               "--max-kl -1");
  expect_error(run({"calibrate", "--model", model, "--data", data.string(), "--output", out, "--holdout", "x"}),
               "--holdout");
  expect_error(run({"calibrate", "--model", model, "--data", data.string(), "--output", out, "--holdout", "2"}),
               "--holdout 2 leaves no calibration prompt");
  expect_error(
      run({"calibrate", "--model", model, "--data", data.string(), "--output", out, "--activation-scheme", "token"}),
      "--activation-scheme 'token': expected static or dynamic");
  expect_error(
      run({"calibrate", "--model", model, "--data", data.string(), "--output", out, "--weight-strategy", "block"}),
      "--weight-strategy 'block': expected tensor or channel");
  expect_error(run({"calibrate", "--model", fixture(kBase), "--data", data.string(), "--output", out}), "tokenizer");
  EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
  fs::remove(data);
  fs::remove(empty);
}

}  // namespace
}  // namespace mmserve::models
