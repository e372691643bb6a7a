// `mmserve quantize` and quantised checkpoints on the CPU path (issue 17): RTN's per-group bound; the tiny GQA Llama
// (tests/fixtures/llama/llama-gqa-f32) quantised to AWQ GEMM and GPTQ v1 at group sizes 32 and -1, loaded back by
// LlamaModel::load (which dequantises), with its logits and greedy ids compared with the f32 model's (agreement
// printed, a loose bound asserted: RTN at 4 bits moves a tiny random model's logits a lot), and equal bit for bit to
// loading its dequantised f32 weights; AWQ's scaling (the scaled f32 model keeps the logits, no group's loss above
// RTN's, Mixtral refused); the binary's success output (RTN, and AWQ with a --data file through a byte-level
// tokenizer) and its errors (missing --model, a bad --group-size, an unknown method or format, --method awq without
// --data, --data with rtn, a broken JSONL line, a group size that does not divide a linear, a non-decoder, an output
// that already holds a model), each with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "../../conformance/golden.h"
#include "core/json_config.h"
#include "models/llama/llama.h"
#include "models/quant/awq.h"
#include "models/quant/int4_checkpoint.h"
#include "models/quant/quantize.h"
#include "quant_test_util.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using testing::fixture;

const std::string kBase = "llama/llama-gqa-f32";

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mmserve_quantize_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(QuantizeRtn, EachWeightWithinHalfAStepOfItsGroup) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  const int64_t n = 16, k = 64, group = 32;
  std::vector<float> w(n * k);
  for (float& v : w) v = normal(rng);
  w[3] = 0.0f, w[4] = 0.0f;  // a constant stretch does not matter; a constant group:
  for (int64_t i = 0; i < group; ++i) w[5 * k + i] = 0.25f;
  const Int4Weight q = quantize_rtn(w.data(), n, k, group);
  ASSERT_TRUE(check_int4_weight(q, "rtn").ok());
  const std::vector<float> d = dequantize(q);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const float scale = q.scales[r * q.groups() + i / group];
      EXPECT_LE(std::fabs(d[r * k + i] - w[r * k + i]), 0.5f * scale * (1 + 1e-3f) + 1e-6f) << r << " " << i;
      EXPECT_EQ(f16_to_f32(f32_to_f16(scale)), scale);  // scales are f16 values, as stored
    }
  }
  // A constant group above 0 is kept (the range holds 0; AutoAWQ's clamped zero would return ~1e-5 for it).
  EXPECT_NEAR(d[5 * k + 7], 0.25f, 0.5f * q.scales[5 * q.groups()]);
  std::vector<float> negative(static_cast<size_t>(group), -0.5f);
  negative[3] = -0.75f;
  const std::vector<float> dn = dequantize(quantize_rtn(negative.data(), 1, group, group));
  EXPECT_NEAR(dn[0], -0.5f, 0.03f);
  EXPECT_NEAR(dn[3], -0.75f, 0.03f);
  // GPTQ v1 keeps zeros >= 1.
  const Int4Weight v1 = quantize_rtn(w.data(), n, k, group, 1);
  for (uint8_t z : v1.zeros) EXPECT_GE(z, 1);
}

struct Agreement {
  double max_abs = 0, max_ref = 0;
  double rel_rms = 0;  // ||a - b|| / ||a|| over the prompt's logits
  int same_greedy = 0, total = 0;
};

