// FP8 checkpoints on the CPU path (issue 17 item 3): quantization_config parsing (compressed-tensors float-quantized
// with tensor / channel weights and static / dynamic / no input quantisation, presets, "re:" ignore entries;
// AutoFP8's quant_method fp8) and every refusal, its message checked; F8_E4M3 / F8_E5M2 safetensors; a checkpoint of
// the tiny GQA Llama whose linears the test writes as FP8 codes worked out by hand from the OCP E4M3 layout (not by
// our encoder), loading as the f32 checkpoint of the hand-computed weights, bit for bit (per tensor with f32 scales,
// per channel with bf16 scales, AutoFP8's 0-d scales); the input quantisation on hand-worked values; load refusals
// (a linear not stored in FP8, a missing or bad scale, a static checkpoint without input_scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "../../conformance/golden.h"
#include "core/dtype.h"
#include "core/json_config.h"
#include "models/llama/llama.h"
#include "models/quant/fp8_checkpoint.h"
#include "models/quant/quant_config.h"
#include "models/quant/quant_load.h"
#include "quant_test_util.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::fixture;

const std::string kBase = "llama/llama-gqa-f32";

StatusOr<QuantConfig> parse(const std::string& quantization_config) {
  return parse_quant_config(json::parse(R"({"quantization_config": )" + quantization_config + "}"), "config.json");
}

void expect_error(const StatusOr<QuantConfig>& c, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(c.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message() << "\nexpected: " << needle;
}

// llm-compressor's FP8 preset as saved (config_groups.group_0 with weights and input_activations).
std::string compressed(const std::string& weights, const std::string& inputs, const std::string& extra = "") {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
             "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" +
         weights + R"(, "input_activations": )" + inputs + R"(, "output_activations": null}},
             "ignore": ["lm_head"], "kv_cache_scheme": null)" +
         extra + "}";
}
// `config` with `key` set to `value`.
std::string with(const std::string& config, const std::string& key, const json& value) {
  json j = json::parse(config);
  j[key] = value;
  return j.dump();
}

const std::string kTensorW =
    R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false, "group_size": null})";
const std::string kChannelW =
    R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false})";
const std::string kStaticIn =
    R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false})";
const std::string kTokenIn =
    R"({"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true, "dynamic": true})";

TEST(Fp8Config, CompressedTensorsSchemes) {
  auto s = parse(compressed(kTensorW, kStaticIn));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->method, QuantMethod::kFp8);
  EXPECT_TRUE(s->compressed_tensors);
  EXPECT_EQ(s->fp8_weights, Fp8WeightScale::kTensor);
  EXPECT_EQ(s->fp8_inputs, Fp8InputScale::kStatic);
  EXPECT_EQ(s->fp8_ignore, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(s->format_name(), "fp8 compressed-tensors");
  auto d = parse(compressed(kChannelW, kTokenIn));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->fp8_weights, Fp8WeightScale::kChannel);
  EXPECT_EQ(d->fp8_inputs, Fp8InputScale::kDynamicToken);
  auto w = parse(compressed(kChannelW, "null"));  // W8A16
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->fp8_inputs, Fp8InputScale::kNone);
  auto dt = parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true})"));
  ASSERT_TRUE(dt.ok());
  EXPECT_EQ(dt->fp8_inputs, Fp8InputScale::kDynamicTensor);
  // naive-quantized, and a preset named by its group (QuantizationConfig.model_post_init).
  auto preset = parse(R"({"quant_method": "compressed-tensors", "format": "naive-quantized",
                          "config_groups": {"FP8_DYNAMIC": ["Linear"]}, "ignore": ["re:.*lm_head"]})");
  ASSERT_TRUE(preset.ok()) << preset.status().to_string();
  EXPECT_EQ(preset->fp8_weights, Fp8WeightScale::kChannel);
  EXPECT_EQ(preset->fp8_inputs, Fp8InputScale::kDynamicToken);
  // Two groups with one scheme: their targets together.
  auto two = parse(R"({"quant_method": "compressed-tensors", "config_groups": {
      "a": {"targets": ["re:.*self_attn.*"], "weights": )" +
                   kTensorW + R"(},
      "b": {"targets": ["re:.*mlp.*"], "weights": )" +
                   kTensorW + R"(}}})");
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->fp8_targets.size(), 2u);
  // The config `mmserve calibrate` writes reads back as itself.
  auto back = parse_quant_config(json{{"quantization_config", quant_config_to_json(*s)}}, "config.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->fp8_inputs, Fp8InputScale::kStatic);
  EXPECT_EQ(back->fp8_targets, std::vector<std::string>{"Linear"});
}

