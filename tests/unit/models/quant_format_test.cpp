// W4A16 checkpoint formats (issue 17): quantization_config parsing and its refusals; AWQ GEMM and GPTQ v1/v2
// unpacking checked bit by bit against int32 words worked by hand from the published packing (AutoAWQ's
// WQLinear_GEMM.from_linear order_map [0, 2, 4, 6, 1, 3, 5, 7]; AutoGPTQ's QuantLinear.pack: qweight along K,
// qzeros along N, v1 storing zero - 1), never against words our own packer produced; round trips through our packers;
// every refusal of a broken checkpoint with the tensor it names; dequantize's exact f32 values.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "models/quant/int4_checkpoint.h"
#include "models/quant/quant_config.h"
#include "models/quant/quant_load.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

StatusOr<QuantConfig> parse(const std::string& quantization_config) {
  return parse_quant_config(json::parse(R"({"quantization_config": )" + quantization_config + "}"), "config.json");
}

void expect_error(const StatusOr<QuantConfig>& c, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message() << "\nwanted: " << needle;
}

TEST(QuantConfig, ReadsAwqAndGptqAsTheHubWritesThem) {
  auto none = parse_quant_config(json::parse(R"({"hidden_size": 64})"), "config.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->quantized());
  // AutoAWQ's save_quantized (transformers' AwqConfig keys).
  auto awq = parse(R"({"quant_method": "awq", "zero_point": true, "group_size": 128, "bits": 4, "version": "gemm",
                       "modules_to_not_convert": null})");
  ASSERT_TRUE(awq.ok()) << awq.status().to_string();
  EXPECT_EQ(awq->method, QuantMethod::kAwq);
  EXPECT_EQ(awq->group_size, 128);
  EXPECT_TRUE(awq->zero_point);
  EXPECT_EQ(awq->format_name(), "awq gemm");
  // AutoAWQ's own quant_config.json spelling.
  auto awq_old = parse(R"({"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": false, "version": "GEMM",
                           "modules_to_not_convert": ["gate"]})");
  ASSERT_TRUE(awq_old.ok()) << awq_old.status().to_string();
  EXPECT_EQ(awq_old->group_size, 64);
  EXPECT_FALSE(awq_old->zero_point);
  EXPECT_EQ(awq_old->modules_to_not_convert, std::vector<std::string>{"gate"});
  auto gptq = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": true, "sym": false,
                        "damp_percent": 0.01, "true_sequential": true})");
  ASSERT_TRUE(gptq.ok()) << gptq.status().to_string();
  EXPECT_EQ(gptq->method, QuantMethod::kGptq);
  EXPECT_EQ(gptq->group_size_for(96), 96);
  EXPECT_TRUE(gptq->desc_act);
  EXPECT_FALSE(gptq->sym);
  EXPECT_FALSE(gptq->gptq_v2);
  auto v2 = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "checkpoint_format": "gptq_v2"})");
  ASSERT_TRUE(v2.ok());
  EXPECT_TRUE(v2->gptq_v2);
  EXPECT_EQ(v2->format_name(), "gptq v2");
  auto v2_format = parse(R"({"quant_method": "gptq", "format": "gptq_v2"})");  // gptqmodel's older key
  ASSERT_TRUE(v2_format.ok());
  EXPECT_TRUE(v2_format->gptq_v2);
}