Agreement compare(const LlamaModel& a, const LlamaModel& b, const std::vector<int32_t>& prompt, int64_t new_tokens) {
  Agreement r;
  const int64_t v = a.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  auto ca = a.new_cache(n), cb = b.new_cache(n);
  EXPECT_TRUE(ca.ok() && cb.ok());
  std::vector<float> la(n * v), lb(n * v);
  EXPECT_TRUE(a.forward(prompt.data(), n, *ca, nullptr, la.data()).ok());
  EXPECT_TRUE(b.forward(prompt.data(), n, *cb, nullptr, lb.data()).ok());
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    r.max_abs = std::max(r.max_abs, static_cast<double>(std::fabs(la[i] - lb[i])));
    r.max_ref = std::max(r.max_ref, static_cast<double>(std::fabs(la[i])));
    diff2 += (static_cast<double>(la[i]) - lb[i]) * (static_cast<double>(la[i]) - lb[i]);
    ref2 += static_cast<double>(la[i]) * la[i];
  }
  r.rel_rms = ref2 > 0 ? std::sqrt(diff2 / ref2) : 0;
  auto ga = a.greedy(prompt, new_tokens, true), gb = b.greedy(prompt, new_tokens, true);
  EXPECT_TRUE(ga.ok() && gb.ok());
  for (size_t i = 0; i < ga->size() && i < gb->size(); ++i) r.same_greedy += (*ga)[i] == (*gb)[i];
  r.total = static_cast<int>(ga->size());
  return r;
}

TEST(Quantize, TinyLlamaLoadsBackCloseToTheF32Model) {
  auto base = LlamaModel::load(fixture(kBase));
  ASSERT_TRUE(base.ok()) << base.status().to_string() << " (a fixture folder missing? the lead's GPU runs move "
                                                         "them aside for a few minutes: rerun)";
  const std::vector<int32_t> prompt = {1, 68, 71, 12, 144, 6, 13, 107, 234};  // the fixture's golden prompt
  struct Case {
    std::string format;
    int64_t group_size;
  };
  for (const Case& c : {Case{"awq", 32}, Case{"gptq", 32}, Case{"awq", -1}, Case{"gptq", -1}}) {
    const std::string name = c.format + "_g" + std::to_string(c.group_size);
    SCOPED_TRACE(name);
    QuantizeOptions o;
    o.model_dir = fixture(kBase);
    o.output_dir = temp_dir(name).string();
    o.format = c.format;
    o.group_size = c.group_size;
    int progress_lines = 0;
    o.progress = [&](const std::string&) { ++progress_lines; };
    const Status s = quantize_checkpoint(o);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(progress_lines, (*base)->config().num_hidden_layers);
    auto config = read_json_file(o.output_dir + "/config.json");
    ASSERT_TRUE(config.ok());
    EXPECT_EQ((*config)["quantization_config"]["quant_method"], c.format);
    EXPECT_EQ((*config)["quantization_config"]["group_size"], c.group_size);
    auto q = LlamaModel::load(o.output_dir);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    const Agreement a = compare(**base, **q, prompt, 12);
    std::cout << "[ quantize ] " << name << ": logits max |diff| " << a.max_abs << " (max |logit| " << a.max_ref
              << "), relative rms " << a.rel_rms << ", greedy ids equal " << a.same_greedy << "/" << a.total << "\n";
    EXPECT_LT(a.rel_rms, 0.5);  // loose: 4-bit RTN of a small random model moves its logits a lot
    EXPECT_GT(a.max_abs, 0.0);               // the weights really were quantised
  }
}