TEST(Fp8Config, AutoFp8) {
  auto s = parse(R"({"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]})");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_FALSE(s->compressed_tensors);
  EXPECT_EQ(s->fp8_inputs, Fp8InputScale::kStatic);
  EXPECT_EQ(s->format_name(), "fp8");
  auto d = parse(R"({"quant_method": "fp8"})");  // vLLM's Fp8Config default: dynamic
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->fp8_inputs, Fp8InputScale::kDynamicTensor);
  auto t = parse(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"]})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->fp8_ignore, std::vector<std::string>{"lm_head"});
}

TEST(Fp8Config, BlockWise) {
  // transformers' FineGrainedFP8Config as DeepSeek-V3 / Qwen3 FP8 checkpoints carry it.
  auto b = parse(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                     "weight_block_size": [128, 128], "modules_to_not_convert": null})");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->fp8_weights, Fp8WeightScale::kBlock);
  EXPECT_EQ(b->fp8_inputs, Fp8InputScale::kDynamicGroup);
  EXPECT_EQ(b->fp8_block, (std::vector<int64_t>{128, 128}));
  auto back = parse_quant_config(json{{"quantization_config", quant_config_to_json(*b)}}, "config.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->fp8_block, b->fp8_block);
  // compressed-tensors' FP8_BLOCK, spelled out and as a preset; block_structure also in its older "RxC" form.
  auto ct = parse(compressed(
      R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "64x32", "dynamic": false})",
      R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32, "dynamic": true})"));
  ASSERT_TRUE(ct.ok()) << ct.status().to_string();
  EXPECT_EQ(ct->fp8_weights, Fp8WeightScale::kBlock);
  EXPECT_EQ(ct->fp8_block, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(ct->fp8_inputs, Fp8InputScale::kDynamicGroup);
  EXPECT_EQ(ct->fp8_input_group, 32);
  auto ct_back = parse_quant_config(json{{"quantization_config", quant_config_to_json(*ct)}}, "config.json");
  ASSERT_TRUE(ct_back.ok()) << ct_back.status().to_string();
  EXPECT_EQ(ct_back->fp8_block, ct->fp8_block);
  EXPECT_EQ(ct_back->fp8_input_group, 32);
  auto preset = parse(R"({"quant_method": "compressed-tensors", "config_groups": {"FP8_BLOCK": ["Linear"]}})");
  ASSERT_TRUE(preset.ok()) << preset.status().to_string();
  EXPECT_EQ(preset->fp8_block, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(preset->fp8_input_group, 128);
  expect_error(parse(R"({"quant_method": "fp8", "weight_block_size": [128]})"), StatusCode::kInvalidArgument,
               "weight_block_size: expected two positive integers [rows, cols], got [128]");
  expect_error(parse(R"({"quant_method": "fp8", "weight_block_size": [0, 128]})"), StatusCode::kInvalidArgument,
               "weight_block_size");
  expect_error(parse(R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})"),
               StatusCode::kUnimplemented, "activation_scheme: 'static' with block-wise weights");
}