TEST(QuantConfig, RefusesWhatItCannotReadNamingTheField) {
  expect_error(parse(R"({"quant_method": "awq", "bits": 3})"), StatusCode::kUnimplemented, "quantization_config.bits");
  expect_error(parse(R"({"quant_method": "gptq", "bits": 8})"), StatusCode::kUnimplemented, "8-bit");
  expect_error(parse(R"({"quant_method": "awq", "w_bit": 5})"), StatusCode::kInvalidArgument, "quantization_config.w_bit");
  expect_error(parse(R"({"quant_method": "awq", "version": "gemv"})"), StatusCode::kUnimplemented,
               "quantization_config.version: 'gemv'");
  expect_error(parse(R"({"quant_method": "awq", "version": "marlin"})"), StatusCode::kUnimplemented, "'marlin'");
  expect_error(parse(R"({"quant_method": "awq", "backend": "llm-awq"})"), StatusCode::kUnimplemented, "backend");
  expect_error(parse(R"({"quant_method": "awq", "group_size": 0})"), StatusCode::kInvalidArgument, "group_size");
  expect_error(parse(R"({"quant_method": "gptq", "group_size": -2})"), StatusCode::kInvalidArgument, "group_size");
  expect_error(parse(R"({"quant_method": "gptq", "bits": "4"})"), StatusCode::kInvalidArgument, "bits");
  expect_error(parse(R"({"quant_method": "gptq", "desc_act": "yes"})"), StatusCode::kInvalidArgument, "desc_act");
  expect_error(parse(R"({"quant_method": "awq", "zero_point": 1})"), StatusCode::kInvalidArgument, "zero_point");
  expect_error(parse(R"({"quant_method": "gptq", "checkpoint_format": "marlin"})"), StatusCode::kUnimplemented,
               "checkpoint_format: 'marlin'");
  expect_error(parse(R"({"quant_method": "gptq", "is_marlin_format": true})"), StatusCode::kUnimplemented, "marlin");
  expect_error(parse(R"({"quant_method": "gptq", "lm_head": true})"), StatusCode::kUnimplemented, "lm_head");
  expect_error(parse(R"({"quant_method": "awq", "modules_to_not_convert": "gate"})"), StatusCode::kInvalidArgument,
               "modules_to_not_convert");
  // FP8 is read now (quant_fp8_test.cpp checks it); a compressed-tensors config needs its groups.
  expect_error(parse(R"({"quant_method": "compressed-tensors"})"), StatusCode::kInvalidArgument, "config_groups");
  expect_error(parse(R"({"quant_method": "bitsandbytes"})"), StatusCode::kUnimplemented, "'bitsandbytes'");
  expect_error(parse(R"({"bits": 4})"), StatusCode::kInvalidArgument, "quant_method");
  expect_error(parse(R"([1])"), StatusCode::kInvalidArgument, "quantization_config");
}

TEST(QuantConfig, ModulesToNotConvertMatchAtDots) {
  auto c = parse(R"({"quant_method": "awq", "modules_to_not_convert": ["gate", "model.layers.1.mlp", "q_proj"]})");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(quant_converts_module(*c, "model.layers.0.block_sparse_moe.gate"));
  EXPECT_TRUE(quant_converts_module(*c, "model.layers.0.mlp.gate_proj"));  // "gate" is not "gate_proj"
  EXPECT_FALSE(quant_converts_module(*c, "model.layers.1.mlp.down_proj"));
  EXPECT_TRUE(quant_converts_module(*c, "model.layers.10.mlp.down_proj"));
  EXPECT_FALSE(quant_converts_module(*c, "model.layers.3.self_attn.q_proj"));
  EXPECT_TRUE(quant_converts_module(*c, "model.layers.3.self_attn.k_proj"));
}

// ---- A store holding hand-made tensors.

struct Tensors {
  std::vector<TensorToWrite> list;
  std::vector<std::vector<uint8_t>> bytes;  // owned storage
  template <typename T>
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    bytes.emplace_back(reinterpret_cast<const uint8_t*>(values.data()),
                       reinterpret_cast<const uint8_t*>(values.data() + values.size()));
    list.push_back({name, dtype, std::move(shape), nullptr});
  }
  std::unique_ptr<WeightStore> store(const std::string& name) {
    for (size_t i = 0; i < list.size(); ++i) list[i].data = bytes[i].data();
    const fs::path dir = fs::temp_directory_path() / ("mmserve_quant_format_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    EXPECT_TRUE(write_safetensors((dir / "model.safetensors").string(), list).ok());
    auto s = WeightStore::open_model_dir(dir.string());
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }
};

std::vector<uint16_t> f16s(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(f32_to_f16(f));
  return out;
}