// Mixtral: every expert's w1/w2/w3 quantised, the router (block_sparse_moe.gate) kept as it was.
TEST(Quantize, MixtralQuantisesItsExpertsNotItsRouter) {
  const std::string base_dir = fixture("mixtral/mixtral-5x-top2-f32");
  auto base = LlamaModel::load(base_dir);
  ASSERT_TRUE(base.ok()) << base.status().to_string() << " (a fixture folder missing? rerun in a few minutes)";
  QuantizeOptions o;
  o.model_dir = base_dir, o.output_dir = temp_dir("mixtral").string(), o.format = "gptq", o.group_size = -1;
  ASSERT_TRUE(quantize_checkpoint(o).ok());
  auto store = WeightStore::open_model_dir(o.output_dir);
  ASSERT_TRUE(store.ok());
  EXPECT_NE((*store)->find("model.layers.1.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_NE((*store)->find("model.layers.1.block_sparse_moe.experts.4.w2.qweight"), nullptr);
  EXPECT_EQ((*store)->find("model.layers.1.block_sparse_moe.experts.4.w2.weight"), nullptr);
  auto q = LlamaModel::load(o.output_dir);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  const Agreement a = compare(**base, **q, {1, 30, 77, 5, 120, 9}, 8);
  std::cout << "[ quantize ] mixtral gptq g-1: relative rms " << a.rel_rms << ", greedy ids equal " << a.same_greedy
            << "/" << a.total << "\n";
  EXPECT_LT(a.rel_rms, 0.5);
  EXPECT_GT(a.max_abs, 0.0);
  // 32 does not divide the experts' 48 inputs: refused naming the expert.
  o.output_dir = temp_dir("mixtral_g32").string(), o.group_size = 32;
  const Status s = quantize_checkpoint(o);
  EXPECT_NE(s.message().find("experts.0.w2: group_size 32 does not divide in_features 48"), std::string::npos)
      << s.message();
}

// The quantised checkpoint's dequantised weights are exactly what the reader makes of what the writer packed: load a
// GPTQ checkpoint whose one group per row is RTN of the f32 weights, and check a linear's f32 weight in the model by
// its effect: a model from the dequantised f32 tensors written as a plain checkpoint gives bit-identical logits.
TEST(Quantize, QuantisedLoadEqualsItsDequantisedF32Checkpoint) {
  const std::string qdir = temp_dir("exact_q").string(), fdir = temp_dir("exact_f").string();
  QuantizeOptions o;
  o.model_dir = fixture(kBase), o.output_dir = qdir, o.format = "gptq", o.group_size = 32;
  ASSERT_TRUE(quantize_checkpoint(o).ok());
  auto qconfig = read_json_file(qdir + "/config.json");
  ASSERT_TRUE(qconfig.ok());
  auto quant = parse_quant_config(*qconfig, "config.json");
  ASSERT_TRUE(quant.ok());
  auto store = WeightStore::open_model_dir(qdir);
  ASSERT_TRUE(store.ok());
  // Rewrite: every quantised linear as its dequantised f32 .weight, every other tensor as it is.
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<float>> owned;
  std::set<std::string> done;
  for (const std::string& name : (*store)->names()) {
    const std::string suffix = name.substr(name.rfind('.') + 1);
    const std::string prefix = name.substr(0, name.rfind('.'));
    if (suffix == "qweight") {
      const TensorInfo* s = (*store)->find(prefix + ".scales");
      const int64_t n = s->shape[1], k = (*store)->find(prefix + ".g_idx")->shape[0];
      auto w = read_int4_linear(**store, *quant, prefix, n, k);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      owned.push_back(dequantize(*w));
      tensors.push_back({prefix + ".weight", DType::kF32, {n, k}, owned.back().data()});
    } else if (suffix != "qzeros" && suffix != "scales" && suffix != "g_idx") {
      const TensorInfo* t = (*store)->find(name);
      tensors.push_back({name, t->dtype, t->shape, t->data});
    }
  }
  fs::create_directories(fdir);
  ASSERT_TRUE(write_safetensors(fdir + "/model.safetensors", tensors).ok());
  nlohmann::json plain = *qconfig;
  plain.erase("quantization_config");
  std::ofstream(fdir + "/config.json") << plain.dump();
  auto qm = LlamaModel::load(qdir);
  auto fm = LlamaModel::load(fdir);
  ASSERT_TRUE(qm.ok() && fm.ok());
  const Agreement a = compare(**qm, **fm, {1, 5, 9, 200, 17}, 6);
  EXPECT_EQ(a.max_abs, 0.0);
  EXPECT_EQ(a.same_greedy, a.total);
}

// ---- AWQ's activation-aware scaling.

std::vector<std::vector<int32_t>> calibration_prompts(int count, int length, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count));
  for (auto& p : out) {
    p.push_back(1);
    for (int i = 1; i < length; ++i) p.push_back(static_cast<int32_t>(3 + rng() % 253));
  }
  return out;
}