TEST(Fp8Config, Matching) {
  auto c = parse(compressed(kTensorW, "null", R"(, "x": 1)"));
  ASSERT_TRUE(c.ok());
  c->fp8_ignore = {"lm_head", "re:.*layers\\.1\\.mlp\\.down_proj$", "model.layers.0.self_attn.k_proj"};
  auto is = [&](const std::string& m) {
    auto r = fp8_converts_module(*c, m);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() && *r;
  };
  EXPECT_TRUE(is("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(is("model.layers.0.self_attn.k_proj"));  // an exact name
  EXPECT_FALSE(is("lm_head"));
  EXPECT_FALSE(is("model.layers.1.mlp.down_proj"));  // re: matched from the start (re.match)
  EXPECT_TRUE(is("model.layers.11.mlp.down_proj"));
  c->fp8_targets = {"re:.*mlp"};
  EXPECT_TRUE(is("model.layers.0.mlp.up_proj"));  // re.match needs no match at the end
  // quant_method fp8: plain entries also match at dots (transformers' modules_to_not_convert).
  auto hf = parse(R"({"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0", "down_proj"]})");
  ASSERT_TRUE(hf.ok());
  auto fp8 = [&](const std::string& m) {
    auto r = fp8_converts_module(*hf, m);
    return r.ok() && *r;
  };
  EXPECT_FALSE(fp8("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(fp8("model.layers.1.mlp.down_proj"));
  EXPECT_TRUE(fp8("model.layers.1.mlp.up_proj"));
  EXPECT_TRUE(fp8("model.layers.10.self_attn.q_proj"));  // at dots: layers.0 is not layers.10
  EXPECT_FALSE(is("model.layers.0.self_attn.q_proj"));
}

TEST(Fp8Config, EveryRefusalNamesItsField) {
  const auto u = StatusCode::kUnimplemented, i = StatusCode::kInvalidArgument;
  expect_error(parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}})"), u,
               "format: 'pack-quantized'");
  expect_error(parse(with(compressed(kTensorW, "null"), "format", "int-quantized")), u, "format: 'int-quantized'");
  expect_error(parse(compressed(R"({"num_bits": 4, "type": "float"})", "null")), u, "weights.num_bits: 4");
  expect_error(parse(compressed(R"({"num_bits": 8, "type": "int", "strategy": "channel"})", "null")), u,
               "weights.type: 'int'");
  expect_error(parse(compressed(R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128})", "null")),
               u, "weights.strategy: 'group'");
  expect_error(
      parse(compressed(R"({"num_bits": 8, "type": "float", "strategy": "channel", "group_size": 128})", "null")), u,
      "weights.group_size: 128");
  expect_error(parse(compressed(R"({"num_bits": 8, "type": "float", "strategy": "block"})", "null")), i,
               "weights.block_structure: the block strategy needs [rows, cols]");
  expect_error(
      parse(compressed(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128]})", "null")),
      i, "weights.block_structure: expected two positive integers");
  expect_error(parse(compressed(R"({"num_bits": 8, "type": "float", "symmetric": false})", "null")), u,
               "weights.symmetric");
  expect_error(parse(compressed(R"({"num_bits": 8, "type": "float", "dynamic": true})", "null")), u, "weights.dynamic");
  expect_error(
      parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": false})")), i,
      "input_activations.dynamic: the token strategy needs dynamic: true");
  expect_error(parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                                              "dynamic": false})")),
               u, "input_activations.dynamic: static group-wise inputs are not supported");
  expect_error(parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "strategy": "group", "dynamic": true})")),
               i, "input_activations.group_size: the group strategy needs a positive group size");
  expect_error(parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true,
                                              "group_size": 64})")),
               u, "input_activations.group_size: 64");
  expect_error(
      parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "strategy": "attn_head", "dynamic": true})")), u,
      "input_activations.strategy: 'attn_head'");
  expect_error(parse(compressed(kTensorW, R"({"num_bits": 8, "type": "float", "dynamic": "local"})")), u,
               "input_activations.dynamic: 'local'");
  expect_error(parse(compressed(kTensorW, "null", R"(, "kv_cache_scheme": {"num_bits": 8})")), u, "kv_cache_scheme");
  expect_error(parse(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
      "weights": )" + kTensorW +
                     R"(, "output_activations": {"num_bits": 8}}}})"),
               u, "output_activations");
  expect_error(parse(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"]}}})"), u,
               "g.weights: null");
  expect_error(parse(R"({"quant_method": "compressed-tensors", "config_groups": {}})"), i, "config_groups: no groups");
  expect_error(
      parse(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": )" + kTensorW + "}}}"), i,
      "g.targets: missing");
  expect_error(parse(R"({"quant_method": "compressed-tensors", "config_groups": {"W4A16": ["Linear"]}})"), u,
               "preset scheme 'W4A16'");
  expect_error(parse(R"({"quant_method": "compressed-tensors", "config_groups": {
      "a": {"targets": ["re:.*self_attn.*"], "weights": )" +
                     kTensorW + R"(},
      "b": {"targets": ["re:.*mlp.*"], "weights": )" +
                     kChannelW + R"(}}})"),
               u, "different schemes");
  expect_error(parse(with(compressed(kTensorW, "null"), "ignore", {"re:(unclosed"})), i,
               "'re:(unclosed' is not a regular expression");
  expect_error(parse(with(compressed(kTensorW, "null"), "ignore", "lm_head")), i, "ignore: expected a list");
  expect_error(parse(compressed("7", "null")), i, "weights");
  expect_error(parse(R"({"quant_method": "fp8", "activation_scheme": "per-token"})"), i,
               "activation_scheme: 'per-token': expected static or dynamic");
  expect_error(parse(R"({"quant_method": "fp8", "kv_cache_scheme": "static"})"), u, "kv_cache_scheme");
  expect_error(parse(R"({"quant_method": "fp8", "fmt": "e5m2"})"), u, "fmt: 'e5m2'");
  expect_error(parse(R"({"quant_method": "fp8", "ignored_layers": [3]})"), i, "ignored_layers");
  expect_error(parse(R"({"quant_method": "fp8", "activation_scheme": 1})"), i, "activation_scheme");
}