QuantConfig awq_config(int64_t group_size) {
  QuantConfig c;
  c.method = QuantMethod::kAwq, c.group_size = group_size;
  return c;
}
QuantConfig gptq_config(int64_t group_size, bool v2) {
  QuantConfig c;
  c.method = QuantMethod::kGptq, c.group_size = group_size, c.gptq_v2 = v2;
  return c;
}

// AWQ: K = 2 input rows, N = 8 columns, one group. Words worked by hand from from_linear's loop
// `qweight[:, col] |= intweight[:, col * 8 + order_map[i]] << (4 * i)`, order_map = [0, 2, 4, 6, 1, 3, 5, 7]:
// row 0 holds q = column index (nibbles 0,2,4,6,1,3,5,7 -> 0x75316420), row 1 holds q = 8 + column index
// (0xFDB9ECA8, negative as an int32). qzeros 0x87654321: nibble i = i + 1 goes to column order_map[i], so the
// columns' zeros are [1, 5, 2, 6, 3, 7, 4, 8].
TEST(Int4Checkpoint, UnpacksAwqsInterleavedOrder) {
  Tensors t;
  t.add("l.qweight", DType::kI32, {2, 1}, std::vector<int32_t>{0x75316420, static_cast<int32_t>(0xFDB9ECA8u)});
  t.add("l.qzeros", DType::kI32, {1, 1}, std::vector<int32_t>{static_cast<int32_t>(0x87654321u)});
  t.add("l.scales", DType::kF16, {1, 8}, f16s({1, 1, 1, 0.5f, 1, 1, 1, 0.25f}));
  auto store = t.store("awq_bits");
  auto w = read_int4_linear(*store, awq_config(-1), "l", 8, 2);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const std::vector<uint8_t> zeros = {1, 5, 2, 6, 3, 7, 4, 8};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(w->q[c * 2 + 0], c) << c;
    EXPECT_EQ(w->q[c * 2 + 1], 8 + c) << c;
    EXPECT_EQ(w->zeros[c], zeros[c]) << c;
  }
  EXPECT_TRUE(w->g_idx.empty());
  const std::vector<float> d = dequantize(*w);
  EXPECT_EQ(d[3 * 2 + 0], (3.0f - 6.0f) * 0.5f);
  EXPECT_EQ(d[3 * 2 + 1], (11.0f - 6.0f) * 0.5f);
  EXPECT_EQ(d[7 * 2 + 1], (15.0f - 8.0f) * 0.25f);
}

// GPTQ: K = 8 inputs (one int32 row), N = 8 columns, one group. QuantLinear.pack:
// `qweight[row] |= intweight[j] << (4 * (j - i))` packs input rows 0..7 of a column into nibbles 0..7, so column 0's
// word 0x76543210 is q = k and column 1's 0xFEDCBA98 is q = 8 + k. qzeros along N in plain order; a symmetric 4-bit
// GPTQ stores zero 8 as 8 - 1 = 7 in every nibble: 0x77777777 (2004318071), the word every sym v1 file carries.
TEST(Int4Checkpoint, UnpacksGptqAlongKAndItsV1Zeros) {
  for (bool v2 : {false, true}) {
    Tensors t;
    std::vector<int32_t> qweight(8, 0);
    qweight[0] = 0x76543210;
    qweight[1] = static_cast<int32_t>(0xFEDCBA98u);
    t.add("l.qweight", DType::kI32, {1, 8}, qweight);
    t.add("l.qzeros", DType::kI32, {1, 1}, std::vector<int32_t>{0x77777777});
    t.add("l.scales", DType::kF16, {1, 8}, f16s(std::vector<float>(8, 0.125f)));
    t.add("l.g_idx", DType::kI32, {8}, std::vector<int32_t>(8, 0));
    auto store = t.store(v2 ? "gptq_v2_bits" : "gptq_v1_bits");
    auto w = read_int4_linear(*store, gptq_config(-1, v2), "l", 8, 8);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(w->q[0 * 8 + k], k);
      EXPECT_EQ(w->q[1 * 8 + k], 8 + k);
      EXPECT_EQ(w->q[2 * 8 + k], 0);
    }
    for (int c = 0; c < 8; ++c) EXPECT_EQ(w->zeros[c], v2 ? 7 : 8) << "v2 " << v2;
    EXPECT_TRUE(w->g_idx.empty());  // the trivial k / group_size is dropped
    const std::vector<float> d = dequantize(*w);
    EXPECT_EQ(d[1 * 8 + 7], (15.0f - (v2 ? 7.0f : 8.0f)) * 0.125f);
    EXPECT_EQ(d[0 * 8 + 0], (0.0f - (v2 ? 7.0f : 8.0f)) * 0.125f);
  }
}