// A copy of `dir` whose tensors named in `replaced` are those f32 values (the rest as stored).
void write_replaced(const std::string& dir, const std::string& out, const std::map<std::string, std::vector<float>>& replaced) {
  auto store = WeightStore::open_model_dir(dir);
  ASSERT_TRUE(store.ok());
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : (*store)->names()) {
    const TensorInfo* t = (*store)->find(name);
    auto it = replaced.find(name);
    tensors.push_back(it == replaced.end() ? TensorToWrite{name, t->dtype, t->shape, t->data}
                                           : TensorToWrite{name, DType::kF32, t->shape, it->second.data()});
  }
  fs::create_directories(out);
  ASSERT_TRUE(write_safetensors(out + "/model.safetensors", tensors).ok());
  fs::copy_file(dir + "/config.json", out + "/config.json", fs::copy_options::overwrite_existing);
}

TEST(QuantizeAwq, ScalingKeepsTheF32ModelAndNeverLosesToRtn) {
  auto base = LlamaModel::load(fixture(kBase));
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  const auto prompts = calibration_prompts(8, 24, 11);
  std::vector<std::string> lines;
  auto r = awq_scale(fixture(kBase), prompts, 32, 0, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(lines.size(), 2u);
  ASSERT_EQ(r->groups.size(), 2u * 3u);  // q/k/v, gate/up, down per layer (GQA: no v -> o group, as AutoAWQ)
  int moved = 0;
  for (const AwqGroupReport& g : r->groups) {
    EXPECT_LE(g.loss, g.rtn_loss) << g.linears;  // alpha 0 is RTN itself
    moved += g.alpha > 0;
    std::cout << "[ awq ] " << g.linears << ": alpha " << g.alpha << ", mse " << g.loss << " (rtn " << g.rtn_loss
              << ")\n";
  }
  EXPECT_GT(moved, 0);  // the search does something on this model
  // The scaled f32 weights (norms divided, linears multiplied) compute the same function.
  const std::string scaled = temp_dir("awq_scaled").string();
  write_replaced(fixture(kBase), scaled, r->tensors);
  auto same = LlamaModel::load(scaled);
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  const Agreement a = compare(**base, **same, prompts[0], 8);
  EXPECT_LT(a.max_abs, 1e-4 * a.max_ref + 1e-5);
  EXPECT_EQ(a.same_greedy, a.total);
  // Mixtral is refused (its router reads the MLP's input too), from its config alone.
  const fs::path mixtral_dir = temp_dir("awq_mixtral");
  fs::create_directories(mixtral_dir);
  std::ofstream(mixtral_dir / "config.json") << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "num_local_experts": 4,
      "num_experts_per_tok": 2})";
  auto mixtral = awq_scale(mixtral_dir.string(), prompts, 32, 0);
  ASSERT_FALSE(mixtral.ok());
  EXPECT_EQ(mixtral.status().code(), StatusCode::kUnimplemented);
}

TEST(QuantizeAwq, AwqCheckpointLoadsAndIsReported) {
  auto base = LlamaModel::load(fixture(kBase));
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  const auto calibration = calibration_prompts(16, 32, 3);
  const auto held_out = calibration_prompts(1, 12, 99)[0];
  for (const char* method : {"rtn", "awq"}) {
    QuantizeOptions o;
    o.model_dir = fixture(kBase);
    o.output_dir = temp_dir(std::string("method_") + method).string();
    o.method = method;
    o.group_size = 32;
    if (o.method == "awq") o.calibration = calibration;
    const Status s = quantize_checkpoint(o);
    ASSERT_TRUE(s.ok()) << s.to_string();
    auto q = LlamaModel::load(o.output_dir);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    for (const auto& [what, prompt] : {std::pair<const char*, std::vector<int32_t>>{"a calibration prompt",
                                                                                      calibration[0]},
                                       {"a held-out prompt", held_out}}) {
      const Agreement a = compare(**base, **q, prompt, 12);
      std::cout << "[ quantize ] --method " << method << ", AWQ format g32, " << what << ": logits max |diff| "
                << a.max_abs << ", relative rms " << a.rel_rms << ", greedy ids equal " << a.same_greedy << "/"
                << a.total << "\n";
      EXPECT_LT(a.rel_rms, 0.5);
    }
  }
  QuantizeOptions none;
  none.model_dir = fixture(kBase), none.output_dir = temp_dir("awq_nodata").string(), none.method = "awq";
  const Status s = quantize_checkpoint(none);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--data"), std::string::npos) << s.message();
}