// ---- Tensors.

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mmserve_fp8_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// E4M3 codes and their values, worked by hand from the layout (sign, 4 exponent bits of bias 7, 3 mantissa bits;
// exponent field 0: subnormal, m * 2^-9).
constexpr uint8_t kCodes[] = {0x00, 0x38, 0x3C, 0x40, 0x30, 0xC4, 0x7E, 0x01, 0x08, 0xB9, 0x33, 0xAA};
constexpr float kValues[] = {0.0f,          // 0 0000 000
                             1.0f,          // 0 0111 000: 2^0
                             1.5f,          // 0 0111 100: 1.5 * 2^0
                             2.0f,          // 0 1000 000: 2^1
                             0.5f,          // 0 0110 000: 2^-1
                             -3.0f,         // 1 1000 100: -1.5 * 2^1
                             448.0f,        // 0 1111 110: 1.75 * 2^8, the largest
                             0.001953125f,  // 0 0000 001: 2^-9, the smallest subnormal
                             0.015625f,     // 0 0001 000: 2^-6, the smallest normal
                             -1.125f,       // 1 0111 001
                             0.6875f,       // 0 0110 011: 1.375 * 2^-1
                             -0.3125f};     // 1 0101 010: -1.25 * 2^-2
constexpr int kCount = 12;

TEST(Fp8Tensors, CodesAndSafetensorsDtypes) {
  for (int i = 0; i < kCount; ++i)
    EXPECT_EQ(kernels::fp8_decode(kCodes[i], kernels::Fp8Format::kE4M3), kValues[i]) << i;
  const fs::path dir = temp_dir("dtypes");
  fs::create_directories(dir);
  const uint8_t e4[4] = {0x38, 0x7E, 0x01, 0xC4}, e5[2] = {0x3C, 0x7B};  // E5M2: 1.0, 57344
  ASSERT_TRUE(write_safetensors((dir / "t.safetensors").string(),
                                {{"a", DType::kF8E4M3, {2, 2}, e4}, {"b", DType::kF8E5M2, {2}, e5}})
                  .ok());
  auto f = SafetensorsFile::open((dir / "t.safetensors").string());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const TensorInfo* a = (*f)->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF8E4M3);
  EXPECT_EQ(a->nbytes, 4u);
  EXPECT_EQ(a->data[3], 0xC4);
  EXPECT_EQ((*f)->find("b")->dtype, DType::kF8E5M2);
  EXPECT_EQ(kernels::fp8_decode(0x7B, kernels::Fp8Format::kE5M2), 57344.0f);
}