// desc_act: g_idx assigns each input column a group; the scales and zeros follow it, not k / group_size.
TEST(Int4Checkpoint, GptqActOrderUsesGIdx) {
  Tensors t;
  std::vector<int32_t> qweight(2 * 8, 0x33333333);  // q = 3 everywhere
  t.add("l.qweight", DType::kI32, {2, 8}, qweight);
  // group 0: zero 1 (stored 0), group 1: zero 2 (stored 1), every column.
  t.add("l.qzeros", DType::kI32, {2, 1}, std::vector<int32_t>{0x00000000, 0x11111111});
  std::vector<float> scales(16, 1.0f);
  for (int c = 0; c < 8; ++c) scales[8 + c] = 3.0f;  // group 1 scale 3
  t.add("l.scales", DType::kF16, {2, 8}, f16s(scales));
  const std::vector<int32_t> g_idx = {1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1};
  t.add("l.g_idx", DType::kI32, {16}, g_idx);
  auto store = t.store("gptq_act_order");
  auto w = read_int4_linear(*store, gptq_config(8, false), "l", 8, 16);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->g_idx, g_idx);
  const std::vector<float> d = dequantize(*w);
  for (int c = 0; c < 8; ++c) {
    for (int k = 0; k < 16; ++k) EXPECT_EQ(d[c * 16 + k], g_idx[k] == 0 ? 2.0f : 3.0f) << k;  // (3-1)*1, (3-2)*3
  }
  EXPECT_EQ(w->zeros[0 * 2 + 0], 1);
  EXPECT_EQ(w->zeros[0 * 2 + 1], 2);
  EXPECT_EQ(w->scales[0 * 2 + 1], 3.0f);
}

Int4Weight random_weight(int64_t n, int64_t k, int64_t group_size, unsigned seed, int zero_min, bool act_order) {
  std::mt19937 rng(seed);
  Int4Weight w;
  w.n = n, w.k = k, w.group_size = group_size;
  for (int64_t i = 0; i < n * k; ++i) w.q.push_back(static_cast<uint8_t>(rng() % 16));
  for (int64_t i = 0; i < n * w.groups(); ++i) {
    w.zeros.push_back(static_cast<uint8_t>(zero_min + rng() % (16 - zero_min)));
    w.scales.push_back(f16_to_f32(f32_to_f16(std::ldexp(1.0f + (rng() % 1000) / 1000.0f, -static_cast<int>(rng() % 12)))));
  }
  if (act_order) {
    for (int64_t i = 0; i < k; ++i) w.g_idx.push_back(static_cast<int32_t>(rng() % w.groups()));
  }
  return w;
}

void expect_same(const Int4Weight& a, const Int4Weight& b) {
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.g_idx, b.g_idx);
}

