// The real tiny Llama: llama2.c's stories260K (tests/fixtures/llama2c, see the fixtures README) converted by
// convert_llama2c into an HF directory and run by LlamaModel. Greedy decoding from BOS must reproduce the text
// that llama2.c's reference run.c printed (stories260K_golden_t0.txt: temperature 0, 256 steps) word for word.
// The ids are turned into text by a transcription of run.c's own decode (its piece table; a piece after BOS loses
// its leading space; <0xNN> pieces are raw bytes), the reference's rule, not ours. Also: the converted directory's
// config and tensors, and broken llama2.c files refused with a message and nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../conformance/golden.h"
#include "models/llama/llama.h"
#include "models/llama/llama2c.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// run.c's vocabulary (read_tokenizer) and decode().
std::vector<std::string> runc_vocab(const std::string& path) {
  const std::string b = read(path);
  std::vector<std::string> vocab;
  size_t off = 4;
  while (off + 8 <= b.size()) {
    int32_t len = 0;
    std::memcpy(&len, b.data() + off + 4, 4);
    off += 8;
    vocab.push_back(b.substr(off, static_cast<size_t>(len)));
    off += static_cast<size_t>(len);
  }
  return vocab;
}

std::string runc_decode(const std::vector<std::string>& vocab, int32_t prev, int32_t token) {
  std::string piece = vocab.at(static_cast<size_t>(token));
  if (prev == 1 && !piece.empty() && piece[0] == ' ') piece = piece.substr(1);
  unsigned byte = 0;
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X>", &byte) == 1) return std::string(1, char(byte));
  return piece;
}

class LlamaStories : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mmserve_stories_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string fixture(const std::string& name) const {
    // The model files live in assets/llama2c (compiled into the binary as the demo decoder); the golden here.
    return testing::fixture(name == "stories260K_golden_t0.txt" ? "llama2c/" + name : "../../assets/llama2c/" + name);
  }
  fs::path dir_;
};

TEST_F(LlamaStories, GreedyFromBosReproducesRunC) {
  ASSERT_TRUE(convert_llama2c(fixture("stories260K.bin"), fixture("tok512.bin"), dir_.string()).ok());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / f)) << f;
  }
  auto model = LlamaModel::load(dir_.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const LlamaConfig& c = (*model)->config();
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);  // grouped-query attention
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  // run.c with -n 256: 256 forwards from position 0 (BOS), each printing the token it picks; a generated BOS
  // (id 1) would end the story.
  auto ids = (*model)->greedy({1}, 256, /*ignore_eos=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  const std::vector<std::string> vocab = runc_vocab(fixture("tok512.bin"));
  std::string text;
  int32_t prev = 1;
  for (int32_t id : *ids) {
    if (id == 1) break;
    text += runc_decode(vocab, prev, id);
    prev = id;
  }
  std::string golden = read(fixture("stories260K_golden_t0.txt"));
  // run.c prints a newline after the story; compare without trailing newlines on either side.
  while (!golden.empty() && golden.back() == '\n') golden.pop_back();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  EXPECT_EQ(text, golden);
  std::printf("  %zu ids; text: %.60s...\n", ids->size(), text.c_str());
}

TEST_F(LlamaStories, BrokenFilesAreRefusedAndNothingIsWritten) {
  const std::string good = read(fixture("stories260K.bin")), tok = read(fixture("tok512.bin"));
  const fs::path bad = fs::temp_directory_path() / ("mmserve_bad_l2c_" + std::to_string(::getpid()));
  auto write = [&](const std::string& bytes) { std::ofstream(bad, std::ios::binary) << bytes; };
  std::string zero_dim = good;
  std::memset(zero_dim.data(), 0, 4);
  std::string odd_heads = good;
  const int32_t seven = 7;
  std::memcpy(odd_heads.data() + 12, &seven, 4);  // n_heads 7 does not divide dim 64
  for (const std::string& broken : {good.substr(0, 20), good.substr(0, good.size() - 4), good + "x", zero_dim,
                                    odd_heads}) {
    write(broken);
    const Status s = convert_llama2c(bad.string(), fixture("tok512.bin"), dir_.string());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(bad.string()), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(dir_));
  }
  std::string bad_utf8 = tok;
  const size_t piece = bad_utf8.find("he");  // token 260 ("he"): its first byte becomes a lone continuation byte
  ASSERT_NE(piece, std::string::npos);
  bad_utf8[piece] = static_cast<char>(0x80);
  for (const std::string& broken : {tok.substr(0, 2), tok.substr(0, tok.size() - 3), tok + "extra", bad_utf8}) {
    write(broken);
    const Status s = convert_llama2c(fixture("stories260K.bin"), bad.string(), dir_.string());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_FALSE(fs::exists(dir_));
  }
  EXPECT_EQ(convert_llama2c("/nonexistent.bin", fixture("tok512.bin"), dir_.string()).code(), StatusCode::kNotFound);
  fs::remove(bad);
}

}  // namespace
}  // namespace mmserve::models