TEST(Fp8Tensors, InputQuantisationOnHandWorkedValues) {
  // static, scale 0.5: 0.3 / 0.5 = 0.6 lies between 0.5625 and 0.625 (steps of 1/16 in [0.5, 1)): 0.625 -> 0.3125;
  // 300 / 0.5 = 600 saturates at 448 -> 224; -0.01 / 0.5 = -0.02 -> -0.01953125 (1.25 * 2^-6) -> -0.009765625.
  const float x[3] = {0.3f, 300.0f, -0.01f};
  float y[3];
  fp8_fake_quantize_input({Fp8InputScale::kStatic, 0.5f}, x, 1, 3, y);
  EXPECT_EQ(y[0], 0.3125f);
  EXPECT_EQ(y[1], 224.0f);
  EXPECT_EQ(y[2], -0.009765625f);
  // per token: row amax -> 448 exactly; 1.0 in a row of amax 3 is 1 * 448 / 3 = 149.33 -> 144 (steps of 16 in
  // [128, 256)) -> 144 * 3 / 448 = 0.964285...
  const float rows[4] = {3.0f, 1.0f, -0.5f, 0.25f};
  float out[4];
  fp8_fake_quantize_input({Fp8InputScale::kDynamicToken, 0.0f}, rows, 2, 2, out);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_FLOAT_EQ(out[1], 144.0f * (3.0f / 448.0f));
  EXPECT_EQ(out[2], -0.5f);
  EXPECT_EQ(out[3], 0.25f);  // 0.25 / (0.5 / 448) = 224 exactly
  // per tensor: one amax (3) for both rows: 0.25 * 448 / 3 = 37.33 -> 36 (steps of 4 in [32, 64)).
  fp8_fake_quantize_input({Fp8InputScale::kDynamicTensor, 0.0f}, rows, 2, 2, out);
  EXPECT_FLOAT_EQ(out[3], 36.0f * (3.0f / 448.0f));
}

// The fixture's tensors with every decoder linear (q/k/v/o, gate/up/down) replaced by hand-written FP8 codes; the
// expected f32 weights (hand values times the scale) are written as a plain checkpoint beside it.
struct HandMade {
  std::string fp8_dir, f32_dir;
};

enum class Scales { kTensorF32, kChannelBf16, kAutoFp8Scalar, kBlock48x40 };
constexpr int64_t kBlockN = 48, kBlockK = 40;  // ragged on purpose: the tiny Llama's 64 / 96 are no multiples

// The block-wise scale of block (br, bc): 2^-10 * (1 + (br + 2 bc) % 3), exact in f32.
float block_scale(int64_t br, int64_t bc) {
  return std::ldexp(1.0f + static_cast<float>((br + 2 * bc) % 3), -10);
}