TEST(Int4Checkpoint, RoundTripsThroughEachWriter) {
  struct Case {
    const char* name;
    QuantConfig config;
    bool act_order;
  };
  const Case cases[] = {{"awq_g32", awq_config(32), false},
                        {"awq_all", awq_config(-1), false},
                        {"gptq_v1_g32", gptq_config(32, false), false},
                        {"gptq_v1_act", gptq_config(16, false), true},
                        {"gptq_v2_all", gptq_config(-1, true), false},
                        {"gptq_v2_act", gptq_config(32, true), true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t n = 24, k = 96;
    const bool v1 = c.config.method == QuantMethod::kGptq && !c.config.gptq_v2;
    const Int4Weight w = random_weight(n, k, c.config.group_size_for(k), 7, v1 ? 1 : 0, c.act_order);
    auto packed = c.config.method == QuantMethod::kAwq ? pack_awq_gemm(w) : pack_gptq(w, c.config.gptq_v2);
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    Tensors t;
    auto store_dir = fs::temp_directory_path() / (std::string("mmserve_quant_rt_") + c.name + std::to_string(::getpid()));
    fs::create_directories(store_dir);
    ASSERT_TRUE(write_safetensors((store_dir / "model.safetensors").string(), packed_tensors("x.lin", *packed)).ok());
    auto store = WeightStore::open_model_dir(store_dir.string());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(check_weights(**store, int4_weight_specs(c.config, "x.lin", n, k)).ok());
    auto back = read_int4_linear(**store, c.config, "x.lin", n, k);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    expect_same(w, *back);
  }
}

TEST(Int4Checkpoint, WritersRefuseWhatTheFormatCannotHold) {
  Int4Weight w = random_weight(8, 32, 32, 3, 0, false);
  w.zeros[0] = 0;
  auto v1 = pack_gptq(w, false);
  ASSERT_FALSE(v1.ok());
  EXPECT_NE(v1.status().message().find("gptq_v2"), std::string::npos) << v1.status().message();
  EXPECT_TRUE(pack_gptq(w, true).ok());
  Int4Weight act = random_weight(8, 32, 16, 3, 1, true);
  EXPECT_FALSE(pack_awq_gemm(act).ok());
  Int4Weight bad = random_weight(8, 32, 32, 3, 0, false);
  bad.q[5] = 16;
  EXPECT_FALSE(pack_awq_gemm(bad).ok());
}

// A valid GPTQ linear [8, 16] in groups of 8, with one tensor then broken per case.
Tensors gptq_tensors() {
  Tensors t;
  t.add("l.qweight", DType::kI32, {2, 8}, std::vector<int32_t>(16, 0x12345678));
  t.add("l.qzeros", DType::kI32, {2, 1}, std::vector<int32_t>{0x77777777, 0x77777777});
  t.add("l.scales", DType::kF16, {2, 8}, f16s(std::vector<float>(16, 1.0f)));
  t.add("l.g_idx", DType::kI32, {16}, std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1});
  return t;
}

void expect_read_error(Tensors t, const std::string& name, const QuantConfig& config, int64_t n, int64_t k,
                       const std::string& needle) {
  auto store = t.store(name);
  auto w = read_int4_linear(*store, config, "l", n, k);
  ASSERT_FALSE(w.ok()) << name;
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find(needle), std::string::npos) << w.status().message() << "\nwanted: " << needle;
}

