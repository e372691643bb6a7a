// The adapter router (issue 16 item 4) against a PyTorch reference of the same MLP (tools/reference/
// make_gate_fixtures.py: tests/fixtures/lora_gate): the router's embedding (the mean of the decoder's input rows over
// the prompt) equals torch's embed_tokens mean, the softmax within 1e-5, the top-2 choice and its renormalised
// weights as torch's; broken gate files are refused naming what is wrong.
#include "models/lora/gate_head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../conformance/golden.h"
#include "core/safetensors.h"
#include "models/llama/llama.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

TEST(GateHead, RoutesAsTheTorchReference) {
  const std::string dir = testing::fixture("lora_gate");
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir + "/golden.json"));
  testing::Golden golden(dir + "/golden.safetensors");
  auto gate = GateHead::load(dir + "/gate.safetensors");
  ASSERT_TRUE(gate.ok()) << gate.status().to_string();
  EXPECT_EQ(gate->adapters(), meta["adapters"].get<std::vector<std::string>>());
  auto model = LlamaModel::load(testing::fixture("llama/llama-gqa-f32"));
  ASSERT_TRUE(model.ok());
  const int64_t d = gate->input_dim(), n = static_cast<int64_t>(gate->adapters().size());
  const std::vector<float> embeddings = golden.f32("embeddings"), probs = golden.f32("probs");
  const std::vector<int64_t> top2 = golden.i64("top2");
  const std::vector<float> weights = golden.f32("top2_weights");
  const auto prompts = meta["prompts"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_GE(prompts.size(), 4u);
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE(p);
    auto e = (*model)->mean_input_embedding(prompts[p]);
    ASSERT_TRUE(e.ok());
    for (int64_t c = 0; c < d; ++c) EXPECT_NEAR((*e)[c], embeddings[p * d + c], 1e-6);
    auto choice = gate->route(*e, 2);
    ASSERT_TRUE(choice.ok());
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(choice->probs[j], probs[p * n + j], 1e-5);
    EXPECT_EQ(choice->index, (std::vector<int64_t>{top2[p * 2], top2[p * 2 + 1]}));
    EXPECT_NEAR(choice->weight[0], weights[p * 2], 1e-5);
    EXPECT_NEAR(choice->weight[1], weights[p * 2 + 1], 1e-5);
  }
  EXPECT_EQ(gate->route(std::vector<float>(3), 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gate->route(std::vector<float>(static_cast<size_t>(d)), 4).status().code(), StatusCode::kInvalidArgument);
}

TEST(GateHead, BrokenGatesAreRefused) {
  const fs::path root = fs::temp_directory_path() / ("mmserve_gate_" + std::to_string(::getpid()));
  fs::create_directories(root);
  std::vector<float> w1(4 * 3), b1(4), w2(2 * 4), b2(2);
  auto write = [&](const std::vector<TensorToWrite>& tensors, const std::string& names) {
    EXPECT_TRUE(write_safetensors((root / "gate.safetensors").string(), tensors).ok());
    std::ofstream(root / "gate.json") << names;
    return GateHead::load((root / "gate.safetensors").string());
  };
  const std::vector<TensorToWrite> good = {{"gate.0.weight", DType::kF32, {4, 3}, w1.data()},
                                           {"gate.0.bias", DType::kF32, {4}, b1.data()},
                                           {"gate.2.weight", DType::kF32, {2, 4}, w2.data()},
                                           {"gate.2.bias", DType::kF32, {2}, b2.data()}};
  EXPECT_TRUE(write(good, R"({"adapters": ["a", "b"]})").ok());
  auto count = write(good, R"({"adapters": ["a"]})");
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("2 outputs"), std::string::npos) << count.status().message();
  EXPECT_FALSE(write(good, R"({"adapters": ["a", 3]})").ok());
  EXPECT_FALSE(write(good, R"(["a", "b"])").ok());
  std::vector<TensorToWrite> bad_bias = good;
  bad_bias[1].shape = {3};
  auto bias = write(bad_bias, R"({"adapters": ["a", "b"]})");
  ASSERT_FALSE(bias.ok());
  EXPECT_NE(bias.status().message().find("gate.0.bias"), std::string::npos);
  auto missing = write({good[0], good[1], good[2]}, R"({"adapters": ["a", "b"]})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("gate.2.bias"), std::string::npos);
  fs::remove_all(root);
}

