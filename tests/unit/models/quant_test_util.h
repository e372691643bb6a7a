// What the quantisation tests share (quant_quantize_test, quant_fp8_test, quant_calibrate_test): a model's prompt logits, running the mmserve binary with its exit code and both streams, and a copy of the
// tiny Llama with a byte-level tokenizer.json (256 tokens, no merges: id = byte, spelled in GPT-2's byte alphabet),
// so that a --data file's text becomes ids of the model's 256-id vocabulary.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/llama/llama.h"

namespace mmserve::models::quant_test {

// The logits of every position of `prompt` [n, vocab].
inline std::vector<float> prompt_logits(const LlamaModel& m, const std::vector<int32_t>& prompt) {
  const int64_t n = static_cast<int64_t>(prompt.size()), v = m.config().vocab_size;
  std::vector<float> out(static_cast<size_t>(n * v));
  auto cache = m.new_cache(n);
  EXPECT_TRUE(cache.ok());
  if (cache.ok()) {
    EXPECT_TRUE(m.forward(prompt.data(), n, *cache, nullptr, out.data()).ok());
  }
  return out;
}

struct Result {
  int exit_code = -1;
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `binary` (or $MMSERVE_TEST_BINARY, a build carried elsewhere) with `args`.
inline Result run_binary(const std::string& binary, const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  const fs::path err_file = fs::temp_directory_path() / ("mmserve_quant_test_err_" + std::to_string(::getpid()));
  const char* carried = std::getenv("MMSERVE_TEST_BINARY");
  std::string cmd = quote(carried != nullptr && *carried != '\0' ? carried : binary);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " 2>" + quote(err_file.string());
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  fs::remove(err_file);
  return r;
}

// `dir` (created) with config.json and model.safetensors copied from `model_dir` and the byte-level tokenizer.json.
inline std::string with_byte_tokenizer(const std::string& model_dir, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(model_dir) / f, dir / f);
  nlohmann::json vocab = nlohmann::json::object();
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : 256 + extra++;
    vocab[cp < 0x80 ? std::string(1, static_cast<char>(cp))
                    : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))}] = b;
  }
  const nlohmann::json level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::json model = {{"type", "BPE"},
                                {"dropout", nullptr},
                                {"unk_token", nullptr},
                                {"continuing_subword_prefix", nullptr},
                                {"end_of_word_suffix", nullptr},
                                {"fuse_unk", false},
                                {"byte_fallback", false},
                                {"vocab", vocab},
                                {"merges", nlohmann::json::array()}};
  const nlohmann::json tokenizer = {{"version", "1.0"},
                                    {"truncation", nullptr},
                                    {"padding", nullptr},
                                    {"added_tokens", nlohmann::json::array()},
                                    {"normalizer", nullptr},
                                    {"pre_tokenizer", level},
                                    {"post_processor", nullptr},
                                    {"decoder", level},
                                    {"model", model}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  return dir.string();
}

}  // namespace mmserve::models::quant_test