HandMade write_hand_made(const std::string& name, Scales scales, const json& quant, bool input_scales,
                         const std::string& drop = "", bool f32_linear = false,
                         const std::string& block_scale_name = ".weight_scale_inv") {
  HandMade h{temp_dir(name + "_fp8").string(), temp_dir(name + "_f32").string()};
  auto store = WeightStore::open_model_dir(fixture(kBase));
  EXPECT_TRUE(store.ok()) << store.status().to_string() << " (a fixture folder missing? rerun in a few minutes)";
  if (!store.ok()) return h;
  std::deque<std::vector<uint8_t>> bytes;
  std::deque<std::vector<float>> floats;
  std::deque<std::vector<uint16_t>> halves;
  std::vector<TensorToWrite> fp8, f32;
  int linear = 0;
  for (const std::string& tensor : (*store)->names()) {
    const TensorInfo* t = (*store)->find(tensor);
    if (!is_quantizable_linear(tensor, t->shape.size())) {
      fp8.push_back({tensor, t->dtype, t->shape, t->data});
      f32.push_back({tensor, t->dtype, t->shape, t->data});
      continue;
    }
    const std::string prefix = tensor.substr(0, tensor.size() - 7);
    const int64_t n = t->shape[0], k = t->shape[1];
    std::vector<uint8_t>& codes = bytes.emplace_back(static_cast<size_t>(n * k));
    std::vector<float>& expected = floats.emplace_back(static_cast<size_t>(n * k));
    std::vector<float>& row_scale = floats.emplace_back(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      // 2^-9 per tensor; per channel 2^-10 * (1 + r % 4): exact in bf16 and f32, products exact in f32.
      row_scale[r] = scales == Scales::kChannelBf16 ? std::ldexp(1.0f + static_cast<float>(r % 4), -10) : 0.001953125f;
      for (int64_t c = 0; c < k; ++c) {
        const int i = static_cast<int>((r * 7 + c * 5 + linear) % kCount);
        codes[r * k + c] = kCodes[i];
        const float sc = scales == Scales::kBlock48x40 ? block_scale(r / kBlockN, c / kBlockK) : row_scale[r];
        expected[r * k + c] = kValues[i] * sc;
      }
    }
    ++linear;
    f32.push_back({tensor, DType::kF32, {n, k}, expected.data()});
    if (f32_linear) {
      fp8.push_back({tensor, DType::kF32, {n, k}, expected.data()});
    } else {
      fp8.push_back({tensor, DType::kF8E4M3, {n, k}, codes.data()});
    }
    if (scales == Scales::kBlock48x40) {
      const int64_t br = (n + kBlockN - 1) / kBlockN, bc = (k + kBlockK - 1) / kBlockK;
      std::vector<float>& b = floats.emplace_back(static_cast<size_t>(br * bc));
      for (int64_t i = 0; i < br * bc; ++i) b[i] = block_scale(i / bc, i % bc);
      fp8.push_back({prefix + block_scale_name, DType::kF32, {br, bc}, b.data()});
    } else if (prefix + ".weight_scale" != drop) {
      if (scales == Scales::kChannelBf16) {
        std::vector<uint16_t>& b = halves.emplace_back(static_cast<size_t>(n));
        for (int64_t r = 0; r < n; ++r) b[r] = f32_to_bf16(row_scale[r]);
        fp8.push_back({prefix + ".weight_scale", DType::kBF16, {n, 1}, b.data()});
      } else {
        fp8.push_back({prefix + ".weight_scale", DType::kF32,
                       scales == Scales::kAutoFp8Scalar ? std::vector<int64_t>{} : std::vector<int64_t>{1},
                       row_scale.data()});
      }
    }
    if (input_scales && prefix + ".input_scale" != drop) {
      std::vector<float>& s = floats.emplace_back(std::vector<float>{1.0f});
      fp8.push_back({prefix + ".input_scale", DType::kF32, {}, s.data()});
    }
  }
  for (const auto& [dir, tensors, q] : {std::tuple{h.fp8_dir, &fp8, quant}, std::tuple{h.f32_dir, &f32, json()}}) {
    fs::create_directories(dir);
    EXPECT_TRUE(write_safetensors(dir + "/model.safetensors", *tensors).ok());
    auto config = read_json_file(fixture(kBase) + "/config.json");
    EXPECT_TRUE(config.ok());
    if (!q.is_null()) (*config)["quantization_config"] = q;
    std::ofstream(dir + "/config.json") << config->dump();
  }
  return h;
}

using quant_test::prompt_logits;

const std::vector<int32_t> kPrompt = {1, 68, 71, 12, 144, 6, 13, 107, 234};

void expect_same_model(const HandMade& h) {
  auto q = LlamaModel::load(h.fp8_dir);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  auto f = LlamaModel::load(h.f32_dir);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::vector<float> a = prompt_logits(**q, kPrompt), b = prompt_logits(**f, kPrompt);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

// The FP8 checkpoint of `h`, whose inputs are quantised, against the f32 checkpoint of its weights: different, within
// a relative rms of 0.2 (E4M3's 3 mantissa bits on every linear's input). Returns the FP8 model's logits.
std::vector<float> expect_close_to_f32(const HandMade& h) {
  auto q = LlamaModel::load(h.fp8_dir);
  auto f = LlamaModel::load(h.f32_dir);
  EXPECT_TRUE(q.ok() && f.ok()) << (q.ok() ? f.status() : q.status()).to_string();
  if (!q.ok() || !f.ok()) return {};
  const std::vector<float> a = prompt_logits(**q, kPrompt), b = prompt_logits(**f, kPrompt);
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) diff2 += (a[i] - b[i]) * (a[i] - b[i]), ref2 += b[i] * b[i];
  EXPECT_GT(diff2, 0.0);
  EXPECT_LT(std::sqrt(diff2 / ref2), 0.2);
  return a;
}