// ---- The binary.

using quant_test::Result;

Result run(const std::vector<std::string>& args) { return quant_test::run_binary(MMSERVE_BINARY, args); }

void expect_user_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mmserve: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err << "\nexpected to mention: " << needle;
}

TEST(QuantizeCli, WritesACheckpointWithProgressLines) {
  const std::string out = temp_dir("cli_ok").string();
  const Result r = run({"quantize", "--model", fixture(kBase), "--method", "rtn", "--group-size", "32", "--format",
                        "gptq", "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("quantize: layer 1/2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quantize: layer 2/2"), std::string::npos) << r.err;
  auto summary = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << r.out;
  EXPECT_EQ(summary["format"], "gptq");
  EXPECT_TRUE(LlamaModel::load(out).ok());
  // The same output again: refused, nothing overwritten.
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--group-size", "32", "--output", out}),
                    "already holds a model");
}

// A copy of the tiny Llama with a byte-level tokenizer.json (quant_test_util.h), so that --data text becomes ids.
std::string model_with_byte_tokenizer() { return quant_test::with_byte_tokenizer(fixture(kBase), temp_dir("byte_tokenizer")); }

TEST(QuantizeCli, AwqMethodReadsTheDataFile) {
  const std::string model = model_with_byte_tokenizer(), out = temp_dir("cli_awq").string();
  const fs::path data = fs::temp_directory_path() / ("mmserve_quantize_data_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(data) << R"({"text": "Once upon a time there was a tiny model."})" "\n\n"
                      << R"({"text": "It learned to keep its weights in four bits, group by group."})" "\n";
  const Result r = run({"quantize", "--model", model, "--method", "awq", "--data", data.string(), "--group-size", "32",
                        "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("awq: layer 2/2"), std::string::npos) << r.err;
  auto summary = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << r.out;
  EXPECT_EQ(summary["calibration_prompts"], 2);
  EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer.json"));  // copied beside the weights
  EXPECT_TRUE(LlamaModel::load(out).ok());
  // A broken line is named.
  std::ofstream(data) << R"({"text": "fine"})" "\n" << R"({"prompt": "no text key"})" "\n";
  expect_user_error(run({"quantize", "--model", model, "--method", "awq", "--data", data.string(), "--group-size",
                         "32", "--output", temp_dir("cli_awq_bad").string()}),
                    ":2: expected a JSON object with a \"text\" string");
  fs::remove(data);
}

TEST(QuantizeCli, BadArgumentsExitNonZeroWithTheReason) {
  const std::string out = temp_dir("cli_bad").string();
  const Result no_model = run({"quantize", "--output", out});
  EXPECT_NE(no_model.exit_code, 0);
  EXPECT_NE(no_model.err.find("--model"), std::string::npos) << no_model.err;
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--group-size", "48", "--output", out}),
                    "--group-size 48: expected 32, 64, 128 or -1");
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--method", "gptq", "--output", out}),
                    "--method 'gptq': expected rtn or awq");
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--method", "awq", "--output", out}),
                    "--method awq needs calibration prompts");
  const fs::path data = fs::temp_directory_path() / ("mmserve_quantize_rtn_data_" + std::to_string(::getpid()));
  std::ofstream(data) << R"({"text": "a"})" "\n";
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--data", data.string(), "--output", out}),
                    "--data is read by --method awq only");
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--method", "awq", "--data", data.string(),
                         "--output", out}),
                    "tokenizer");  // the fixture has none
  fs::remove(data);
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--format", "exl2", "--output", out}), "--format");
  // 64 divides the attention's 64 inputs but not down_proj's 96.
  expect_user_error(run({"quantize", "--model", fixture(kBase), "--group-size", "64", "--output", out}),
                    "mlp.down_proj: group_size 64 does not divide in_features 96");
  expect_user_error(run({"quantize", "--model", fixture("clip-tiny-quickgelu-f32"), "--output", out}), "config.json");
  EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
}

}  // namespace
}  // namespace mmserve::models