TEST(Int4Checkpoint, RefusesBrokenTensorsNamingThem) {
  const QuantConfig gptq = gptq_config(8, false);
  {
    Tensors t = gptq_tensors();
    EXPECT_TRUE(read_int4_linear(*t.store("gptq_valid"), gptq, "l", 8, 16).ok());
  }
  {
    Tensors t = gptq_tensors();
    t.list.erase(t.list.begin() + 1), t.bytes.erase(t.bytes.begin() + 1);
    expect_read_error(t, "no_qzeros", gptq, 8, 16, "l.qzeros: missing");
  }
  {
    Tensors t = gptq_tensors();
    t.list.pop_back(), t.bytes.pop_back();  // no g_idx: fine without act-order (GPTQ-for-LLaMa's older files)
    auto w = read_int4_linear(*t.store("no_g_idx"), gptq, "l", 8, 16);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_TRUE(w->g_idx.empty());
    QuantConfig act = gptq;
    act.desc_act = true;
    expect_read_error(t, "no_g_idx_act", act, 8, 16, "l.g_idx: missing");
  }
  {
    Tensors t = gptq_tensors();
    t.list[0].dtype = DType::kF32;  // same bytes, the wrong dtype
    expect_read_error(t, "f32_qweight", gptq, 8, 16, "l.qweight: dtype f32");
  }
  {
    Tensors t = gptq_tensors();
    t.list[2].shape = {1, 16};
    expect_read_error(t, "scales_shape", gptq, 8, 16, "l.scales: shape [1, 16], expected [2, 8]");
  }
  {
    Tensors t = gptq_tensors();
    std::vector<int32_t> g(16, 0);
    g[9] = 2;
    t.bytes[3].assign(reinterpret_cast<const uint8_t*>(g.data()), reinterpret_cast<const uint8_t*>(g.data() + 16));
    expect_read_error(t, "g_idx_range", gptq, 8, 16, "l.g_idx: g_idx[9] = 2 is outside the 2 groups");
  }
  {
    Tensors t = gptq_tensors();
    std::vector<int32_t> z = {static_cast<int32_t>(0xFFFFFFFFu), 0x77777777};  // what `zeros -= 1` of a 0 leaves
    t.bytes[1].assign(reinterpret_cast<const uint8_t*>(z.data()), reinterpret_cast<const uint8_t*>(z.data() + 2));
    expect_read_error(t, "v1_zero16", gptq, 8, 16, "l.qzeros: stored zero 15");
    auto ok_v2 = read_int4_linear(*t.store("v2_zero15"), gptq_config(8, true), "l", 8, 16);
    EXPECT_TRUE(ok_v2.ok()) << ok_v2.status().to_string();  // in v2 a stored 15 is the zero 15
  }
  // Sizes the format cannot hold: the group size must divide K, N and GPTQ's K are packed by 8.
  EXPECT_NE(check_int4_dims(gptq_config(64, false), "model.layers.0.mlp.down_proj", 64, 96).message().find(
                "model.layers.0.mlp.down_proj: group_size 64 does not divide in_features 96"),
            std::string::npos);
  EXPECT_FALSE(check_int4_dims(awq_config(32), "l", 12, 64).ok());
  EXPECT_FALSE(check_int4_dims(gptq_config(-1, false), "l", 8, 12).ok());
  EXPECT_TRUE(check_int4_dims(awq_config(-1), "l", 8, 12).ok());  // AWQ packs along N only
}

TEST(QuantLoad, PlansTheDecoderLinearsOnly) {
  const std::vector<WeightSpec> specs = {
      {"model.embed_tokens.weight", {256, 64}},
      {"model.layers.0.input_layernorm.weight", {64}},
      {"model.layers.0.self_attn.q_proj.weight", {64, 64}},
      {"model.layers.0.self_attn.q_proj.bias", {64}},
      {"model.layers.0.mlp.down_proj.weight", {64, 96}},
      {"model.layers.0.block_sparse_moe.gate.weight", {4, 64}},
      {"model.layers.0.block_sparse_moe.experts.3.w2.weight", {64, 96}},
      {"lm_head.weight", {256, 64}},
  };
  QuantConfig c = gptq_config(32, false);
  c.modules_to_not_convert = {"down_proj"};
  auto plan = plan_quantized_weights(c, specs);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->linears.size(), 2u);
  EXPECT_EQ(plan->linears[0].prefix, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(plan->linears[1].prefix, "model.layers.0.block_sparse_moe.experts.3.w2");
  EXPECT_EQ(plan->floats.size(), specs.size() - 2);
  EXPECT_EQ(plan->stored.size(), specs.size() - 2 + 2 * 4);
  c.modules_to_not_convert.clear();
  c.group_size = 64;
  auto refused = plan_quantized_weights(c, specs);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.layers.0.mlp.down_proj: group_size 64"), std::string::npos);
  auto plain = plan_quantized_weights(QuantConfig{}, specs);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->linears.empty());
  EXPECT_EQ(plain->stored.size(), specs.size());
}

}  // namespace
}  // namespace mmserve::models