TEST(Fp8Load, HandWrittenCodesGiveTheHandComputedWeights) {
  const json weight_only = json::parse(compressed(kTensorW, "null"));
  SCOPED_TRACE("compressed-tensors, per tensor, f32 scales");
  expect_same_model(write_hand_made("tensor", Scales::kTensorF32, weight_only, false));
  SCOPED_TRACE("compressed-tensors, per channel [n, 1], bf16 scales");
  expect_same_model(
      write_hand_made("channel", Scales::kChannelBf16, json::parse(compressed(kChannelW, "null")), false));
}

TEST(Fp8Load, AutoFp8StaticCheckpoint) {
  // AutoFP8 stores 0-d weight_scale and input_scale tensors; its inputs are quantised with input_scale (1 here: no
  // input of this model reaches 448, so only the rounding to 3 mantissa bits is seen).
  const json autofp8 = {{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"ignored_layers", {"lm_head"}}};
  const HandMade h = write_hand_made("autofp8", Scales::kAutoFp8Scalar, autofp8, true);
  const std::vector<float> a = expect_close_to_f32(h);  // the inputs quantised to E4M3's 3 mantissa bits
  // Dynamic per tensor (AutoFP8's FP8DynamicLinear): no input_scale, each input's own amax; not the static model.
  const json dynamic = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"ignored_layers", {"lm_head"}}};
  const std::vector<float> c =
      expect_close_to_f32(write_hand_made("autofp8_dynamic", Scales::kAutoFp8Scalar, dynamic, false));
  EXPECT_NE(c, a);
}

// transformers' FineGrainedFP8 layout: weight_scale_inv per 48 x 40 block (ragged at the edges), inputs dynamic per
// token and group of 40 columns. The weights are checked through the reader against the hand-computed ones; the
// model loads and stays close to the f32 model of those weights (its inputs are quantised per group).
TEST(Fp8Load, BlockWiseScales) {
  const json block = {
      {"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {kBlockN, kBlockK}}};
  const HandMade h = write_hand_made("block", Scales::kBlock48x40, block, false);
  auto config = parse_quant_config(json{{"quantization_config", block}}, "config.json");
  ASSERT_TRUE(config.ok());
  auto store = WeightStore::open_model_dir(h.fp8_dir);
  auto f32 = WeightStore::open_model_dir(h.f32_dir);
  ASSERT_TRUE(store.ok() && f32.ok());
  for (const char* m :
       {"model.layers.0.mlp.down_proj", "model.layers.1.self_attn.k_proj", "model.layers.1.mlp.up_proj"}) {
    const TensorInfo* want = (*f32)->find(std::string(m) + ".weight");
    auto w = read_fp8_linear(**store, *config, m, want->shape[0], want->shape[1]);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    const std::vector<float> got = dequantize_fp8(*w);
    ASSERT_EQ(std::memcmp(got.data(), want->data, got.size() * sizeof(float)), 0) << m;
  }
  const std::vector<float> hf_layout = expect_close_to_f32(h);
  // Groups on hand-worked values: [3, 1 | -0.5, 0.25] in groups of 2: each group's amax maps to 448.
  const float x[4] = {3.0f, 1.0f, -0.5f, 0.25f};
  float y[4];
  fp8_fake_quantize_input({Fp8InputScale::kDynamicGroup, 0.0f, 2}, x, 1, 4, y);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_FLOAT_EQ(y[1], 144.0f * (3.0f / 448.0f));
  EXPECT_EQ(y[2], -0.5f);
  EXPECT_EQ(y[3], 0.25f);
  // compressed-tensors' block strategy: the same blocks under the name weight_scale.
  const json ct = json::parse(
      compressed(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [48, 40]})",
                 R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 40, "dynamic": true})"));
  const HandMade c = write_hand_made("block_ct", Scales::kBlock48x40, ct, false, "", false, ".weight_scale");
  auto qc = LlamaModel::load(c.fp8_dir);
  ASSERT_TRUE(qc.ok()) << qc.status().to_string();
  EXPECT_EQ(prompt_logits(**qc, kPrompt), hf_layout);  // the same weights, the same groups
  // A wrong block grid is named.
  const HandMade wrong = write_hand_made("block_wrong", Scales::kBlock48x40,
                                         {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}}, false);
  auto bad = LlamaModel::load(wrong.fp8_dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers.0.mlp.gate_proj.weight_scale_inv: shape [2, 2], expected [3, 2]"),
            std::string::npos)
      << bad.status().message();
}