// The broken gate files BrokenGatesAreRefused leaves out (and gate_head_fuzz's seeds): a cut safetensors file, a
// gate.json that is not JSON or is missing, the second layer's width disagreeing with the first's, a 1-D weight, an
// empty name and integer weights. Each is a Status naming the file, the key or the tensor; none is a crash.
TEST(GateHead, BrokenGateFilesAreRefusedNamingWhatIsWrong) {
  const fs::path root = fs::temp_directory_path() / ("mmserve_gate_files_" + std::to_string(::getpid()));
  fs::create_directories(root);
  const std::string gate_path = (root / "gate.safetensors").string();
  std::vector<float> w1(4 * 3), b1(4), w2(2 * 4), b2(2), wide(2 * 5);
  std::vector<int32_t> ints(4 * 3);
  const std::vector<TensorToWrite> good = {{"gate.0.weight", DType::kF32, {4, 3}, w1.data()},
                                           {"gate.0.bias", DType::kF32, {4}, b1.data()},
                                           {"gate.2.weight", DType::kF32, {2, 4}, w2.data()},
                                           {"gate.2.bias", DType::kF32, {2}, b2.data()}};
  const std::string names = R"({"adapters": ["a", "b"]})";
  // Writes the two files ("" names: no gate.json) and loads; the refusal's message must hold `needle`.
  auto refused = [&](const std::vector<TensorToWrite>& tensors, const std::string& json, const std::string& needle) {
    fs::remove(root / "gate.json");
    EXPECT_TRUE(write_safetensors(gate_path, tensors).ok());
    if (!json.empty()) std::ofstream(root / "gate.json") << json;
    auto gate = GateHead::load(gate_path);
    ASSERT_FALSE(gate.ok()) << needle;
    EXPECT_NE(gate.status().message().find(needle), std::string::npos) << gate.status().message();
  };
  {
    SCOPED_TRACE("the good files load");
    EXPECT_TRUE(write_safetensors(gate_path, good).ok());
    std::ofstream(root / "gate.json") << names;
    ASSERT_TRUE(GateHead::load(gate_path).ok());
  }
  {
    SCOPED_TRACE("a truncated gate.safetensors");
    const auto size = fs::file_size(gate_path);
    fs::resize_file(gate_path, size - 5);
    auto gate = GateHead::load(gate_path);
    ASSERT_FALSE(gate.ok());
    EXPECT_NE(gate.status().message().find("gate.safetensors"), std::string::npos) << gate.status().message();
  }
  refused(good, R"({"adapters": ["a", "b"])", "gate.json");  // not JSON
  refused(good, "", "gate.json");                            // missing
  refused(good, R"({"adapters": ["a", ""]})", "gate.json");  // an empty name
  std::vector<TensorToWrite> wide_w2 = good;                 // [N, 5] after a hidden layer of 4
  wide_w2[2] = {"gate.2.weight", DType::kF32, {2, 5}, wide.data()};
  refused(wide_w2, names, "gate.2.weight");
  std::vector<TensorToWrite> flat = good;  // gate.0.weight is a vector
  flat[0] = {"gate.0.weight", DType::kF32, {12}, w1.data()};
  refused(flat, names, "gate.0.weight");
  std::vector<TensorToWrite> integers = good;
  integers[0] = {"gate.0.weight", DType::kI32, {4, 3}, ints.data()};
  refused(integers, names, "gate.0.weight");
  fs::remove_all(root);
}

}  // namespace
}  // namespace mmserve::models