TEST(Fp8Load, BrokenCheckpointsNameTheTensor) {
  const json static_q = json::parse(compressed(kTensorW, kStaticIn));
  auto expect_load_error = [](const HandMade& h, const std::string& needle) {
    auto m = LlamaModel::load(h.fp8_dir);
    ASSERT_FALSE(m.ok()) << "expected: " << needle;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message() << "\nexpected: " << needle;
  };
  expect_load_error(
      write_hand_made("no_input_scale", Scales::kTensorF32, static_q, true, "model.layers.1.mlp.up_proj.input_scale"),
      "model.layers.1.mlp.up_proj.input_scale: missing");
  expect_load_error(write_hand_made("no_weight_scale", Scales::kTensorF32, static_q, true,
                                    "model.layers.0.self_attn.o_proj.weight_scale"),
                    "model.layers.0.self_attn.o_proj.weight_scale: missing");
  expect_load_error(write_hand_made("f32_linear", Scales::kTensorF32, static_q, true, "", true),
                    "self_attn.q_proj.weight: dtype f32, expected f8e4m3");
  // Per-channel scales where the config says per tensor.
  expect_load_error(write_hand_made("wrong_shape", Scales::kChannelBf16, static_q, true),
                    "self_attn.q_proj.weight_scale: shape [64, 1], expected [] or [1]");
}

TEST(Fp8Load, BadScaleValueAndMixtralInputs) {
  QuantConfig c;
  c.method = QuantMethod::kFp8;
  c.fp8_inputs = Fp8InputScale::kStatic;
  auto plan = plan_quantized_weights(c, {{"model.layers.0.block_sparse_moe.experts.0.w1.weight", {8, 8}}});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(plan.status().message().find("experts.0.w1: FP8 inputs of Mixtral"), std::string::npos);
  c.fp8_inputs = Fp8InputScale::kNone;  // weight-only FP8 is read there
  EXPECT_TRUE(plan_quantized_weights(c, {{"model.layers.0.block_sparse_moe.experts.0.w1.weight", {8, 8}}}).ok());
  // A zero or negative scale.
  const fs::path dir = temp_dir("bad_scale");
  fs::create_directories(dir);
  const uint8_t codes[4] = {0x38, 0x38, 0x38, 0x38};
  const float zero = 0.0f, nan = std::nanf("");
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), {{"a.weight", DType::kF8E4M3, {2, 2}, codes},
                                                                       {"a.weight_scale", DType::kF32, {1}, &zero},
                                                                       {"b.weight", DType::kF8E4M3, {2, 2}, codes},
                                                                       {"b.weight_scale", DType::kF32, {1}, &nan}})
                  .ok());
  auto store = WeightStore::open_model_dir(dir.string());
  ASSERT_TRUE(store.ok());
  auto a = read_fp8_linear(**store, c, "a", 2, 2);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("a.weight_scale: a scale of 0"), std::string::npos) << a.status().message();
  auto b = read_fp8_linear(**store, c, "b", 2, 2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("positive and finite"), std::string::npos) << b.status().message();
  auto shape = read_fp8_linear(**store, c, "a", 4, 1);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("a.weight: shape [2, 2], expected [4, 1]"), std::string::npos);
}

}  // namespace
}  // namespace mmserve::models
